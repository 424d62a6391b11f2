"""Fault injection: SIGKILLs of a backfill process at 12 seeded points in apply, write and commit.

Each round backfills a fresh table in a child process (its tasks on the in-process task runner,
which runs the stages' very partition code in that process: the kill takes every task with it), kills the whole
process group at a point picked by a seeded generator -- after some batch checkpoints, after some
staged fragment files, or between two partial commits -- and then reruns the backfill here.  The
rerun must land the table a clean run makes (``validate()`` passes, no row lost), and compute
exactly the rows no checkpoint held when the process died: the ranges that were in flight.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import geneva_provider as gp
from geneva_provider.core.store.checkpoint import ROWADDR
from geneva_provider.core.store.layout import JobStore
from tests.helpers import clear_calls, counting_double, events_table, kill_session, read_calls

ROOT = Path(__file__).resolve().parents[2]
FRAGMENTS, PER_FRAGMENT = 8, 1_000
ROWS = FRAGMENTS * PER_FRAGMENT
ROUNDS = 20
SEED = 20261122


def _rounds() -> list[tuple[str, int]]:
    """The distinct kill points of ROUNDS seeded draws (12 of 20: a point drawn again is the same round again)."""
    rng = random.Random(SEED)
    stages = ["apply", "write", "commit"]
    out = []
    for i in range(ROUNDS):
        stage = stages[i % 3]
        k = {"apply": rng.randint(1, 24), "write": rng.randint(1, FRAGMENTS - 1), "commit": rng.randint(1, 3)}[stage]
        out.append((stage, k))
    return list(dict.fromkeys(out))


def _reached(stage: str, k: int, tbl: gp.Table, v0: int, files0: int) -> bool:
    if stage == "apply":
        return len(JobStore(tbl.checkpoint_store).batches("")) >= k
    if stage == "write":  # column files staged by the writers
        return len(os.listdir(Path(tbl.uri) / "data")) - files0 >= k
    return _manifests(tbl) >= v0 + k  # a listing, not a dataset opened: quick enough between two commits


def _manifests(tbl: gp.Table) -> int:
    """How many versions the table has had: one manifest each (none is cleaned up here)."""
    return sum(name.endswith(".manifest") for name in os.listdir(Path(tbl.uri) / "_versions"))


def _held_rows(tbl: gp.Table) -> set[int]:
    """The x of every row a batch checkpoint holds a value for (what the rerun must not compute)."""
    store = tbl.checkpoint_store
    by_address = {r["_rowaddr"]: r["x"] for r in tbl.dataset().to_table(columns=["x"], with_row_address=True)
                  .to_pylist()}
    held: set[int] = set()
    for bk in JobStore(store).batches(""):
        held.update(by_address[a] for a in store.get_columns(bk.key(), [ROWADDR]).column(ROWADDR).to_pylist())
    return held


def _kill_at(db_uri: str, stage: str, k: int, tbl: gp.Table) -> bool:
    """Runs the backfill in a child process and SIGKILLs it once ``stage`` reached ``k``; False if it finished."""
    v0, files0 = _manifests(tbl), len(os.listdir(Path(tbl.uri) / "data"))
    script = textwrap.dedent(f"""
        import geneva_provider as gp
        from geneva_provider.stages import InProcessRunner
        spark = InProcessRunner(parallelism=1)
        gp.connect({db_uri!r}).open_table("events").backfill("y", spark=spark, checkpoint_size=250,
                                                             commit_granularity=2)
        print("FINISHED")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 180
        while not _reached(stage, k, tbl, v0, files0):
            if proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, f"{stage} never reached {k}"
            time.sleep(0.002)
    finally:
        kill_session(proc.pid)
        proc.wait(timeout=30)
    return "FINISHED" not in proc.stdout.read()


@pytest.mark.parametrize(("round_no", "stage", "k"), [(i, s, k) for i, (s, k) in enumerate(_rounds())])
def test_a_sigkill_then_a_rerun_lands_a_clean_table(tmp_path, spark, call_dir, round_no, stage, k):
    # The kill is a race with the child (a point shortly before its end, on a busy machine, may be passed between two
    # looks): a race this test lost -- the backfill finished first -- is run again on a fresh table.
    for attempt in range(3):
        db = gp.connect(str(tmp_path / f"db{attempt}"))
        tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=PER_FRAGMENT)
        tbl.add_columns({"y": counting_double(str(call_dir), sleep=0.0003)})
        if _kill_at(db.uri, stage, k, tbl):
            break
    else:
        pytest.fail(f"round {round_no}: the backfill finished before {stage} reached {k}, in each of 3 tries")
    held = _held_rows(tbl)
    committed = {r["x"] for r in tbl.to_arrow(["x", "y"], filter="y IS NOT NULL").to_pylist()}
    clear_calls(call_dir)

    result = tbl.backfill("y", spark=spark, checkpoint_size=250, commit_granularity=2)

    rerun = read_calls(call_dir)
    in_flight = set(range(ROWS)) - held - committed
    assert len(rerun) == len(set(rerun)), "a row was computed twice in the rerun"
    assert set(rerun) == in_flight, f"round {round_no} ({stage} at {k}): recomputed rows beyond those in flight"
    assert result.rows_computed == len(in_flight)
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert sorted(got["x"]) == list(range(ROWS))  # no row lost
    assert all(y == 2 * x for x, y in zip(got["x"], got["y"], strict=True))
    tbl.dataset().validate()
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []
