"""The follower graph is data: a new step kind, registered here in the test (one class, one edge rule, one
task-group factory, one facade runner) after a column's backfill, shows up in ``table_change_dag``'s tasks and in
``Connection.follow``'s walk without any change to their wiring; real Lance tables, the in-process task runner."""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.facade.followers import run_step
from geneva_provider.pipeline.followers import (
    BackfillColumn,
    ColumnBackfilled,
    RefreshView,
    Step,
    TableChange,
    follows,
    register_step,
    step_from_json,
)
from geneva_provider.stages import InProcessRunner


@pytest.fixture
def registries(monkeypatch):
    """The step, rule and task-group registries as they were, after the test (its kinds leave with it)."""
    from geneva_provider import task_groups
    from geneva_provider.pipeline.followers import graph

    monkeypatch.setattr(graph, "_STEPS", dict(graph._STEPS))
    monkeypatch.setattr(graph, "_RULES", {event: list(rules) for event, rules in graph._RULES.items()})
    monkeypatch.setattr(task_groups, "_FOLLOWER_GROUPS", dict(task_groups._FOLLOWER_GROUPS))


@gp.udf(data_type=pa.int64(), auto_backfill=True)
def triple(x: int) -> int:
    return 3 * x


def tables(db):
    src = db.create_table("src", pa.table({"x": list(range(20))}), max_rows_per_file=5)
    src.add_columns({"z": triple})
    evens = db.create_materialized_view("evens", src.search(None).where("x % 2 = 0").select({"x": "x", "z": "z"}),
                                        refresh_on_change=True)
    evens.add_columns({"t": triple})
    return src, evens


def test_a_step_kind_registered_after_a_columns_backfill_joins_the_dag_and_the_facades_walk(lance_db, registries):
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import TaskGroup

    from geneva_provider.task_groups import follower_group, table_change_dag

    seen: list[tuple[str, str, list[Any]]] = []

    @register_step
    class NoteColumn(Step):
        kind: Literal["note_column"] = "note_column"
        table: str
        column: str

        def label(self, root: str) -> str:
            return f"note_{self.table}_{self.column}"

    @follows(ColumnBackfilled)
    def note_each_backfill(event, tables):
        return [NoteColumn(table=event.table, column=event.column)]

    @follower_group("note_column")
    def note_group(step, group_id, **kwargs):
        with TaskGroup(group_id=group_id) as group:
            EmptyOperator(task_id="note")
        return group

    @run_step.register(NoteColumn)
    def note(step, db, **options):
        values = db.open_table(step.table).to_arrow().sort_by("x").column(step.column).to_pylist()
        seen.append((step.table, step.column, values))
        return len(values)

    src, evens = tables(lance_db)
    plan = lance_db.followers("src")
    assert plan.steps() == [BackfillColumn(table="src", column="z"), RefreshView(view="evens", source="src"),
                            NoteColumn(table="src", column="z"), BackfillColumn(table="evens", column="t"),
                            NoteColumn(table="evens", column="t")]
    assert [f.after for f in plan.followers] == [(), (0,), (0,), (1,), (3,)]
    assert step_from_json(plan.followers[2].step.model_dump_json()) == NoteColumn(table="src", column="z")

    dag = table_change_dag("src", retries=0)
    assert dag.task_group_dict["note_src_z"].upstream_task_ids == {"after_backfill_z"}
    assert dag.task_dict["after_backfill_z"].upstream_task_ids == {"backfill_z.verify"}
    assert dag.task_group_dict["note_evens_t"].upstream_task_ids == {"after_backfill_evens_t"}
    assert dag.task_dict["after_backfill_evens_t"].upstream_task_ids == {"backfill_evens_t.verify"}
    assert dag.task_dict["after_src_for_evens"].upstream_task_ids == {"backfill_z.verify"}  # the view waits not
    assert "note_src_z.note" in dag.task_dict

    ran = lance_db.follow("src", spark=InProcessRunner(), progress=False)
    assert [r.step for r in ran] == plan.steps()
    assert [r.result.rows_computed for r in ran if isinstance(r.step, BackfillColumn)] == [20, 10]
    # each note ran after its column's backfill committed: every value there
    assert seen == [("src", "z", [3 * x for x in range(20)]), ("evens", "t", [3 * x for x in range(0, 20, 2)])]
    assert evens.to_arrow().sort_by("x").column("z").to_pylist() == [3 * x for x in range(0, 20, 2)]
    src.dataset().validate()
    evens.dataset().validate()

    seen.clear()  # what follows one backfill alone: the note
    assert [r.step for r in lance_db.follow(ColumnBackfilled(table="src", column="z"), spark=InProcessRunner())] == [
        NoteColumn(table="src", column="z")]
    assert [t for t, _, _ in seen] == ["src"]


