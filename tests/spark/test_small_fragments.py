"""Many small fragments: packed into few Spark tasks, every row computed once, resumable, committed as promised."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from geneva_provider.core.store.checkpoint import ROWADDR
from geneva_provider.core.store.layout import JobStore
from geneva_provider.stages import load_plan, plan_backfill
from tests.helpers import clear_calls, counting_double, events_table, kill_session, read_calls

ROOT = Path(__file__).resolve().parents[2]


def test_two_thousand_tiny_fragments_with_deletes(db, spark, call_dir):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=10)
    tbl.delete("x % 7 = 0 OR (x >= 5000 AND x < 5010)")  # some fragments lose rows, one loses all
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl.ref, "y")
    assert len(tbl.dataset().get_fragments()) == 1_999 and summary.tasks <= 16
    res = tbl.backfill("y", spark=spark)
    live = [x for x in range(20_000) if x % 7 and not 5_000 <= x < 5_010]
    assert sorted(read_calls(call_dir)) == live  # each live row exactly once
    assert res.rows_computed == len(live) and res.fragments_committed == 1_999
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["x"] == live and got["y"] == [2 * x for x in live]
    tbl.dataset().validate()
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []


def test_commit_granularity_makes_the_advertised_versions_with_packed_fragments(db, spark, call_dir):
    tbl = db.create_table("events", events_table(3_000), max_rows_per_file=100)  # 30 fragments
    tbl.add_columns({"y": counting_double(call_dir)})
    v = tbl.version
    res = tbl.backfill("y", spark=spark, commit_granularity=8)
    assert res.fragments_committed == 30 and res.version == v + 4  # 8 + 8 + 8 + 6
    counts = [0]
    for version in range(v + 1, v + 5):
        ds = tbl.dataset(version)
        ds.validate()
        counts.append(ds.count_rows(filter="y IS NOT NULL"))
    # Each version lands one whole group (groups are written at once and committed as they finish).
    assert sorted(b - a for a, b in itertools.pairwise(counts)) == [600, 800, 800, 800]


def test_a_killed_packed_task_resumes_recomputing_at_most_the_task_in_flight(db, spark, call_dir):
    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=50)  # 80 fragments of 50 rows
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.004)})
    store = tbl.checkpoint_store
    # One Spark slot and 500-row tasks: each task packs 10 fragments, one checkpoint per fragment part.
    script = textwrap.dedent(f"""
        import geneva_provider as gp
        from geneva_provider.stages import InProcessRunner
        spark = InProcessRunner(parallelism=1)
        gp.connect({db.uri!r}).open_table("events").backfill("y", spark=spark, task_size=500, checkpoint_size=50)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while len(JobStore(store).batches("")) < 14:  # inside the second task
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        kill_session(proc.pid)
        proc.wait(timeout=30)
    jobs = JobStore(store)
    plan, _ = load_plan(jobs.plan_uri(jobs.plans()[0].job_id))
    assert all(len(t.parts) == 10 for t in plan.tasks)
    held = set()
    for bk in jobs.batches(""):
        held.update((a >> 32) * 50 + (a & 0xFFFFFFFF) for a in store[bk.key()].column(ROWADDR).to_pylist())
    calls_before = read_calls(call_dir)
    in_flight = set(calls_before) - held  # computed by the killed task but not checkpointed yet
    assert len(in_flight) <= 500
    clear_calls(call_dir)
    res = tbl.backfill("y", spark=spark, task_size=500, checkpoint_size=50)
    rerun = read_calls(call_dir)
    assert not set(rerun) & held and sorted(rerun) == sorted(set(range(4_000)) - held)
    assert len(set(calls_before) & set(rerun)) <= 500  # recomputed: at most the packed task in flight
    assert res.rows_computed == 4_000 - len(held)
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]]
    tbl.dataset().validate()
