"""Compaction never costs a live job its work, and a job that ended -- however it ended -- holds nothing.

A backfill holds the fragments it planned while its record says it may still commit them (PENDING or
RUNNING, heartbeating).  A compaction re-reads those holds right before it commits, so a backfill planned
after it keeps its fragments.  A failed job releases them at once; a killed one when its lease lapses, and
its record then reads ABANDONED (last stage and counts kept) until the next run takes it over.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import JobRecord, JobStatus
from geneva_provider.core.store.layout import JobStore
from geneva_provider.pipeline.stages.job_records import LEASE_ENV
from geneva_provider.stages import (
    BackfillOptions,
    plan_backfill,
    plan_compaction,
    run_apply,
    run_compaction,
    run_write_commit,
    verify,
)
from tests.helpers import (
    clear_calls,
    counting_double,
    events_table,
    failing_table,
    kill_session,
    read_calls,
    run_and_kill_when,
)

ROOT = Path(__file__).resolve().parents[2]
LEASE = 4  # seconds: a killed job's hold ends this long after its last heartbeat


def values(tbl, column: str) -> dict[int, object]:
    t = tbl.to_arrow(["x", column])
    return dict(zip(t.column("x").to_pylist(), t.column(column).to_pylist(), strict=True))


def test_a_compaction_planned_before_a_backfill_leaves_its_fragments_alone_at_commit(db, spark, call_dir,
                                                                                     monkeypatch):
    monkeypatch.setenv(LEASE_ENV, "1")  # a stage's lease: between stages a job stays live far longer
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    compaction = plan_compaction(tbl.ref, {"target_rows_per_fragment": 20_000})  # nothing is live yet
    assert compaction.fragments_to_compute == 20 and compaction.fragments_excluded == []
    backfill = plan_backfill(tbl.ref, "y")
    run_apply(backfill.plan_uri, spark)
    time.sleep(2)  # longer than a stage's lease: the job waits for its next stage (an Airflow task) and stays live
    result = run_compaction(compaction.plan_uri, spark)
    assert result.held_by == {backfill.job_id: list(range(20))} and result.excluded == list(range(20))
    assert result.fragments_removed == 0 and len(tbl.dataset().get_fragments()) == 20

    written = run_write_commit(backfill.plan_uri, spark)
    assert written.fragments_vanished == [] and written.fragments_committed == 20
    verify(backfill.plan_uri)
    assert sorted(read_calls(call_dir)) == list(range(20_000))  # each row computed once
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []
    assert values(tbl, "y") == {x: 2 * x for x in range(20_000)}

    # The backfill is DONE: it holds nothing, and the next compaction rewrites every fragment.
    assert db.get_job(backfill.job_id).status is JobStatus.DONE
    result = tbl.compact(target_rows_per_fragment=20_000, spark=spark)
    assert result.fragments_removed == 20 and result.held_by == {} and result.excluded == []
    assert values(tbl, "y") == {x: 2 * x for x in range(20_000)}
    tbl.dataset().validate()


def test_a_compaction_commits_the_rewrites_no_job_started_on_meanwhile(db, spark, call_dir):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    compaction = plan_compaction(tbl.ref, {"target_rows_per_fragment": 5_000})  # four rewrites of 5 fragments
    backfill = plan_backfill(tbl.ref, "y", BackfillOptions(where="x >= 7000 AND x < 9000"))  # fragments 7, 8
    run_apply(backfill.plan_uri, spark)
    result = run_compaction(compaction.plan_uri, spark)
    assert result.held_by == {backfill.job_id: [7, 8]} and result.excluded == [7, 8]
    assert result.fragments_removed == 15 and result.fragments_added == 3
    fragments = {f.fragment_id for f in tbl.dataset().get_fragments()}
    assert set(range(5, 10)) <= fragments and not fragments & {*range(5), *range(10, 20)}

    written = run_write_commit(backfill.plan_uri, spark)
    assert written.fragments_vanished == [] and written.fragments_committed == 2
    verify(backfill.plan_uri)
    assert sorted(read_calls(call_dir)) == list(range(7_000, 9_000))
    assert values(tbl, "y") == {x: 2 * x if 7_000 <= x < 9_000 else None for x in range(20_000)}
    tbl.dataset().validate()


def test_a_failed_backfill_holds_nothing(db, spark, call_dir, tmp_path):
    flag = tmp_path / "fail"
    tbl = failing_table(db, call_dir, flag, 20_000, 1_000, fail_at=12_345)
    with pytest.raises(gp.UDFExecutionError):
        tbl.backfill("y", spark=spark)
    (job,) = db.list_jobs("events")
    assert job.status is JobStatus.FAILED
    version = tbl.version
    result = tbl.compact(target_rows_per_fragment=20_000, spark=spark)  # at once, not a day later
    assert result.fragments_removed == 20 and result.held_by == {} and result.excluded == []
    assert tbl.version > version and len(tbl.dataset().get_fragments()) == 1
    flag.unlink()
    assert tbl.backfill("y", spark=spark).fragments_vanished == []
    assert values(tbl, "y") == {x: 2 * x for x in range(20_000)}
    tbl.dataset().validate()


def _run_and_kill(script: str, ready, lease: float = LEASE) -> None:
    """Runs ``script`` in a session of its own with a short job lease and SIGKILLs it once ``ready()`` holds."""
    import os

    run_and_kill_when(textwrap.dedent(script), ready, {**os.environ, LEASE_ENV: str(lease)})


def _run_until_it_kills_itself(script: str, lease: float = LEASE) -> None:
    """Runs ``script``, which SIGKILLs itself at a chosen point, with a short job lease; then kills what it left."""
    import os

    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, start_new_session=True,
                            env={**os.environ, LEASE_ENV: str(lease)}, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.wait(timeout=180) == -9
    finally:
        kill_session(proc.pid)
    assert "FINISHED" not in proc.stdout.read()


def _abandoned(db, table: str, kind: str) -> JobRecord:
    """The killed job's record, once its lease lapsed (it must read ABANDONED then, and never DONE)."""
    deadline = time.monotonic() + 60
    while (job := db.list_jobs(table, kind=kind)[0]).status is not JobStatus.ABANDONED:
        assert job.status is JobStatus.RUNNING and time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


