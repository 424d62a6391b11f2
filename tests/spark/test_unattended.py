"""Unattended-safe jobs: error policies and the error store, job records, checkpoints that heal.

Real Spark (local[2]) and real Lance tables; UDF calls are counted across the Python workers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import JobStatus, StagedFiles
from geneva_provider.core.contracts.options import BackfillOptions
from geneva_provider.core.store.layout import (
    JobRecordKey,
    PlanFamilyKey,
    PlanKey,
    parse_batch_key,
    parse_key,
    parse_staged_key,
)
from geneva_provider.pipeline.columns.write import _Writer, write_fragment
from geneva_provider.pipeline.stages.context import StageContext
from geneva_provider.stages import load_plan, plan_backfill, run_apply, run_write_commit
from tests.helpers import _log_calls, clear_calls, counting_double, events_table, read_calls

ROWS = 2_000


def _table(db: gp.Connection, name: str = "t", rows: int = ROWS, per_file: int = 500) -> gp.Table:
    return db.create_table(name, pa.table({"x": list(range(rows))}), max_rows_per_file=per_file)


def _flaky_scalar(log_dir: str, bad: set[int], transient: set[int], flag_dir: str | None = None,
                  **policy: object) -> gp.UDF:
    """x*2; raises ValueError on ``bad`` rows, TimeoutError on the first attempt of ``transient`` rows."""

    @gp.udf(data_type=pa.int64(), name="flaky", version="1", **policy)
    def flaky(x: int) -> int:
        _log_calls(log_dir, [x])
        if x in bad:
            raise ValueError(f"cannot compute x={x}")
        if x in transient and flag_dir is not None:
            marker = os.path.join(flag_dir, f"seen-{x}")
            if not os.path.exists(marker):
                Path(marker).touch()
                raise TimeoutError(f"remote timed out for x={x}")
        return x * 2

    return flaky


def test_skip_policy_records_rows_and_retry_failed_computes_only_them(db, spark, call_dir):
    bad = set(range(7, ROWS, 100))  # 1 % of the rows
    tbl = _table(db)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), bad, set(), on_error=gp.skip_on_error(max_fraction=0.02))})

    result = tbl.backfill("y", spark=spark)

    assert result.rows_failed == len(bad)
    job = db.get_job(result.job_id)
    assert job.status is JobStatus.DONE and job.rows_failed == len(bad) and job.rows_committed == ROWS
    values = {r["x"]: r["y"] for r in tbl.to_arrow(["x", "y"]).to_pylist()}
    assert {x for x, y in values.items() if y is None} == bad
    assert all(values[x] == 2 * x for x in values if x not in bad)
    addresses = tbl.get_failed_row_addresses(result.job_id, "y")
    by_address = {r["_rowaddr"]: r["x"] for r in tbl.dataset().to_table(
        columns=["x"], with_row_address=True).to_pylist()}
    assert sorted(by_address[a] for a in addresses) == sorted(bad)
    errors = tbl.get_errors(job_id=result.job_id)
    assert errors.num_rows == len(bad)
    assert set(errors.column("outcome").to_pylist()) == {"skipped"}
    assert set(errors.column("error_type").to_pylist()) == {"ValueError"}
    assert all("cannot compute x=" in t and "Traceback" in t for t in errors.column("traceback").to_pylist())

    clear_calls(call_dir)
    fixed = _flaky_scalar(str(call_dir), set(), set())
    again = tbl.retry_failed("y", result.job_id, udf=fixed, spark=spark)
    assert sorted(read_calls(call_dir)) == sorted(bad)  # the failed rows and nothing else
    assert again.rows_computed == len(bad)
    assert tbl.count_rows("y IS NULL") == 0 and tbl.count_rows("y != x * 2") == 0
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []
    tbl.dataset().validate()


def test_retry_failed_finds_the_failed_rows_after_they_moved(db, spark, call_dir):
    """Compaction and updates move rows to new addresses; the failed rows are found again by their stable ids."""
    bad = set(range(13, ROWS, 250))
    tbl = _table(db)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), bad, set(), on_error=gp.skip_on_error())})
    result = tbl.backfill("y", spark=spark)
    assert result.rows_failed == len(bad)
    tbl.compact(target_rows_per_fragment=100_000, spark=spark)
    tbl.dataset().update({"x": "x + 1000000"}, where="x = 263")  # a failed row, updated: its new value counts
    moved = {x + 1_000_000 if x == 263 else x for x in bad}
    clear_calls(call_dir)
    again = tbl.retry_failed("y", result.job_id, udf=_flaky_scalar(str(call_dir), set(), set()), spark=spark)
    assert sorted(read_calls(call_dir)) == sorted(moved) and again.rows_computed == len(bad)
    assert tbl.count_rows("y IS NULL") == 0 and tbl.count_rows("y != x * 2") == 0
    tbl.dataset().validate()


def test_retry_failed_refuses_rows_that_moved_in_a_table_without_stable_row_ids(db, spark, call_dir):
    bad = {7, 1_507}
    tbl = db.create_table("t", pa.table({"x": list(range(ROWS))}), max_rows_per_file=500, stable_row_ids=False)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), bad, set(), on_error=gp.skip_on_error())})
    result = tbl.backfill("y", spark=spark)
    tbl.compact(target_rows_per_fragment=100_000, spark=spark)
    version, code = tbl.version, tbl.schema.field("y").metadata
    with pytest.raises(gp.InvalidArgumentError, match=r"table 't' column 'y': 2 of the 2 failed rows moved .*"
                                                      r"tbl\.backfill\('y'\)"):
        tbl.retry_failed("y", result.job_id, udf=_flaky_scalar(str(call_dir), set(), set()), spark=spark)
    assert tbl.version == version and tbl.schema.field("y").metadata == code  # the UDF was not swapped
    rerun = tbl.backfill("y", spark=spark)  # as the error says: the column's own (unswapped) code fails them again
    assert rerun.rows_computed == 2 and rerun.rows_failed == 2 and tbl.count_rows("y IS NULL") == 2
    tbl.dataset().validate()


def test_skip_policy_past_its_limit_fails_the_job_and_commits_nothing(db, spark, call_dir):
    bad = set(range(0, ROWS, 10))  # 10 %
    tbl = _table(db)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), bad, set(), on_error=gp.skip_on_error(max_rows=50))})
    version = tbl.version
    with pytest.raises(gp.UDFExecutionError, match=r"failed on 200 rows, more than its skip policy allows"):
        tbl.backfill("y", spark=spark)
    assert tbl.version == version
    failed = [j for j in db.list_jobs(status="FAILED")]
    assert len(failed) == 1 and "skip policy" in failed[0].error and failed[0].stage == "apply"
    assert len(tbl.get_failed_row_addresses(failed[0].job_id, "y")) == len(bad)


def test_retry_policy_recovers_transient_errors_and_records_attempts(db, spark, call_dir, tmp_path):
    transient = set(range(3, ROWS, 20))  # 5 % fail on their first attempt
    flags = tmp_path / "flags"
    flags.mkdir()
    policy = gp.Retry((TimeoutError,), max_attempts=3, initial_seconds=0.001, max_seconds=0.01)
    tbl = _table(db)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), set(), transient, str(flags), on_error=[policy])})

    result = tbl.backfill("y", spark=spark)

    assert result.rows_failed == 0 and result.rows_retried == len(transient)
    assert tbl.count_rows("y IS NULL OR y != x * 2") == 0
    calls = read_calls(call_dir)
    assert len(calls) == ROWS + len(transient)  # one retry per transient row, nothing else
    errors = tbl.get_errors(result.job_id, "y")
    assert errors.num_rows == len(transient)
    assert set(errors.column("outcome").to_pylist()) == {"recovered"}
    assert set(errors.column("attempt").to_pylist()) == {2}
    assert tbl.get_failed_row_addresses(result.job_id) == []
    record = db.get_job(result.job_id)
    assert record.status is JobStatus.DONE and record.rows_retried == len(transient)


def test_batch_udf_skip_isolates_the_failing_rows(db, spark):
    @gp.udf(data_type=pa.int64(), input_columns=["x"], on_error=gp.skip_on_error())
    def triple(x: pa.Array) -> pa.Array:
        if pc.any(pc.equal(pc.bit_wise_and(x, 255), 255)).as_py():
            raise ArithmeticError("a 255 in the batch")
        return pc.multiply(x, 3)

    tbl = _table(db)
    tbl.add_columns({"y": triple})
    result = tbl.backfill("y", spark=spark)
    nulls = sorted(r["x"] for r in tbl.to_arrow(["x", "y"], filter="y IS NULL").to_pylist())
    assert nulls == [x for x in range(ROWS) if x & 255 == 255]
    assert result.rows_failed == len(nulls)
    assert tbl.count_rows("y IS NOT NULL AND y != x * 3") == 0


def test_fail_fast_records_the_failing_row_and_marks_the_job_failed(db, spark, call_dir):
    tbl = _table(db)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), {1234}, set())})
    with pytest.raises(gp.UDFExecutionError, match=r"UDF 'flaky' failed computing column 'y' of table 't'.*x=1234"):
        tbl.backfill("y", spark=spark)
    (job,) = db.list_jobs("t")
    assert job.status is JobStatus.FAILED and "ValueError" in job.error
    errors = tbl.get_errors(job.job_id)
    assert errors.column("outcome").to_pylist() == ["failed"]
    assert errors.column("error_type").to_pylist() == ["ValueError"]


def test_a_failed_jobs_record_counts_the_rows_its_rerun_will_not_compute(db, spark, call_dir, tmp_path):
    flag = tmp_path / "fail"
    flag.touch()
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=500)
    tbl.add_columns({"y": counting_double(call_dir, fail_flag=str(flag), fail_at=1_700)})
    with pytest.raises(gp.UDFExecutionError):
        tbl.backfill("y", spark=spark, checkpoint_size=100, task_size=250)
    (job,) = db.list_jobs("events")
    assert job.status is JobStatus.FAILED and job.rows_checkpointed >= ROWS - 250
    flag.unlink()
    rerun = tbl.backfill("y", spark=spark, checkpoint_size=100, task_size=250)
    assert rerun.rows_computed == ROWS - job.rows_checkpointed


def test_job_records_list_a_failed_a_skipped_rows_and_a_successful_job(db, spark, call_dir):
    tbl = _table(db)
    tbl.add_columns({"ok": _flaky_scalar(str(call_dir), set(), set()),
                     "skips": _flaky_scalar(str(call_dir), {5, 6}, set(), on_error=gp.skip_on_error()),
                     "fails": _flaky_scalar(str(call_dir), {5}, set())})
    ok = tbl.backfill("ok", spark=spark)
    skipped = tbl.backfill("skips", spark=spark)
    with pytest.raises(gp.UDFExecutionError):
        tbl.backfill("fails", spark=spark)
    jobs = {j.column: j for j in db.list_jobs()}
    assert set(jobs) == {"ok", "skips", "fails"}
    assert (jobs["ok"].status, jobs["ok"].rows_planned, jobs["ok"].rows_committed) == (JobStatus.DONE, ROWS, ROWS)
    assert (jobs["skips"].status, jobs["skips"].rows_failed, jobs["skips"].rows_committed) == (
        JobStatus.DONE, 2, ROWS)
    assert jobs["fails"].status is JobStatus.FAILED and jobs["fails"].rows_committed == 0
    assert db.get_job(ok.job_id).version == ok.version
    assert db.get_job(skipped.job_id).finished_at is not None
    assert [j.column for j in db.list_jobs(status="FAILED")] == ["fails"]
    with pytest.raises(gp.GenevaError, match="no job 'nope'"):
        db.get_job("nope")
    # A job with nothing to do leaves no record behind, only its (empty) plan, so later stages handed it are no-ops.
    keys = set(tbl.checkpoint_store.list_keys())
    records = len(db.list_jobs())
    noop = tbl.backfill("ok", spark=spark)
    assert noop.rows_computed == 0 and len(db.list_jobs()) == records
    assert set(tbl.checkpoint_store.list_keys()) - keys == {PlanKey(noop.job_id).key()}


def test_backfill_async_reports_progress_and_can_be_cancelled(db, spark, call_dir):
    tbl = _table(db, rows=400, per_file=100)

    @gp.udf(data_type=pa.int64())
    def slow(x: int) -> int:
        time.sleep(0.05)
        return x

    tbl.add_columns({"y": slow})
    handle = tbl.backfill_async("y", spark=spark, checkpoint_size=10)
    deadline = time.time() + 60
    while handle.job_id is None and time.time() < deadline:
        time.sleep(0.1)
    assert handle.job_id is not None
    time.sleep(1.0)
    assert handle.cancel()
    with pytest.raises(gp.GenevaError, match="cancelled"):
        handle.result(timeout=60)
    record = handle.status()
    assert record.status is JobStatus.CANCELLED and record.error == "cancelled"
    version = tbl.version

    # The same job run again to the end: its checkpoints are kept, the table lands complete.
    done = tbl.backfill_async("y", spark=spark, checkpoint_size=10)
    result = done.result(timeout=120)
    assert done.status().status is JobStatus.DONE and result.version > version
    assert tbl.count_rows("y IS NULL OR y != x") == 0
    tbl.dataset().validate()


def _kill_after_apply(tbl: gp.Table, spark) -> None:
    """Plans and applies a backfill, but never writes it (a job killed after its apply stage); its tasks are
    smaller than a fragment, so every row is in batch checkpoints and no task writes a fragment's file."""
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(task_size=300))
    run_apply(summary.plan_uri, spark)


