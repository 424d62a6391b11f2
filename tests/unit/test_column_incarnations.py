"""A column dropped and added again between a backfill's plan and its commit: the commit is refused, nothing lands.

Lance gives a column re-added after the highest-numbered columns were dropped the very field ids they had, so a
stale plan's column file would land in the new column and be read as its type.  The stages run through the
in-process task runner (no JVM); tests/spark/test_column_incarnations.py runs the same on Spark.
"""

from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import ColumnIncarnation
from geneva_provider.core.errors import ColumnReplacedError
from geneva_provider.core.fingerprints import fingerprint_column, fingerprint_field
from geneva_provider.core.fragments import column_leaf_ids
from geneva_provider.core.incarnations import check_incarnations, incarnations
from geneva_provider.core.store.layout import JobStore
from geneva_provider.pipeline.columns.layout import complete_output_layout, missing_outputs
from geneva_provider.stages import (
    BackfillOptions,
    InProcessRunner,
    load_plan,
    plan_backfill,
    plan_refresh,
    run_apply,
    run_write_commit,
)
from tests.helpers import counting_dims, counting_double, counting_split, dims_of, events_table, read_calls
from tests.unit.test_udtf_views import docs_table

ROWS = 300
NEW = {
    "string": (pa.string(), lambda x: f"#{x}"),
    "float64": (pa.float64(), lambda x: x / 4),
    "int64": (pa.int64(), lambda x: 3 * x),  # the same type: another incarnation all the same
}


def new_udf(kind: str, name: str = "recreated", version: str | None = None) -> gp.UDF:
    """A UDF of the type ``kind`` names, computing its values of x."""
    data_type, fn = NEW[kind]

    def recreated(x: int):
        return fn(x)

    return gp.udf(data_type=data_type, name=name, version=version)(recreated)


@gp.udf(data_type=pa.int64(), name="doubled", version="1")
def doubled(x: int) -> int:
    return 2 * x


@gp.udf(data_type=pa.float64(), name="quartered")
def quartered(x: int) -> float:
    """x / 4: what column ``y`` becomes when it is declared again as float64 (importable by the DAG tests)."""
    return x / 4


def planned_and_applied(db: gp.Connection, runner: InProcessRunner) -> tuple[gp.Table, str]:
    """A table whose column ``y``'s backfill is planned and applied, not yet written; the plan's URI."""
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=100)
    tbl.add_columns({"y": doubled})
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(checkpoint_size=50), parallelism=runner.parallelism())
    assert run_apply(summary.plan_uri, runner).rows_computed == ROWS
    return tbl, summary.plan_uri


def data_files(tbl: gp.Table) -> list[str]:
    """The files in the table's data directory (committed or not)."""
    return sorted(os.listdir(os.path.join(tbl.uri, "data")))


def field_ids(tbl: gp.Table) -> dict[str, int]:
    return {f.name(): f.id() for f in tbl.dataset().lance_schema.fields()}