def test_a_step_kind_with_no_factory_or_runner_is_refused_naming_it(lance_db, registries):
    from geneva_provider.task_groups import table_change_dag

    @register_step
    class Orphan(Step):
        kind: Literal["orphan"] = "orphan"
        table: str

    @follows(TableChange)
    def orphan_after_change(event, tables):
        return [Orphan(table=event.table)]

    src, _ = tables(lance_db)
    with pytest.raises(gp.InvalidArgumentError, match=r"has no task-group factory; register one with "
                                                      r"@follower_group\('orphan'\)"):
        table_change_dag("src")
    with pytest.raises(gp.InvalidArgumentError, match=r"Orphan.*has no runner"):
        lance_db.follow("src", spark=InProcessRunner(), progress=False)
    z = src.to_arrow().column("z").to_pylist()
    assert z == [3 * x for x in range(20)]  # the steps before it ran; it stopped there

    class Twin(Step):
        kind: Literal["orphan"] = "orphan"

    with pytest.raises(gp.InvalidArgumentError, match="'orphan' is already registered"):
        register_step(Twin)
    with pytest.raises(gp.InvalidArgumentError, match="unknown follower step kind 'nope'"):
        step_from_json('{"kind": "nope"}')
    with pytest.raises(gp.TableNotFoundError, match="missing"):
        lance_db.followers("missing")


def test_the_command_line_lists_a_tables_followers_in_order(db, capsys):
    import json

    from geneva_provider.cli import main

    tables(db)
    assert main(["--db", db.uri, "table", "followers", "src"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["step", "kind", "after"]
    assert rows[2:] == [["backfill_z", "backfill_column"], ["refresh_evens", "refresh_view", "backfill_z"],
                        ["backfill_evens_t", "backfill_column", "refresh_evens"]]
    assert main(["--db", db.uri, "--json", "table", "followers", "evens"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["event"] == {"table": "evens"}
    assert [(f["step"], f["after"]) for f in plan["followers"]] == [
        ({"kind": "backfill_column", "table": "evens", "column": "t"}, [])]
    assert main(["--db", db.uri, "table", "followers", "missing"]) != 0
    assert "missing" in capsys.readouterr().err


def test_an_index_refresh_waiting_for_a_views_refresh_and_its_backfill_gets_a_join_of_its_own(lance_db):
    from geneva_provider.pipeline.followers import RefreshIndex
    from geneva_provider.task_groups import table_change_dag

    _, evens = tables(lance_db)
    evens.create_scalar_index("x", spark=InProcessRunner())  # on a column the view's refresh writes
    plan = lance_db.followers("src")
    steps = plan.steps()
    index = steps.index(RefreshIndex(table="evens", index="x_idx"))
    # caused by the view's refresh, as the view's backfill is, but it also waits for that backfill
    assert plan.followers[plan.cause_of(index)].step == RefreshView(view="evens", source="src")
    assert steps.index(BackfillColumn(table="evens", column="t")) in plan.followers[index].after

    dag = table_change_dag("src", retries=0)
    dag.check_cycle()  # the view's shared join would otherwise wait for the backfill that waits for it
    assert dag.task_group_dict["backfill_evens_t"].upstream_task_ids == {"after_refresh_evens"}
    assert dag.task_group_dict["index_evens_x_idx"].upstream_task_ids == {"before_index_evens_x_idx"}
    assert dag.task_dict["before_index_evens_x_idx"].upstream_task_ids == {"refresh_evens.verify",
                                                                          "backfill_evens_t.verify"}