def test_a_truncated_batch_checkpoint_is_recomputed(db, spark, call_dir):
    tbl = _table(db)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), set(), set())})
    _kill_after_apply(tbl, spark)
    store = tbl.checkpoint_store
    batch = sorted(k for k in store.list_keys() if parse_batch_key(k) is not None)
    victim = parse_batch_key(batch[0])
    path = Path(store.uri) / f"{batch[0]}.lance"
    path.write_bytes(path.read_bytes()[:64])
    clear_calls(call_dir)

    tbl.backfill("y", spark=spark)

    assert tbl.count_rows("y IS NULL OR y != x * 2") == 0
    assert len(read_calls(call_dir)) == victim.end - victim.start  # that range, and nothing else
    tbl.dataset().validate()


def test_a_truncated_staged_files_record_is_written_again(db, spark, call_dir):
    tbl = _table(db)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), set(), set())})
    # Tasks smaller than a fragment: the apply checkpoints every fragment, and only the writers stage files.
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(task_size=300))
    run_apply(summary.plan_uri, spark)
    # Killed between write and commit: every fragment staged by two writers, nothing committed.
    plan, store = load_plan(summary.plan_uri)
    ctx = StageContext.of(plan, None)
    for half in (plan.fragments[:1], plan.fragments[1:]):
        writer = _Writer(ctx)
        for entry in half:
            write_fragment(ctx, entry, writer)
        writer.stager.flush()
    records = sorted(k for k in store.list_keys() if parse_staged_key(k) is not None)
    assert len(records) == 2
    broken = next(k for k in records if len(store.get_model(k, StagedFiles).files) == 1)
    path = next(p for p in (Path(store.uri) / f"{broken}{suffix}" for suffix in (".json", ".lance")) if p.exists())
    path.write_bytes(path.read_bytes()[:40])  # the record's file cut short, whichever form the store keeps it in
    clear_calls(call_dir)

    result = tbl.backfill("y", spark=spark)

    assert read_calls(call_dir) == []  # written again from the batch checkpoints, not recomputed
    assert result.fragments_reused == len(plan.fragments) - 1
    assert tbl.count_rows("y IS NULL OR y != x * 2") == 0
    tbl.dataset().validate()


