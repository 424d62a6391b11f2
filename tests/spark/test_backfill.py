"""Backfills on real Lance tables with a real local[2] Spark session."""

from __future__ import annotations

import sys
import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import CommitError
from geneva_provider.core.store.checkpoint import ROWADDR
from geneva_provider.core.store.layout import JobStore
from geneva_provider.pipeline.stages.planning import staged_files
from geneva_provider.stages import BackfillOptions, load_plan, plan_backfill, run_apply, run_write_commit, verify
from tests.helpers import (
    clear_calls,
    counting_array_triple,
    counting_batch_sum,
    counting_double,
    events_table,
    failing_table,
    read_calls,
    stateful_offset,
)


def data_files(tbl) -> dict[int, list[str]]:
    return {f.fragment_id: sorted(df.path for df in f.metadata.files) for f in tbl.dataset().get_fragments()}


def column(tbl, name, filter=None) -> dict[int, object]:
    t = tbl.to_arrow(["x", name], filter=filter)
    return dict(zip(t.column("x").to_pylist(), t.column(name).to_pylist(), strict=True))


@pytest.fixture
def big(db):
    """100k rows in 7 fragments, with deletes in fragments 1 and 4."""
    tbl = db.create_table("events", events_table(100_000), max_rows_per_file=15_000)
    tbl.delete("(x >= 15000 AND x < 15500) OR (x >= 60000 AND x < 61000 AND x % 3 = 0)")
    return tbl


def test_backfill_every_udf_kind_on_a_table_with_deletes(big, spark, tmp_path):
    assert len(big.dataset().get_fragments()) >= 6
    deleted = set(range(15000, 15500)) | {x for x in range(60000, 61000) if x % 3 == 0}
    live = [x for x in range(100_000) if x not in deleted]
    dirs = {k: tmp_path / k for k in ("scalar", "array", "batch", "stateful")}
    for d in dirs.values():
        d.mkdir()
    big.add_columns({
        "y": counting_double(str(dirs["scalar"])),
        "t": counting_array_triple(str(dirs["array"])),
        "s": counting_batch_sum(str(dirs["batch"])),
        "o": stateful_offset(str(dirs["stateful"])),
    })
    results = {c: big.backfill(c, spark=spark, checkpoint_size=4_000) for c in ("y", "t", "s", "o")}

    ds = big.dataset()
    ds.validate()
    assert ds.count_rows() == len(live)
    got = big.to_arrow(["x", "y", "t", "s", "o"]).to_pydict()
    assert got["x"] == live
    assert got["y"] == [2 * x for x in live]
    assert got["t"] == [3 * x for x in live]
    assert got["s"] == [float(2 * x) for x in live]
    assert got["o"] == [x + 1000 for x in live]
    # The UDFs ran on live rows only, each exactly once.
    for kind in ("scalar", "array", "batch"):
        assert sorted(read_calls(dirs[kind])) == live, kind
    # A stateful UDF is built once per worker process, not per batch (2 slots -> at most a few).
    assert 1 <= len(list(dirs["stateful"].glob("*.init"))) <= 4
    for res in results.values():
        assert res.rows_computed == len(live) and res.rows_reused == 0
        assert res.fragments_committed == len(ds.get_fragments())
    assert ds.count_rows(filter="x >= 15000 AND x < 15500") == 0


