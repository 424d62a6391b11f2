"""A process SIGKILLed around the commit of ``alter_columns``' rename of a UDF column leaves a table the package uses.

The child process renames ``y`` to ``y2`` with a hook on Lance's two ways to commit a schema change (its
``alter_columns`` and ``LanceDataset.commit``) that SIGKILLs the process at the exact point: just before, or just
after, the first commit the rename makes -- where a rename used to stand between its two commits (the column,
then its fingerprint column's owner).  Then, in this process: the rerun of the same alteration succeeds,
``status()`` counts every value valid, and a backfill on real Spark computes exactly the rows added since,
every value kept.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import clear_calls, counting_double, events_table, read_calls

ROOT = Path(__file__).resolve().parents[2]
ROWS = 1_000

_CHILD = """
import os, signal
import lance
import geneva_provider as gp

def killing(real, before):
    def call(*args, **kwargs):
        if before:
            os.kill(os.getpid(), signal.SIGKILL)
        out = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return out
    return call

lance.LanceDataset.commit = staticmethod(killing(lance.LanceDataset.commit, {before}))
lance.LanceDataset.alter_columns = killing(lance.LanceDataset.alter_columns, {before})
gp.connect({uri!r}).open_table("events").alter_columns({{"path": "y", "rename": "y2"}})
print("FINISHED")
"""


def _states(tbl):
    return {c.column: (c.rows_valid, c.rows_stale, c.rows_missing) for c in tbl.status().columns}


@pytest.mark.parametrize("point", ["before", "after"])
def test_a_rename_killed_at_its_commit_is_rerun_and_the_table_backfills(db, spark, call_dir, point):
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=250)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark, progress=False)
    clear_calls(call_dir)
    version = tbl.version

    child = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD.format(uri=db.uri,
                                                                                  before=point == "before"))],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert "FINISHED" not in child.stdout
    assert tbl.version == (version if point == "before" else version + 1)  # the kill came where it was meant to
    tbl.dataset().validate()

    tbl.alter_columns({"path": "y", "rename": "y2"})  # the same alteration again: lands, or finds it landed
    assert "y" not in tbl.schema.names and _states(tbl) == {"y2": (ROWS, 0, 0)}
    tbl.add(events_table(100, start=ROWS))
    assert _states(tbl) == {"y2": (ROWS, 0, 100)}

    result = tbl.backfill("y2", spark=spark, progress=False)
    assert sorted(read_calls(call_dir)) == list(range(ROWS, ROWS + 100))  # only the new rows: no value lost
    assert result.rows_computed == 100
    got = tbl.to_arrow(["x", "y2"]).to_pydict()
    assert got["y2"] == [2 * x for x in got["x"]] and len(got["x"]) == ROWS + 100
    assert _states(tbl) == {"y2": (ROWS + 100, 0, 0)}
    tbl.dataset().validate()
