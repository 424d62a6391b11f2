"""Plans with nothing to do, and job handles, behave as the README says.

* A plan with nothing to do is stored; every later stage handed its URI is a no-op that logs
  "nothing to do" (never "plan not found"), starts no Spark job and writes no record.
* ``backfill_async`` checks the column and the filter at the call, as ``backfill`` does.
* ``handle.status()`` is always a ``JobRecord``: PENDING before the plan exists, DONE for a job
  with nothing to do, the stored record otherwise.

Real Lance tables, real Spark (the session fixture), no stubs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import JobRecord, JobStatus
from geneva_provider.core.store.checkpoint import LanceCheckpointStore
from geneva_provider.pipeline.maintenance.compaction import plan_compaction, run_compaction
from geneva_provider.stages import plan_backfill, run_apply, run_write_commit, verify
from tests.helpers import counting_double


def _spark_jobs(spark) -> int:
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


def _table(db: gp.Connection, rows: int = 300, per_file: int = 100) -> gp.Table:
    return db.create_table("t", pa.table({"x": list(range(rows))}), max_rows_per_file=per_file)


def test_stages_handed_a_nothing_to_do_plan_are_no_ops_that_say_so(db, spark, call_dir, caplog):
    tbl = _table(db)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark, progress=False)
    version, jobs = tbl.version, len(db.list_jobs())

    summary = plan_backfill(tbl.ref, "y")
    assert summary.nothing_to_do and summary.plan_uri
    spark_before = _spark_jobs(spark)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="geneva_provider"):
        applied = run_apply(summary.plan_uri, spark)
        written = run_write_commit(summary.plan_uri, spark)
        verified = verify(summary.plan_uri)
    assert applied.rows_computed == 0 and applied.tasks_run == 0
    assert written.fragments_committed == 0 and written.rows_committed == 0 and written.version == version
    assert verified.version == version
    text = caplog.text
    assert text.count("nothing to do") >= 2 and "plan not found" not in text
    assert _spark_jobs(spark) == spark_before  # no Spark job for an up-to-date table
    assert tbl.version == version and len(db.list_jobs()) == jobs  # nothing committed, no record
    assert tbl.count_rows("y IS NULL OR y != x * 2") == 0
    tbl.dataset().validate()

    # Compaction alike: a table with nothing to compact gets a plan whose stage is a no-op.
    tbl.compact(spark=spark)
    compacted = tbl.version
    nothing = plan_compaction(tbl.ref, store=tbl.checkpoint_store)
    assert nothing.nothing_to_do
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="geneva_provider"):
        result = run_compaction(nothing.plan_uri, spark)
    assert result.fragments_removed == 0 and result.version == compacted == tbl.version
    assert "nothing to do" in caplog.text and "plan not found" not in caplog.text
    tbl.dataset().validate()


def test_backfill_async_fails_at_the_call_like_backfill(db, spark):
    tbl = _table(db)
    tbl.add_columns({"y": gp.udf(data_type=pa.int64())(lambda x: x)})
    version = tbl.version
    for call in (tbl.backfill, tbl.backfill_async):
        with pytest.raises(gp.ColumnError, match=r"column 'no_such_column' not found in table 't'"):
            call("no_such_column", spark=spark)
        with pytest.raises(gp.ColumnError, match=r"column 'x' of table 't' is not a UDF column"):
            call("x", spark=spark)
        with pytest.raises(gp.InvalidArgumentError, match=r"invalid where filter 'nope > 1' for table 't'"):
            call("y", "nope > 1", spark=spark)
    assert tbl.version == version and db.list_jobs() == []
    tbl.dataset().drop_columns(["x"])  # y's input dropped with lance itself, bypassing the package's guard
    version = tbl.version
    for call in (tbl.backfill, tbl.backfill_async):
        with pytest.raises(gp.ColumnError, match=r"column 'y' of table 't': UDF input columns \['x'\] not found"):
            call("y", spark=spark)
    assert tbl.version == version and db.list_jobs() == []


class _GatedStore(LanceCheckpointStore):
    """A real checkpoint store on disk whose first listing waits for a gate: the job is held in its plan stage."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gate, self.reached = threading.Event(), threading.Event()

    def list_keys(self, prefix: str = "") -> list[str]:
        self.reached.set()
        assert self.gate.wait(120)
        return super().list_keys(prefix)


def test_handle_status_is_always_a_job_record(db, spark, tmp_path):
    tbl = _table(db)
    tbl.add_columns({"y": gp.udf(data_type=pa.int64())(lambda x: x + 1)})
    store = _GatedStore(str(tmp_path / "ckpt"))

    handle = tbl.backfill_async("y", spark=spark, checkpoint_store=store)
    assert store.reached.wait(60)
    pending = handle.status()  # planning, not yet planned
    assert isinstance(pending, JobRecord)
    assert pending.status is JobStatus.PENDING and pending.stage == "plan"
    assert (pending.kind, pending.table, pending.column) == ("backfill", "t", "y")
    store.gate.set()
    result = handle.result(timeout=180)
    done = handle.status()
    assert isinstance(done, JobRecord) and done.status is JobStatus.DONE and done.job_id == result.job_id
    assert done.rows_committed == 300

    # Nothing to do: no record is stored, and the handle still reports a DONE record.
    again = tbl.backfill_async("y", spark=spark, checkpoint_store=store)
    assert again.result(timeout=120).rows_computed == 0
    record = again.status()
    assert isinstance(record, JobRecord) and record.status is JobStatus.DONE and record.job_id == again.job_id
    assert record.version == tbl.version
    assert tbl.count_rows("y IS NULL OR y != x + 1") == 0
    tbl.dataset().validate()



_CANCELS = textwrap.dedent("""
    import sys, time
    import pyarrow as pa
    import geneva_provider as gp
    from geneva_provider.stages import local_session

    db = gp.connect(sys.argv[1])
    tbl = db.create_table("t", pa.table({"x": list(range(400))}), max_rows_per_file=100)

    @gp.udf(data_type=pa.int64())
    def slow(x: int) -> int:
        time.sleep(0.05)
        return x + 7

    tbl.add_columns({"y": slow})
    spark = local_session("local[2]", app_name="cancel-test")
    for wait in (0.5, 2.0, 3.0, 4.0):  # each cancel hits a rerun resuming from the last one's checkpoints
        handle = tbl.backfill_async("y", spark=spark, checkpoint_size=10)
        while handle.job_id is None and not handle.done():
            time.sleep(0.05)
        time.sleep(wait)
        handle.cancel()
        try:
            handle.result(120)
        except gp.GenevaError as exc:
            print("cancelled:", exc, file=sys.stderr)
    time.sleep(2)  # killed tasks finish their clean-up
    result = tbl.backfill("y", spark=spark, progress=False)
    spark.stop()
    print(result.version)
""")


def test_cancelling_jobs_prints_no_spark_stack_traces(tmp_path):
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", _CANCELS, str(tmp_path / "db")], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("cancelled:") >= 1
    assert "does not exist" not in proc.stderr and "\tat org.apache.spark" not in proc.stderr, proc.stderr[-5000:]
    tbl = gp.connect(str(tmp_path / "db")).open_table("t")
    assert tbl.count_rows("y IS NULL OR y != x + 7") == 0
    tbl.dataset().validate()