def test_lance_gives_a_column_re_added_after_the_highest_ids_were_dropped_the_same_field_ids(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(pa.table({"x": [1, 2, 3]}), uri)
    ds.add_columns([pa.field("a", pa.int64()), pa.field("c", pa.int64())])
    lance.dataset(uri).drop_columns(["a"])  # not the highest: its id stays taken
    lance.dataset(uri).add_columns(pa.field("a", pa.string()))
    assert {f.name(): f.id() for f in lance.dataset(uri).lance_schema.fields()} == {"x": 0, "c": 2, "a": 3}
    lance.dataset(uri).drop_columns(["a"])  # the highest: its id is free again
    lance.dataset(uri).add_columns(pa.field("a", pa.float64()))
    assert {f.name(): f.id() for f in lance.dataset(uri).lance_schema.fields()} == {"x": 0, "c": 2, "a": 3}


@pytest.mark.parametrize("kind", list(NEW))
def test_the_check_tells_a_re_created_column_from_the_planned_one_whatever_its_type(db, kind):
    tbl = db.create_table("events", events_table(10))
    tbl.add_columns({"y": doubled})
    planned = incarnations(tbl.dataset(), ["y"])
    check_incarnations(tbl.dataset(), ["y"], planned[0].field_ids, planned, "events", "commit")  # the same: passes
    ids = field_ids(tbl)
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": new_udf(kind)})
    assert field_ids(tbl) == ids  # Lance reused the ids: names and ids cannot tell
    now = incarnations(tbl.dataset(), ["y"])[0]
    with pytest.raises(ColumnReplacedError) as err:
        check_incarnations(tbl.dataset(), ["y"], planned[0].field_ids, planned, "events", "commit of column(s) 'y'")
    message = str(err.value)
    assert "column 'y' of table 'events' was dropped and re-created" in message
    assert planned[0].describe() in message and now.describe() in message
    assert planned[0].uid != now.uid and planned[0].uid in message and now.uid in message
    assert not err.value.retryable  # a retry of the same plan meets the same column


def test_a_column_re_added_by_pylance_as_a_plain_column_of_the_same_type_is_another_incarnation(db):
    tbl = db.create_table("events", events_table(10))
    tbl.add_columns({"y": doubled})
    planned = incarnations(tbl.dataset(), ["y"])
    lance.dataset(tbl.uri).drop_columns(["y", "__geneva_fp__y"])
    lance.dataset(tbl.uri).add_columns(pa.field("y", pa.int64()))
    assert incarnations(tbl.dataset(), ["y"])[0] == ColumnIncarnation(
        column="y", uid="", field_ids=planned[0].field_ids, type="int64")
    with pytest.raises(ColumnReplacedError, match=r"column_uid \(none\)"):
        check_incarnations(tbl.dataset(), ["y"], planned[0].field_ids, planned, "events", "commit")


@pytest.mark.parametrize("kind", list(NEW))
def test_a_write_commit_after_its_column_was_re_created_is_refused_and_a_rerun_computes_the_new_column(db, kind):
    runner = InProcessRunner(parallelism=2)
    tbl, plan_uri = planned_and_applied(db, runner)
    plan, store = load_plan(plan_uri)
    ids = field_ids(tbl)
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": new_udf(kind)})
    assert field_ids(tbl) == ids  # the same field ids: only the incarnation tells
    before, files = tbl.dataset().version, data_files(tbl)
    now = incarnations(tbl.dataset(), ["y"])[0]

    with pytest.raises(ColumnReplacedError) as err:
        run_write_commit(plan_uri, runner)  # an Airflow retry, a slow writer, a notebook's next cell
    assert data_files(tbl) == files  # refused before any column file was written
    message = str(err.value)
    assert "column 'y' of table 'events' was dropped and re-created" in message
    assert plan.incarnations[0].describe() in message and now.describe() in message
    assert "nothing was committed" in message
    ds = tbl.dataset()
    assert ds.version == before  # nothing committed
    ds.validate()
    assert ds.schema.field("y").type == NEW[kind][0]
    assert ds.to_table(columns=["y"]).column("y").to_pylist() == [None] * ROWS  # readable, all NULL
    assert not JobStore(store).is_committed(plan.job_id)

    job = tbl.backfill("y", spark=runner)  # the rerun plans afresh
    assert job.rows_computed == ROWS
    got = tbl.to_arrow(["x", "y"])
    assert got.column("y").type == NEW[kind][0]
    fn = NEW[kind][1]
    assert dict(zip(got.column("x").to_pylist(), got.column("y").to_pylist(), strict=True)) == {
        x: fn(x) for x in range(ROWS)}
    tbl.dataset().validate()


@pytest.mark.parametrize("kind", ["string", "float64"])
def test_values_checkpointed_for_another_type_are_never_written_into_the_re_created_column(db, kind):
    """The same UDF name and version (the user's) with another type: the old checkpoints are not reused."""
    runner = InProcessRunner(parallelism=2)
    tbl, _ = planned_and_applied(db, runner)  # checkpoints of int64 values under name 'doubled', version '1'
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": new_udf(kind, name="doubled", version="1")})
    job = tbl.backfill("y", spark=runner, checkpoint_size=50)
    assert job.rows_computed == ROWS and job.rows_reused == 0
    got = tbl.to_arrow(["x", "y"])
    assert dict(zip(got.column("x").to_pylist(), got.column("y").to_pylist(), strict=True)) == {
        x: NEW[kind][1](x) for x in range(ROWS)}
    tbl.dataset().validate()


def test_a_chunker_views_commit_refuses_new_rows_under_a_column_re_created_since_its_plan(db, tmp_path):
    """A UDTF refresh adds fragments whose files hold the view's columns as planned: never under a new column."""
    runner = InProcessRunner()
    calls = tmp_path / "split"
    calls.mkdir()
    docs = db.create_table("docs", docs_table(range(60)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(calls)))
    summary = plan_refresh(view.ref, parallelism=runner.parallelism())
    assert run_apply(summary.plan_uri, runner).rows_computed == 60
    plan, store = load_plan(summary.plan_uri)
    ds = view.dataset()
    last = max(ds.lance_schema.fields(), key=lambda f: f.id())  # the highest id: Lance gives it to the new column
    old_type = ds.schema.field(last.name()).type
    lance.dataset(view.uri).drop_columns([last.name()])
    lance.dataset(view.uri).add_columns(pa.field(last.name(), pa.string()))
    assert view.dataset().lance_schema.field(last.name()).id() == last.id()
    before, rows = view.dataset().version, view.count_rows()

    with pytest.raises(ColumnReplacedError) as err:
        run_write_commit(summary.plan_uri, runner)
    message = str(err.value)
    assert f"column '{last.name()}' of table 'chunks' was dropped and re-created" in message
    assert f"type {old_type}" in message and "type string" in message
    assert view.dataset().version == before and view.count_rows() == rows  # no row added
    assert not JobStore(store).is_committed(plan.job_id)
    view.dataset().validate()


def test_a_view_refresh_write_commit_after_its_udf_column_was_re_created_is_refused(db, call_dir):
    runner = InProcessRunner(parallelism=2)
    src = db.create_table("events", events_table(ROWS), max_rows_per_file=100)
    view = db.create_materialized_view("evens", src.search(None).where("x % 2 = 0").select(
        {"x": "x", "y": counting_double(call_dir)}))
    summary = plan_refresh(view.ref, parallelism=runner.parallelism())
    assert run_apply(summary.plan_uri, runner).rows_computed == ROWS // 2
    plan, store = load_plan(summary.plan_uri)
    ds = view.dataset()
    last = max(ds.lance_schema.fields(), key=lambda f: f.id())  # the highest id: Lance gives it to the new column
    lance.dataset(view.uri).drop_columns([last.name()])
    lance.dataset(view.uri).add_columns(pa.field(last.name(), pa.string()))
    assert view.dataset().lance_schema.field(last.name()).id() == last.id()
    before = view.dataset().version

    with pytest.raises(ColumnReplacedError, match=rf"column '{last.name()}' of table 'evens' was dropped and "
                                                  r"re-created.*type string"):
        run_write_commit(summary.plan_uri, runner)
    assert view.dataset().version == before and not JobStore(store).is_committed(plan.job_id)
    view.dataset().validate()
    assert view.dataset().to_table(columns=[last.name()]).column(last.name()).null_count == ROWS // 2


def test_a_layout_repair_never_commits_into_a_column_re_created_after_it_looked(db):
    """The repair gives fragments missing a fingerprint an all-NULL file for it, built from the table as it
    looked: a fingerprint column re-created with another type since is refused, not filled with uint64 NULLs."""
    runner = InProcessRunner(parallelism=2)
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=100)
    tbl.add_columns({"y": doubled})
    tbl.backfill("y", spark=runner)
    fp = fingerprint_column("y")
    lance.dataset(tbl.uri).drop_columns([fp])  # outside the package: the values stay, their fingerprints go
    lance.dataset(tbl.uri).add_columns(fingerprint_field("y"))
    looked = tbl.dataset()  # every fragment stores y without fp: the repair's case
    assert all(missing_outputs(f.metadata, {c: column_leaf_ids(looked, c) for c in ["y", fp]}) == (fp,)
               for f in looked.get_fragments())
    fp_id = looked.lance_schema.field(fp).id()
    lance.dataset(tbl.uri).drop_columns([fp])
    lance.dataset(tbl.uri).add_columns(pa.field(fp, pa.string()))  # re-created, with the same (the highest) id
    assert tbl.dataset().lance_schema.field(fp).id() == fp_id
    before = tbl.dataset().version

    with pytest.raises(ColumnReplacedError, match=rf"column '{fp}' of table 'events' was dropped and re-created"):
        complete_output_layout(tbl.ref, looked, ["y", fp])
    assert tbl.dataset().version == before
    tbl.dataset().validate()
    assert tbl.dataset().to_table(columns=[fp]).column(fp).null_count == ROWS