def test_incremental_backfill_computes_only_appended_rows(db, spark, call_dir):
    tbl = db.create_table("events", events_table(30_000), max_rows_per_file=10_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    first = tbl.backfill("y", spark=spark)
    assert first.rows_computed == 30_000
    old_files = data_files(tbl)
    clear_calls(call_dir)

    tbl.add(events_table(10_000, start=30_000))
    tbl.add(events_table(5_000, start=40_000))
    assert len(tbl.dataset().get_fragments()) == 5
    second = tbl.backfill("y", spark=spark)

    new_calls = read_calls(call_dir)
    assert sorted(new_calls) == list(range(30_000, 45_000))
    assert second.rows_computed == 15_000 and second.rows_reused == 30_000
    files_after = data_files(tbl)
    for fid, files in old_files.items():
        assert files_after[fid] == files, f"fragment {fid} was rewritten"
    assert column(tbl, "y") == {x: 2 * x for x in range(45_000)}
    tbl.dataset().validate()

    third = tbl.backfill("y", spark=spark)
    assert third.rows_computed == 0 and data_files(tbl) == files_after


def test_where_backfills_keep_earlier_values_and_skip_unselected_rows(db, spark, call_dir, tmp_path):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=6_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    res = tbl.backfill("y", where="x % 2 = 0", spark=spark)
    assert res.rows_computed == 10_000
    assert sorted(read_calls(call_dir)) == list(range(0, 20_000, 2))
    assert column(tbl, "y") == {x: (2 * x if x % 2 == 0 else None) for x in range(20_000)}

    clear_calls(call_dir)
    res = tbl.backfill("y", where="x % 2 = 1", spark=spark)
    assert res.rows_computed == 10_000
    assert sorted(read_calls(call_dir)) == list(range(1, 20_000, 2))
    assert column(tbl, "y") == {x: 2 * x for x in range(20_000)}
    tbl.dataset().validate()


def test_rerun_after_udf_failure_computes_only_missing_ranges(db, spark, call_dir, tmp_path):
    flag = tmp_path / "fail"
    tbl = failing_table(db, call_dir, flag, 24_000, 12_000, fail_at=7_500)
    v = tbl.version
    with pytest.raises(gp.UDFExecutionError) as exc:
        tbl.backfill("y", spark=spark, checkpoint_size=1_000, task_size=12_000)
    msg = str(exc.value)
    for needle in ("UDF 'double'", "column 'y'", "table 'events'", "fragment 0", "row address 7500",
                   "ZeroDivisionError", "injected failure at x=7500"):
        assert needle in msg
    assert tbl.version == v and tbl.to_arrow(["y"]).column("y").null_count == 24_000

    store = tbl.checkpoint_store
    checkpointed = set()
    for bk in JobStore(store).batches(""):
        checkpointed.update((a & 0xFFFFFFFF) + (a >> 32) * 12_000 for a in store[bk.key()].column(ROWADDR).to_pylist())
    assert set(range(7_000)) <= checkpointed and 7_500 not in checkpointed
    clear_calls(call_dir)
    flag.unlink()
    res = tbl.backfill("y", spark=spark, checkpoint_size=1_000, task_size=12_000)
    rerun = read_calls(call_dir)
    assert not set(rerun) & checkpointed
    assert sorted(rerun) == sorted(set(range(24_000)) - checkpointed)
    assert res.rows_computed == len(rerun) and res.rows_reused == len(checkpointed)
    assert column(tbl, "y") == {x: 2 * x for x in range(24_000)}
    tbl.dataset().validate()


def test_a_lost_checkpoint_fails_the_write_naming_the_fragment_and_commits_nothing(db, spark, call_dir):
    """The writer checks every planned row against the checkpoints before writing anything of the fragment."""
    tbl = db.create_table("events", events_table(30_000), max_rows_per_file=10_000)
    tbl.delete("x >= 12000 AND x < 12100")
    tbl.add_columns({"y": counting_double(call_dir)})
    v = tbl.version
    plan_uri = plan_backfill(tbl.ref, "y", BackfillOptions(checkpoint_size=1_000, task_size=10_000)).plan_uri
    run_apply(plan_uri, spark)
    store = tbl.checkpoint_store
    lost = sorted((bk for bk in JobStore(store).batches("") if bk.frag_id == 1), key=lambda bk: bk.start)[2].key()
    rows = store[lost].num_rows
    store.delete(lost)
    with pytest.raises(gp.CheckpointMissingError) as exc:
        run_write_commit(plan_uri, spark)
    msg = str(exc.value)
    for needle in ("table 'events'", "fragment 1", f"no checkpoint for {rows} of its 9900 planned rows",
                   "run the apply stage first"):
        assert needle in msg, msg
    assert tbl.version == v and tbl.to_arrow(["y"]).column("y").null_count == 29_900
    tbl.dataset().validate()
    clear_calls(call_dir)
    res = tbl.backfill("y", spark=spark)
    assert sorted(read_calls(call_dir)) and len(read_calls(call_dir)) == rows
    assert res.rows_computed == rows
    assert column(tbl, "y") == {x: 2 * x for x in range(30_000) if not 12_000 <= x < 12_100}
    tbl.dataset().validate()


def test_dropped_and_readded_column_does_not_reuse_old_fragment_files(db, spark, call_dir):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=10_000)
    double = counting_double(call_dir)
    tbl.add_columns({"y": double})
    tbl.backfill("y", spark=spark)
    old_id = tbl.dataset().lance_schema.field("y").id()
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": double})
    # Lance hands the highest field id out again once its column is dropped: the column uid,
    # not the field id, is what tells the old staged files apart.
    assert tbl.dataset().lance_schema.field("y").id() == old_id

    summary = plan_backfill(tbl.ref, "y")
    assert summary.fragments_reused == 0 and summary.fragments_done == 0
    res = tbl.backfill("y", spark=spark)
    assert res.fragments_committed == 2 and res.fragments_reused == 0
    # Batch checkpoints are keyed by the inputs, so they may be (and are) reused.
    assert res.rows_computed == 0 and len(read_calls(call_dir)) == 20_000
    assert column(tbl, "y") == {x: 2 * x for x in range(20_000)}
    tbl.dataset().validate()