def test_long_udf_versions_keep_checkpoint_keys_short(db, spark, call_dir):
    @gp.udf(data_type=pa.int64(), version="a" * 32 + "-experimental-" + "b" * 64)
    def double(x: int) -> int:
        return x * 2

    tbl = _table(db, rows=100, per_file=50)
    tbl.add_columns({"y": double})
    tbl.backfill("y", spark=spark)
    assert tbl.count_rows("y != x * 2 OR y IS NULL") == 0
    assert max(len(k) for k in tbl.checkpoint_store.list_keys()) < 200


def _store_bytes(store) -> tuple[int, int]:
    root = Path(store.uri)
    files = [p for p in root.iterdir() if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def test_two_days_of_hourly_runs_clean_up_to_what_live_jobs_need(db, spark, call_dir, capsys):
    import datetime as dt

    tbl = db.create_table("events", pa.table({"x": list(range(200))}), max_rows_per_file=100)
    tbl.add_columns({"y": _flaky_scalar(str(call_dir), {13}, set(), on_error=gp.skip_on_error())})
    # Two days: ingest, then the hourly backfill (one row always fails and is skipped).  Each job leaves its plan,
    # record, batch checkpoint and staged-file records: cleanup must keep only the live job's.
    for hour in range(48):
        tbl.add(pa.table({"x": list(range(200 + 10 * hour, 210 + 10 * hour))}))
        tbl.backfill("y", spark=spark, progress=False)
    live = plan_backfill(tbl.ref, "y")  # the next hour's job, running: planned and applied, not committed
    tbl.add(pa.table({"x": [99_999]}))
    run_apply(live.plan_uri, spark)
    store = tbl.checkpoint_store
    files_before, bytes_before = _store_bytes(store)

    result = tbl.cleanup_checkpoints(older_than=dt.timedelta(0))

    files_after, bytes_after = _store_bytes(store)
    with capsys.disabled():
        print(f"\ncleanup after two days of hourly runs: {files_before} files ({bytes_before / 1e6:.2f} MB) -> "
              f"{files_after} files ({bytes_after / 1e6:.2f} MB); removed {result.removed}")
    keys = store.list_keys()
    # Left: the live job's plan, record and checkpoints, and the ledger; no finished job's plan or record.
    assert [k for k in keys if isinstance(parse_key(k), PlanFamilyKey)] == [PlanKey(live.job_id).key()]
    assert [k for k in keys if isinstance(parse_key(k), JobRecordKey)] == [JobRecordKey(live.job_id).key()]
    assert files_after <= 20 and bytes_after < bytes_before / 10
    run_write_commit(live.plan_uri, spark)  # the running job still lands
    clear_calls(call_dir)
    tbl.backfill("y", spark=spark)
    # The row appended while the job ran, and the row that always fails: nothing else is computed.
    assert sorted(read_calls(call_dir)) == [13, 99_999]
    assert tbl.count_rows("y IS NULL") == 1 and tbl.count_rows("y != x * 2") == 0
    tbl.dataset().validate()


def test_refresh_async_and_compaction_leave_job_records(db, spark, call_dir):
    src = db.create_table("src", pa.table({"x": list(range(1_000))}), max_rows_per_file=100)
    bad = {5, 6, 7}
    view = db.create_materialized_view("v", src.search(None).where("x % 2 = 1").select(
        {"x": "x", "y": _flaky_scalar(str(call_dir), bad, set(), on_error=gp.skip_on_error())}))
    handle = view.refresh_async(spark=spark)
    result = handle.result(timeout=120)
    record = handle.status()
    assert record.kind == "refresh" and record.status is JobStatus.DONE and record.rows_planned == 500
    assert result.rows_failed == 2 and record.rows_failed == 2  # x = 5 and 7 (6 is not in the view)
    assert view.count_rows("y IS NULL") == 2 and view.count_rows("y != x * 2") == 0
    assert sorted(view.get_errors(result.job_id).column("error_type").to_pylist()) == ["ValueError"] * 2

    compacted = src.compact(target_rows_per_fragment=1_000, spark=spark)
    (job,) = db.list_jobs("src", kind="compaction")
    assert job.job_id == compacted.job_id and job.status is JobStatus.DONE and job.version == compacted.version
    assert job.rows_planned == 1_000