def test_a_multi_output_groups_write_commit_after_the_group_was_re_created_is_refused(db, call_dir):
    runner = InProcessRunner(parallelism=2)
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=100)
    tbl.add_columns(counting_dims(call_dir))  # height, label, ratio: one incarnation
    summary = plan_backfill(tbl.ref, "label", parallelism=runner.parallelism())
    assert run_apply(summary.plan_uri, runner).rows_computed == ROWS
    ids = field_ids(tbl)
    tbl.drop_columns(["height", "label", "ratio"])
    tbl.add_columns(counting_dims(call_dir))  # the same UDF declared again: a new incarnation, the same ids
    assert field_ids(tbl) == ids
    before = tbl.dataset().version

    with pytest.raises(ColumnReplacedError, match=r"column 'height' of table 'events' was dropped and re-created"):
        run_write_commit(summary.plan_uri, runner)
    assert tbl.dataset().version == before
    tbl.dataset().validate()
    assert tbl.to_arrow(["label"]).column("label").null_count == ROWS
    assert tbl.backfill("label", spark=runner).rows_computed == ROWS
    got = tbl.to_arrow(["x", "height", "label", "ratio"]).to_pydict()
    assert list(zip(got["height"], got["label"], got["ratio"], strict=True)) == [dims_of(x) for x in got["x"]]