def test_two_columns_planned_together_with_interleaved_commits(db, spark, call_dir):
    tbl = db.create_table("events", events_table(30_000), max_rows_per_file=5_000)

    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def negate(x: pa.Array) -> pa.Array:
        return pc.negate(x)

    tbl.add_columns({"y": counting_double(call_dir), "z": negate})
    opts = BackfillOptions(commit_granularity=1)
    plans = [plan_backfill(tbl.ref, c, opts).plan_uri for c in ("y", "z")]
    assert len({load_plan(p)[0].read_version for p in plans}) == 1
    for p in plans:
        run_apply(p, spark)
    results, errors = {}, []

    def write(p):
        try:
            results[p] = run_write_commit(p, spark)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(r.fragments_committed == 6 for r in results.values())
    for p in plans:
        verify(p)
    got = tbl.to_arrow(["x", "y", "z"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and got["z"] == [-x for x in got["x"]]
    assert tbl.version == load_plan(plans[0])[0].read_version + 12
    tbl.dataset().validate()


def test_concurrent_commits_between_plan_and_commit_are_retried(db, spark, call_dir):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=5_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    plan_uri = plan_backfill(tbl.ref, "y").plan_uri
    run_apply(plan_uri, spark)
    # Compatible concurrent writes: an append and a delete in another fragment ...
    tbl.add(events_table(1_000, start=20_000))
    tbl.delete("x >= 15000 AND x < 15010")
    # ... and one Lance reports as a retryable conflict for a stale DataReplacement.
    tbl.dataset().add_columns(pa.field("note", pa.string()))

    written = run_write_commit(plan_uri, spark)
    assert written.commit_retries >= 1 and written.fragments_committed == 4
    verify(plan_uri)
    values = column(tbl, "y")
    assert values == {**{x: 2 * x for x in range(20_000) if not 15000 <= x < 15010},
                      **{x: None for x in range(20_000, 21_000)}}
    assert "note" in tbl.schema.names
    tbl.dataset().validate()
    # The appended rows are picked up by the next, incremental backfill.
    assert tbl.backfill("y", spark=spark).rows_computed == 1_000


def test_fragments_compacted_away_before_commit_are_reported(db, spark, call_dir):
    tbl = db.create_table("events", events_table(8_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    plan_uri = plan_backfill(tbl.ref, "y").plan_uri
    run_apply(plan_uri, spark)
    tbl.dataset().optimize.compact_files(target_rows_per_fragment=8_000)
    written = run_write_commit(plan_uri, spark)
    assert written.fragments_vanished == [0, 1, 2, 3] and written.fragments_committed == 0
    with pytest.raises(gp.VerificationError, match=r"fragment 0 \(2000 rows\) no longer exists"):
        verify(plan_uri)
    tbl.dataset().validate()
    res = tbl.backfill("y", spark=spark)
    assert res.rows_computed == 8_000
    assert column(tbl, "y") == {x: 2 * x for x in range(8_000)}


@pytest.mark.parametrize(("body", "needles"), [
    ("raise", ["UDF 'bad'", "column 'w'", "table 'events'", "fragment 0", "row address 3 ", "KeyError"]),
    ("type", ["column 'w'", "type string, expected the declared type int64"]),
    ("length", ["column 'w'", "returned 1 values for 10 input rows"]),
])
def test_udf_errors_are_clear_and_leave_the_table_unchanged(db, spark, body, needles):
    tbl = db.create_table("events", events_table(10))

    if body == "raise":
        @gp.udf(data_type=pa.int64())
        def bad(x: int) -> int:
            return {}[x] if x == 3 else x
    elif body == "type":
        @gp.udf(data_type=pa.int64(), input_columns=["x"])
        def bad(x: pa.Array) -> pa.Array:
            return pc.cast(x, pa.string())
    else:
        @gp.udf(data_type=pa.int64(), input_columns=["x"])
        def bad(x: pa.Array) -> pa.Array:
            return x.slice(0, 1)

    tbl.add_columns({"w": bad})
    v = tbl.version
    with pytest.raises(gp.UDFExecutionError) as exc:
        tbl.backfill("w", spark=spark)
    for needle in needles:
        assert needle in str(exc.value) + " ", (needle, str(exc.value))
    assert tbl.version == v and tbl.to_arrow(["w"]).column("w").null_count == 10
    tbl.dataset().validate()


@pytest.mark.parametrize("kind", ["scalar", "array"])
def test_a_failure_in_a_task_of_many_fragments_names_the_right_ones(db, spark, kind):
    """A task packs many small fragments: the error names the failing row's fragment, or the fragments of the call."""
    tbl = db.create_table("events", events_table(300), max_rows_per_file=100)
    if kind == "scalar":
        @gp.udf(data_type=pa.int64())
        def bad(x: int) -> int:
            if x == 150:
                raise ValueError("boom")
            return x
        want = "at fragment 1, row address 4294967346 (offset 50): "
    else:
        @gp.udf(data_type=pa.int64(), input_columns=["x"])
        def bad(x: pa.Array) -> pa.Array:
            if 150 in x.to_pylist():
                raise ValueError("boom")
            return x
        want = "at fragments 0 to 2, rows with addresses 0..8589934691: "
    tbl.add_columns({"w": bad})
    with pytest.raises(gp.UDFExecutionError) as exc:
        tbl.backfill("w", spark=spark, task_size=300, checkpoint_size=300)
    assert want in str(exc.value), str(exc.value)
    recorded = tbl.get_errors(column="w").column("fragment").to_pylist()
    assert recorded == [1] if kind == "scalar" else len(recorded) == 1  # a failed call: recorded once


def test_partial_commits_make_progress_visible(db, spark, call_dir):
    tbl = db.create_table("events", events_table(12_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    v = tbl.version
    res = tbl.backfill("y", spark=spark, commit_granularity=2, concurrency=1, task_size=1_000)
    assert res.fragments_committed == 6 and res.version == v + 3
    # Every intermediate version is a consistent table with two more fragments filled.
    for i, version in enumerate((v + 1, v + 2, v + 3), start=1):
        ds = tbl.dataset(version)
        ds.validate()
        assert ds.count_rows(filter="y IS NOT NULL") == 4_000 * i
    assert column(tbl, "y") == {x: 2 * x for x in range(12_000)}


def test_recreated_table_with_the_same_name_is_not_served_from_worker_caches(db, spark, call_dir):
    tbl = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark)
    db.drop_table("events")
    tbl = db.create_table("events", events_table(3_000, start=10_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_array_triple(call_dir)})  # same name, same version numbers
    tbl.backfill("y", spark=spark)
    assert column(tbl, "y") == {x: 3 * x for x in range(10_000, 13_000)}


def test_an_import_error_in_the_commit_stage_surfaces_as_itself_not_as_a_commit_failure(db, spark, call_dir,
                                                                                          monkeypatch):
    """A venv lacking a module the commit imports (tenacity, before the base dependencies declared it) said
    "CommitError: commit ... failed: No module named 'tenacity'", as if Lance had refused the commit."""
    tbl = db.create_table("events", pa.table({"x": list(range(100))}), max_rows_per_file=50)
    tbl.add_columns({"y": counting_double(call_dir)})
    version = tbl.version
    monkeypatch.setitem(sys.modules, "tenacity", None)  # what `import tenacity` meets where it is not installed
    with pytest.raises(ImportError, match="tenacity") as failed:
        tbl.backfill("y", spark=spark)
    assert not isinstance(failed.value, CommitError)
    assert tbl.version == version and tbl.to_arrow(["y"]).column("y").null_count == 100  # nothing committed
    assert sorted(read_calls(call_dir)) == list(range(100))

    monkeypatch.delitem(sys.modules, "tenacity")
    clear_calls(call_dir)
    tbl.backfill("y", spark=spark)
    assert column(tbl, "y") == {x: 2 * x for x in range(100)}
    assert read_calls(call_dir) == []  # the failed run's checkpoints are reused: only the commit was missing


def test_jobs_given_no_session_share_one_local_session_started_by_the_first(tmp_path):
    """``tbl.backfill()`` / ``view.refresh()`` without a session and with none active: the first call starts a
    local session, the next ones run on it (no SparkContext start per call); one the caller stopped is started
    again.  Its own process: this one holds the suite's session, which would be the active one."""
    import subprocess
    import textwrap

    script = textwrap.dedent(f"""
        import pyarrow as pa
        from pyspark import SparkContext
        import geneva_provider as gp

        db = gp.connect({str(tmp_path / "db")!r})
        tbl = db.create_table("t", pa.table({{"x": list(range(100))}}), max_rows_per_file=50)
        tbl.add_columns({{"y": gp.udf(lambda x: 2 * x, data_type=pa.int64(), name="dbl")}})
        apps = []
        for n in (100, 150):
            if n > 100:
                tbl.add(pa.table({{"x": list(range(100, n))}}))
            res = tbl.backfill("y", progress=False)
            assert res.rows_computed == (50 if n > 100 else 100), res
            apps.append(SparkContext._active_spark_context.applicationId)
        view = db.create_materialized_view("v", tbl.search(None).where("x < 10").select(["x", "y"]))
        view.refresh()
        apps.append(SparkContext._active_spark_context.applicationId)
        SparkContext._active_spark_context.stop()  # the caller stops it: the next call starts another
        tbl.add(pa.table({{"x": [150]}}))
        assert tbl.backfill("y", progress=False).rows_computed == 1
        apps.append(SparkContext._active_spark_context.applicationId)
        assert tbl.to_arrow(["x", "y"]).to_pydict()["y"] == [2 * x for x in range(151)]
        assert db.open_table("v").count_rows() == 10
        print("APPS", *apps)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    apps = next(line for line in out.stdout.splitlines() if line.startswith("APPS")).split()[1:]
    assert len(set(apps[:3])) == 1 and apps[3] != apps[0], apps


def test_a_fragment_computed_whole_is_written_by_its_task_and_only_committed_after(db, spark, call_dir, caplog):
    """A task holding every row of a fragment writes the fragment's column file itself: no batch checkpoint
    is written and read back, no writer task runs; a job killed after its apply commits those files unchanged."""
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=5_000)
    tbl.delete("x >= 6000 AND x < 6100")  # fragment 1 has deleted rows: their values are NULL in its file
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl.ref, "y", parallelism=1)  # one task, every fragment whole
    plan, store = load_plan(summary.plan_uri)
    assert all(p.target is not None for t in plan.tasks for p in t.parts)
    applied = run_apply(summary.plan_uri, spark)
    assert applied.rows_computed == 19_900
    staged = [c for files in staged_files(store, plan.job_prefix).values() for c in files]
    assert sorted(c.rows for c in staged) == [4_900, 5_000, 5_000, 5_000] and {c.job_id for c in staged} == {
        plan.job_id}
    # Killed here: the rerun plans the staged files for reuse and computes nothing.
    clear_calls(call_dir)
    caplog.set_level("INFO", logger="geneva_provider")
    res = tbl.backfill("y", spark=spark)
    assert read_calls(call_dir) == [] and res.rows_computed == 0 and res.fragments_reused == 4
    assert column(tbl, "y") == {x: 2 * x for x in range(20_000) if not 6_000 <= x < 6_100}
    tbl.dataset().validate()
    # Run through its own write stage, a plan's apply-staged files are committed without a writer task.
    tbl.add_columns({"z": counting_array_triple(call_dir)})
    plan_uri = plan_backfill(tbl.ref, "z", parallelism=1).plan_uri
    run_apply(plan_uri, spark)
    caplog.clear()
    written = run_write_commit(plan_uri, spark)
    assert written.fragments_committed == 4
    assert any("0 fragments to write and 4 staged fragments to commit" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    verify(plan_uri)
    assert column(tbl, "z") == {x: 3 * x for x in range(20_000) if not 6_000 <= x < 6_100}
    assert tbl.backfill("z", spark=spark).rows_computed == 0
    tbl.dataset().validate()


def test_a_udf_failure_keeps_the_fragments_other_tasks_computed_whole(db, spark, call_dir, tmp_path):
    flag = tmp_path / "fail"
    tbl = failing_table(db, call_dir, flag, 20_000, 5_000, fail_at=12_345)
    with pytest.raises(gp.UDFExecutionError, match="fragment 2"):
        tbl.backfill("y", spark=spark, task_size=5_000)
    assert tbl.to_arrow(["y"]).column("y").null_count == 20_000  # nothing committed
    first = read_calls(call_dir)
    clear_calls(call_dir)
    flag.unlink()
    res = tbl.backfill("y", spark=spark)
    rerun = read_calls(call_dir)
    # Fragments 0, 1 and 3 were written by their tasks and are reused; of fragment 2, only the rows the
    # failed call did not hand back are computed again (those before its failed chunk were checkpointed).
    assert set(rerun) <= set(range(10_000, 15_000)) and 12_345 in rerun
    assert res.rows_computed == len(rerun) and res.rows_reused == 20_000 - len(rerun)
    assert set(range(20_000)) - set(range(10_000, 15_000)) <= set(first)
    assert column(tbl, "y") == {x: 2 * x for x in range(20_000)}
    tbl.dataset().validate()


def test_a_vectorised_udf_s_fragments_go_straight_to_their_column_files(db, spark):
    """Every fragment a task computes whole is written by that task (whether its chunks were also checkpointed
    is the worker's measured choice: see test_checkpoint_sizing) and write+commit only commits them."""
    tbl = db.create_table("events", events_table(400_000), max_rows_per_file=100_000)

    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def double(x: pa.Array) -> pa.Array:
        return pc.multiply(x, 2)

    tbl.add_columns({"y": double})
    summary = plan_backfill(tbl.ref, "y", parallelism=1)
    plan, store = load_plan(summary.plan_uri)
    run_apply(summary.plan_uri, spark)
    assert all(part.target is not None for task in plan.tasks for part in task.parts)
    assert sorted(staged_files(store, plan.job_prefix)) == [0, 1, 2, 3]
    written = run_write_commit(summary.plan_uri, spark)
    assert written.fragments_committed == 4
    verify(summary.plan_uri)
    assert column(tbl, "y") == {x: 2 * x for x in range(400_000)}
    tbl.dataset().validate()