def _checkpoints(store) -> int:
    return len(JobStore(store).batches(""))


def _kill_a_backfill(db, store) -> None:
    """SIGKILLs a backfill of 'events'.'y' in its own process once it has checkpointed a few batches."""
    _run_and_kill(f"""
        import geneva_provider as gp
        from geneva_provider.stages import InProcessRunner
        spark = InProcessRunner(parallelism=2)
        gp.connect({db.uri!r}).open_table("events").backfill("y", spark=spark, checkpoint_size=500)
        print("FINISHED")
    """, lambda: _checkpoints(store) >= 6)


def test_a_killed_backfill_reads_abandoned_releases_its_fragments_and_is_taken_over(db, spark, call_dir):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.0005)})
    store = tbl.checkpoint_store
    _kill_a_backfill(db, store)
    job = _abandoned(db, "events", "backfill")
    assert job.stage == "apply" and job.rows_planned == 20_000 and job.error and "heartbeat" in job.error
    assert db.get_job(job.job_id).status is JobStatus.ABANDONED
    assert [j.job_id for j in db.list_jobs(status="ABANDONED")] == [job.job_id]

    # Its fragments are free: the compaction rewrites all of them.
    result = tbl.compact(target_rows_per_fragment=20_000, spark=spark)
    assert result.fragments_removed == 20 and result.held_by == {} and result.excluded == []
    clear_calls(call_dir)
    rerun = tbl.backfill("y", spark=spark)
    assert rerun.fragments_vanished == [] and sorted(read_calls(call_dir)) == list(range(20_000))
    old = db.get_job(job.job_id)
    assert old.status is JobStatus.ABANDONED and old.taken_over_by == rerun.job_id and old.stage == "apply"
    assert db.get_job(rerun.job_id).status is JobStatus.DONE
    assert values(tbl, "y") == {x: 2 * x for x in range(20_000)}
    tbl.dataset().validate()


def test_a_killed_backfill_is_resumed_from_its_checkpoints_by_the_run_that_takes_it_over(db, spark, call_dir):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.0005)})
    store = tbl.checkpoint_store
    _kill_a_backfill(db, store)
    job = _abandoned(db, "events", "backfill")
    clear_calls(call_dir)
    rerun = tbl.backfill("y", spark=spark, checkpoint_size=500)
    assert 0 < rerun.rows_computed < 20_000 and rerun.rows_computed == len(read_calls(call_dir))
    old = db.get_job(job.job_id)
    assert old.status is JobStatus.ABANDONED and old.taken_over_by == rerun.job_id
    assert values(tbl, "y") == {x: 2 * x for x in range(20_000)}
    tbl.dataset().validate()


def test_killed_refreshes_and_compactions_read_abandoned_and_are_taken_over(db, spark, call_dir):
    src = db.create_table("events", events_table(20_000), max_rows_per_file=1_000)
    view = db.create_materialized_view(
        "doubled", src.search(None).select({"x": "x", "y": counting_double(call_dir, sleep=0.0005)}))
    _run_and_kill(f"""
        import geneva_provider as gp
        from geneva_provider.stages import InProcessRunner
        spark = InProcessRunner(parallelism=2)
        gp.connect({db.uri!r}).open_table("doubled").refresh(spark=spark, checkpoint_size=500)
        print("FINISHED")
    """, lambda: _checkpoints(view.checkpoint_store) >= 6)
    job = _abandoned(db, "doubled", "refresh")
    assert job.stage == "apply" and job.rows_planned == 20_000
    rerun = view.refresh(spark=spark, checkpoint_size=500)
    assert db.get_job(job.job_id).taken_over_by == rerun.job_id
    assert values(view, "y") == {x: 2 * x for x in range(20_000)}

    # A compaction killed right before its commit (its rewrite tasks done): nothing changes, the record tells.
    version = src.version
    _run_until_it_kills_itself(f"""
        import os, signal
        from lance.optimize import Compaction
        import geneva_provider as gp
        from geneva_provider.stages import InProcessRunner
        spark = InProcessRunner(parallelism=2)
        Compaction.commit = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
        gp.connect({db.uri!r}).open_table("events").compact(target_rows_per_fragment=20_000, spark=spark)
        print("FINISHED")
    """)
    job = _abandoned(db, "events", "compaction")
    assert job.stage == "compact" and src.version == version
    result = src.compact(target_rows_per_fragment=20_000, spark=spark)
    assert result.fragments_removed == 20
    assert db.get_job(job.job_id).taken_over_by == result.job_id
    assert db.get_job(result.job_id).status is JobStatus.DONE
    assert sorted(src.to_arrow(["x"]).column("x").to_pylist()) == list(range(20_000))
    src.dataset().validate()


