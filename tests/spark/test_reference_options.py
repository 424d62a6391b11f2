"""The reference's backfill options on a real local[2] Spark session: ``intra_applier_concurrency``,
``num_frags`` (a sample run) and ``timeout`` (stop at a checkpoint, commit nothing, resume later)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

import geneva_provider as gp
from tests.helpers import counting_double, events_table, read_calls


def threaded_double(log_dir: str, sleep: float = 0.0) -> gp.UDF:
    """Scalar x*2 that logs each call to a file per (process, thread), so a test sees how many ran at once."""

    @gp.udf(data_type=pa.int64(), name="threaded_double")
    def double(x: int) -> int:
        if sleep:
            time.sleep(sleep)
        with open(os.path.join(log_dir, f"{os.getpid()}-{threading.get_ident()}.log"), "a") as f:
            f.write(f"{x}\n")
        return x * 2

    return double


def threads_per_process(log_dir: Path) -> dict[str, int]:
    return Counter(p.stem.split("-")[0] for p in log_dir.glob("*.log"))


def values(tbl, column: str) -> dict[int, object]:
    t = tbl.to_arrow(["x", column])
    return dict(zip(t.column("x").to_pylist(), t.column(column).to_pylist(), strict=True))


def test_intra_applier_concurrency_runs_calls_at_once_within_a_task_with_exact_values(db, spark, tmp_path):
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=500)
    tbl.add_columns({"y": threaded_double(str(tmp_path / "one"), sleep=0.001),
                     "z": threaded_double(str(tmp_path / "four"), sleep=0.001)})
    (tmp_path / "one").mkdir()
    (tmp_path / "four").mkdir()
    serial = tbl.backfill("y", spark=spark, checkpoint_size=250, progress=False)
    threaded = tbl.backfill("z", spark=spark, checkpoint_size=250, intra_applier_concurrency=4, progress=False)
    assert serial.rows_computed == threaded.rows_computed == 2_000
    # One thread per worker process by default; more than one with four calls in flight per task.
    assert set(threads_per_process(tmp_path / "one").values()) == {1}
    assert max(threads_per_process(tmp_path / "four").values()) > 1
    assert sorted(read_calls(tmp_path / "four")) == list(range(2_000))  # each row once
    assert values(tbl, "z") == {x: 2 * x for x in range(2_000)} == values(tbl, "y")
    tbl.dataset().validate()


def test_num_frags_computes_only_the_first_fragments_and_the_next_run_the_rest(db, spark, call_dir):
    tbl = db.create_table("events", events_table(3_000), max_rows_per_file=500)
    tbl.add_columns({"y": counting_double(call_dir)})
    frags = [f.fragment_id for f in tbl.dataset().get_fragments()]
    assert len(frags) == 6
    sample = tbl.backfill("y", spark=spark, num_frags=2, progress=False)
    assert sample.rows_computed == 1_000 and sample.fragments_committed == 2
    assert values(tbl, "y") == {x: 2 * x if x < 1_000 else None for x in range(3_000)}
    tbl.dataset().validate()
    rest = tbl.backfill("y", spark=spark, progress=False)
    assert rest.rows_computed == 2_000 and rest.rows_reused == 1_000
    assert sorted(read_calls(call_dir)) == list(range(3_000))  # no row computed twice
    assert values(tbl, "y") == {x: 2 * x for x in range(3_000)}
    tbl.dataset().validate()


def test_timeout_stops_at_a_checkpoint_commits_nothing_and_a_later_backfill_resumes(db, spark, call_dir):
    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.005)})  # ~10 s of work on 2 cores
    version = tbl.version
    first = tbl.backfill("y", spark=spark, checkpoint_size=50, timeout=4, progress=False)
    assert first.timed_out and first.fragments_committed == 0 and 0 < first.rows_computed < 4_000
    assert tbl.version == version and tbl.count_rows("y IS NOT NULL") == 0  # nothing half-written
    tbl.dataset().validate()
    record = db.get_job(first.job_id)
    assert record.status == "FAILED" and "timed out" in (record.error or "")
    # Stopped at checkpoints: every row computed then was checkpointed whole, and none is computed again.
    assert len(read_calls(call_dir)) == first.rows_computed
    second = tbl.backfill("y", spark=spark, progress=False)
    assert not second.timed_out and second.rows_computed == 4_000 - first.rows_computed
    assert sorted(read_calls(call_dir)) == list(range(4_000))
    assert values(tbl, "y") == {x: 2 * x for x in range(4_000)}
    tbl.dataset().validate()