class RecreateAfterWriting(InProcessRunner):
    """Runs the write stage's tasks, then drops column ``y`` and adds it again as ``kind`` -- after the column
    files were written, before the driver commits them: the slow writer's race, at its exact point."""

    def __init__(self, tbl: gp.Table, kind: str) -> None:
        super().__init__(parallelism=2)
        self.tbl, self.kind = tbl, kind

    def run_tasks(self, tasks, partition_fn, **kwargs):
        results = super().run_tasks(tasks, partition_fn, **kwargs)
        if kwargs.get("description", "").startswith("geneva write "):
            self.tbl.drop_columns(["y"])
            self.tbl.add_columns({"y": new_udf(self.kind)})
        return results


@pytest.mark.parametrize("kind", ["string", "float64"])
def test_a_column_re_created_while_its_files_were_written_is_refused_at_the_commit(db, kind):
    runner = InProcessRunner(parallelism=2)
    tbl, plan_uri = planned_and_applied(db, runner)
    plan, _ = load_plan(plan_uri)
    racing = RecreateAfterWriting(tbl, kind)
    with pytest.raises(ColumnReplacedError) as err:
        run_write_commit(plan_uri, racing)
    now = incarnations(tbl.dataset(), ["y"])[0]
    assert now.field_ids == plan.incarnations[0].field_ids and now.type == str(NEW[kind][0])
    message = str(err.value)
    assert message.startswith("commit of column(s) 'y, __geneva_fp__y': column 'y' of table 'events' was dropped "
                              "and re-created")
    assert plan.incarnations[0].describe() in message and now.describe() in message
    ds = tbl.dataset()
    ds.validate()
    assert ds.to_table(columns=["y"]).column("y").null_count == ROWS  # readable, nothing landed
    assert tbl.backfill("y", spark=runner).rows_computed == ROWS
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [NEW[kind][1](x) for x in range(ROWS)]


def test_an_apply_after_its_column_was_re_created_computes_nothing_and_is_refused(db, call_dir):
    runner = InProcessRunner(parallelism=2)
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl.ref, "y", parallelism=runner.parallelism())
    plan, store = load_plan(summary.plan_uri)
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": quartered})
    with pytest.raises(ColumnReplacedError, match=rf"apply of job {plan.job_id} .*column 'y' of table 'events' was "
                                                  r"dropped and re-created.*type int64.*type double"):
        run_apply(summary.plan_uri, runner)
    assert read_calls(call_dir) == [] and list(JobStore(store).batches(plan.job_prefix)) == []  # nothing computed
    assert JobStore(store).record(plan.job_id).status == "FAILED"
    assert tbl.backfill("y", spark=runner).rows_computed == ROWS
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [x / 4 for x in range(ROWS)]


def test_a_plan_stored_by_an_earlier_release_without_incarnations_still_writes_and_commits(db):
    runner = InProcessRunner(parallelism=2)
    tbl, plan_uri = planned_and_applied(db, runner)
    plan, store = load_plan(plan_uri)
    jobs = JobStore(store)
    document = json.loads(jobs.plan_text(plan.job_id))
    assert [i["column"] for i in document.pop("incarnations")] == ["y", "__geneva_fp__y"]
    jobs.put_plan(plan.job_id, json.dumps(document))  # what the release before this one stored
    assert load_plan(plan_uri)[0].incarnations == []
    assert run_write_commit(plan_uri, runner).rows_committed == ROWS
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [2 * x for x in range(ROWS)]
    tbl.dataset().validate()
