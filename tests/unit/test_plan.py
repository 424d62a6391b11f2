"""Planning and bad input: errors name the table, column or argument, before Spark starts."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.store.layout import BatchKey, batch_prefix
from geneva_provider.stages import BackfillOptions, load_plan, plan_backfill
from tests.helpers import events_table


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return x * 2


@pytest.fixture
def tbl(db):
    t = db.create_table("events", events_table(10_000), max_rows_per_file=3_000)
    t.add_columns({"y": double})
    return t


def test_plan_tasks_are_fragment_local_and_bounded(tbl):
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(task_size=1_000, checkpoint_size=500))
    plan, _ = load_plan(summary.plan_uri)
    assert summary.rows_to_compute == 10_000 and summary.tasks == 10
    physical = {f.id: f.physical_rows for f in plan.fragments}
    assert physical == {0: 3000, 1: 3000, 2: 3000, 3: 1000}
    for t in plan.tasks:
        assert t.rows <= 1_000
        for p in t.parts:
            assert 0 <= p.start < p.end <= physical[p.frag]
    covered = sorted((p.frag, p.start, p.end) for t in plan.tasks for p in t.parts)
    assert sum(e - s for _, s, e in covered) == 10_000
    assert set(summary.to_xcom()) >= {"job_id", "plan_uri", "rows_to_compute", "tasks", "fragments_reused"}


@pytest.mark.parametrize(("rows", "per_fragment", "parallelism"), [
    (100_000, 25_000, 2), (100_000, 7_000, 2), (250_000, 40_000, 8), (30_000, 30_000, 3), (100_000, 100, 2)])
def test_default_tasks_shrink_towards_the_end_and_cover_every_row_once(db, rows, per_fragment, parallelism):
    t = db.create_table("wide", events_table(rows), max_rows_per_file=per_fragment)
    t.add_columns({"y": double})
    plan, _ = load_plan(plan_backfill(t.ref, "y", parallelism=parallelism).plan_uri)
    sizes = [task.rows for task in plan.tasks]
    # Every row of every fragment exactly once: each fragment's parts tile [0, rows) contiguously.
    for frag in plan.fragments:
        ranges = sorted((p.start, p.end) for task in plan.tasks for p in task.parts if p.frag == frag.id)
        assert ranges[0][0] == 0 and ranges[-1][1] == frag.rows
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert sum(sizes) == rows
    # Run largest first, and (guided) sizes never grow: the tail is made of small tasks.
    assert sizes == sorted(sizes, reverse=True)
    # No task is bigger than 1/parallelism of the rows (plus a fragment's tail it absorbs), and at most
    # the last one is below the floor of 1/(16 x parallelism) of all rows.
    floor = -(-rows // (16 * parallelism))
    assert max(sizes) <= -(-rows // parallelism) + floor
    assert len([s for s in sizes if s < floor]) <= 1
    # Fewer tasks than equal floor-sized ones, and enough to keep every slot busy.
    assert parallelism <= len(sizes) < rows / floor


def test_plan_skips_rows_already_checkpointed(tbl):
    first, _ = load_plan(plan_backfill(tbl.ref, "y", BackfillOptions(task_size=1_000)).plan_uri)
    prefix = batch_prefix(first.job_prefix, src_key=next(f.src_key for f in first.fragments if f.id == 1))
    store = tbl.checkpoint_store
    # A checkpoint (of any earlier job, whatever its filter) holding rows 0..1499 and 2000..2099 of fragment 1.
    held = [*range(1_500), *range(2_000, 2_100)]
    store[BatchKey(prefix, 1, 0, 2_100).key()] = pa.table({
        "_rowaddr": pa.array([(1 << 32) + i for i in held], pa.uint64()), "y": pa.array(held, pa.int64()),
        "__geneva_fp__y": pa.array(held, pa.uint64())})
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(task_size=1_000))
    plan, _ = load_plan(summary.plan_uri)
    assert summary.rows_to_compute == 10_000 - 1_600 and summary.rows_reused == 1_600
    planned = sorted(i for t in plan.tasks for p in t.parts if p.frag == 1 for s, e in p.ranges for i in range(s, e))
    assert planned == [*range(1_500, 2_000), *range(2_100, 3_000)]


def test_plan_counts_filtered_rows(tbl):
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(where="x < 2500"))
    assert summary.rows_to_compute == 2_500 and summary.fragments_to_compute == 1


def _unchanged(tbl, version, fn, exc_type, *needles):
    with pytest.raises(exc_type) as exc:
        fn()
    for needle in needles:
        assert needle in str(exc.value), (needle, str(exc.value))
    assert tbl.version == version
    return exc.value


def test_bad_backfill_arguments_fail_before_spark(tbl):
    v = tbl.version
    _unchanged(tbl, v, lambda: tbl.backfill("nope"), gp.ColumnError, "'nope'", "'events'")
    _unchanged(tbl, v, lambda: tbl.backfill("x"), gp.ColumnError, "'x'", "not a UDF column")
    _unchanged(tbl, v, lambda: tbl.backfill("y", where="nosuch > 3"), gp.InvalidArgumentError,
               "nosuch > 3", "'events'")
    _unchanged(tbl, v, lambda: tbl.backfill("y", where="x >>> 3"), gp.InvalidArgumentError, "invalid where")
    for arg in ("checkpoint_size", "min_checkpoint_size", "max_checkpoint_size", "task_size",
                "commit_granularity", "concurrency"):
        for bad in (0, -5):
            _unchanged(tbl, v, lambda arg=arg, bad=bad: tbl.backfill("y", **{arg: bad}), gp.InvalidArgumentError,
                       arg, "positive")
    _unchanged(tbl, v, lambda: tbl.backfill("y", min_checkpoint_size=10, max_checkpoint_size=5),
               gp.InvalidArgumentError, "min_checkpoint_size 10 > max_checkpoint_size 5")
    assert tbl.checkpoint_store.list_keys("udf-") == []


def test_bad_add_columns_fail_and_leave_table_unchanged(tbl):
    v = tbl.version

    @gp.udf(data_type=pa.int64())
    def needs_z(z: int) -> int:
        return z

    _unchanged(tbl, v, lambda: tbl.add_columns({"y": (double, ["id"])}), gp.ColumnError, "'y'", "already exists",
               "'events'", "input columns ['id'], not ['x']")
    _unchanged(tbl, v, lambda: tbl.add_columns({"w": needs_z}), gp.ColumnError, "'w'", "['z']", "'events'")
    _unchanged(tbl, v, lambda: tbl.add_columns({"w": (double, ["x", "id"])}), gp.InvalidArgumentError, "'w'")
    _unchanged(tbl, v, lambda: tbl.add_columns({"w": lambda x: x}), gp.InvalidArgumentError, "'w'", "@udf")


def test_missing_udf_input_column_is_reported(tbl):
    tbl.add_columns({"w": (double, ["id"])})
    tbl.dataset().drop_columns(["id"])  # in Lance directly: drop_columns refuses to drop a UDF input
    v = tbl.version
    _unchanged(tbl, v, lambda: tbl.backfill("w"), gp.ColumnError, "'w'", "['id']", "'events'")


def test_add_columns_is_metadata_only_and_maps_inputs(tbl):
    files_before = [[f.path for f in fr.metadata.files] for fr in tbl.dataset().get_fragments()]
    tbl.add_columns({"z": (double, ["id"])})
    assert [[f.path for f in fr.metadata.files] for fr in tbl.dataset().get_fragments()] == files_before
    assert tbl.udf_columns()["z"]["input_columns"] == ["id"]
    assert tbl.to_arrow(["z"]).column("z").null_count == 10_000


def test_tables_in_a_database(db):
    db.create_table("a", events_table(5))
    db.create_table("b", events_table(5))
    assert db.table_names() == ["a", "b"]
    with pytest.raises(gp.InvalidArgumentError, match="'a' already exists"):
        db.create_table("a", events_table(5))
    assert db.create_table("a", events_table(7), mode="overwrite").count_rows() == 7
    db.drop_table("a")
    assert db.table_names() == ["b"]
    with pytest.raises(gp.TableNotFoundError, match="'a'"):
        db.open_table("a")
    t = db.open_table("b")
    t.add(events_table(3, start=5))
    t.delete("x = 0")
    assert t.count_rows() == 7 and t.to_arrow(["x"]).column("x").to_pylist() == [1, 2, 3, 4, 5, 6, 7]


def test_only_filter_errors_read_as_invalid_filters(tbl):
    import shutil

    from geneva_provider.core.filters import check_where

    ds = tbl.dataset()
    with pytest.raises(gp.InvalidArgumentError, match=r"invalid where filter 'nosuch > 1' for table 'events'"):
        check_where(ds, "nosuch > 1", "table 'events'")
    shutil.rmtree(f"{tbl.uri}/data")  # an I/O failure is not the filter's fault, and is not reported as one
    with pytest.raises(Exception) as exc:
        tbl.backfill("y", where="x > 5")
    assert not isinstance(exc.value, gp.InvalidArgumentError)
    assert "invalid where filter" not in str(exc.value) and "Not found" in str(exc.value)


# What no error may list as a table's column: the package's fingerprints and view bookkeeping, Lance's own.
INTERNAL = ("__geneva_fp", "_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "__source_row_id",
            "__is_set", "__chunk_index", "__source_fp", "__partition")


def test_a_where_naming_a_missing_column_lists_only_the_users_columns(tbl):
    assert "__geneva_fp__y" in tbl.schema.names  # the UDF column's fingerprints are in the table
    attempts = {"backfill": lambda: tbl.backfill("y", where="nosuch > 1"),
                "count_rows": lambda: tbl.count_rows("nosuch > 1"),
                "to_arrow": lambda: tbl.to_arrow(["x"], filter="x > 1 AND nosuch > 1"),
                "delete": lambda: tbl.delete("nosuch > 1"),
                "view": lambda: tbl.connection.create_materialized_view(
                    "v", tbl.search(None).where("nosuch > 1").select(["x"]))}
    for what, attempt in attempts.items():
        with pytest.raises(gp.InvalidArgumentError) as exc:
            attempt()
        msg = str(exc.value)
        assert "nosuch" in msg and "'events'" in msg and "['id', 'x', 'y']" in msg, (what, msg)
        assert not [name for name in INTERNAL if name in msg], (what, msg)
    assert tbl.count_rows() == 10_000 and sorted(tbl.connection.table_names()) == ["events"]


def test_column_backlog_of_an_unknown_column_names_table_and_column(tbl):
    from geneva_provider.core.table_status import column_backlog

    with pytest.raises(gp.ColumnError, match=r"column 'nope' not found in table 'events'"):
        column_backlog(tbl.dataset(), "nope", "events")


def test_a_plan_of_another_format_is_refused_clearly(tbl):
    import json

    from geneva_provider.core.contracts.models import PLAN_FORMAT
    from geneva_provider.core.store.layout import PlanKey

    summary = plan_backfill(tbl.ref, "y")
    store = tbl.checkpoint_store
    key = PlanKey(summary.job_id).key()
    old = json.loads(store.get_text(key))
    store.put_text(key, json.dumps({**old, "format": 1}))
    with pytest.raises(gp.PlanFormatError, match=rf"has plan format 1, expected {PLAN_FORMAT}"):
        load_plan(summary.plan_uri)
    with pytest.raises(gp.InvalidArgumentError, match="plan not found"):
        load_plan(summary.plan_uri.replace(summary.job_id, "nope"))


def test_small_fragments_are_packed_into_few_tasks(db):
    t = db.create_table("tiny", events_table(20_000), max_rows_per_file=10)  # 2,000 fragments of 10 rows
    t.add_columns({"y": double})
    plan, _ = load_plan(plan_backfill(t.ref, "y", parallelism=2).plan_uri)
    assert len(plan.fragments) == 2_000 and len(plan.tasks) <= 16
    parts = sorted((p.frag, p.start, p.end) for task in plan.tasks for p in task.parts)
    assert parts == [(f, 0, 10) for f in range(2_000)]  # a part never spans fragments, each fragment once
    fixed, _ = load_plan(plan_backfill(t.ref, "y", BackfillOptions(task_size=1_000)).plan_uri)
    assert [task.rows for task in fixed.tasks] == [1_000] * 20
