"""A backfill whose process is killed mid-apply resumes from its batch checkpoints."""

from __future__ import annotations

import textwrap

from geneva_provider.core.store.checkpoint import ROWADDR
from geneva_provider.core.store.layout import JobStore
from tests.helpers import clear_calls, counting_double, events_table, read_calls, run_and_kill_after_checkpoints

ROWS_PER_FRAGMENT = 10_000


def _checkpointed_rows(store, rows_per_fragment: int = ROWS_PER_FRAGMENT) -> set[int]:
    """The row numbers (x) in the range checkpoints, from their row addresses."""
    rows: set[int] = set()
    for bk in JobStore(store).batches(""):
        rows.update((a & 0xFFFFFFFF) + (a >> 32) * rows_per_fragment
                    for a in store[bk.key()].column(ROWADDR).to_pylist())
    return rows


def test_killed_backfill_resumes_without_recomputing_checkpoints(db, spark, call_dir):
    tbl = db.create_table("events", events_table(2 * ROWS_PER_FRAGMENT), max_rows_per_file=ROWS_PER_FRAGMENT)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.0005)})
    v = tbl.version
    script = textwrap.dedent(f"""
        import geneva_provider as gp
        from geneva_provider.stages import local_session
        spark = local_session("local[2]", conf={{"spark.ui.showConsoleProgress": "false"}})
        gp.connect({db.uri!r}).open_table("events").backfill("y", spark=spark, checkpoint_size=500)
        print("FINISHED")
    """)
    store = tbl.checkpoint_store
    run_and_kill_after_checkpoints(script, store, 6)

    # Killed before commit: the table is as it was, and checkpoints cover only part of it.
    assert tbl.version == v and tbl.to_arrow(["y"]).column("y").null_count == 2 * ROWS_PER_FRAGMENT
    checkpointed = _checkpointed_rows(store)
    assert 3_000 <= len(checkpointed) < 2 * ROWS_PER_FRAGMENT
    clear_calls(call_dir)

    res = tbl.backfill("y", spark=spark, checkpoint_size=500)
    rerun = read_calls(call_dir)
    assert not set(rerun) & checkpointed
    assert sorted(rerun) == sorted(set(range(2 * ROWS_PER_FRAGMENT)) - checkpointed)
    assert res.rows_computed == len(rerun)
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and len(got["x"]) == 2 * ROWS_PER_FRAGMENT
    tbl.dataset().validate()
