"""Ctrl-C during ``tbl.backfill()`` on the local Spark session a script starts: the package's own lines, not py4j's
tracebacks, the job cancelled with nothing half-committed, and a rerun that resumes (issue 42, row 12).

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the script, its Spark JVM and the JVM's
Python workers; the test does the same to the process group of the script it started.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.compute as pc

import geneva_provider as gp
from geneva_provider.stages import InProcessRunner
from tests.helpers import clear_calls, counting_double, events_table, kill_session, read_calls

ROOT = Path(__file__).resolve().parents[2]
ROWS = 600
INTERRUPT_AFTER = 100  # rows computed when Ctrl-C is pressed


def test_ctrl_c_during_a_backfill_cancels_it_in_a_few_lines_and_the_rerun_resumes(tmp_path, call_dir):
    slow = tmp_path / "slow"
    slow.touch()
    db = gp.connect(str(tmp_path / "db"))
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=ROWS // 4)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.05, slow_while=str(slow))})
    script = textwrap.dedent(f"""
        import geneva_provider as gp
        # No session given: the job starts the local one (and pyspark its SIGINT handler) as a user's script does.
        gp.connect({db.uri!r}).open_table("events").backfill("y", checkpoint_size=10, task_size=10)
        print("FINISHED")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, start_new_session=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while len(read_calls(call_dir)) < INTERRUPT_AFTER:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the backfill never got going"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the script's terminal
        out, err = proc.communicate(timeout=180)
    finally:
        kill_session(proc.pid)
        proc.wait(timeout=30)
    slow.unlink()

    assert proc.returncode != 0 and "FINISHED" not in out, (proc.returncode, out, err[-3000:])
    lines = err.splitlines()
    said = [i for i, line in enumerate(lines) if "events.y: interrupted: cancelling the job" in line]
    assert said, err[-5000:]
    after = lines[said[0]:]
    assert len(after) <= 16, "\n".join(after)  # the package's lines and one short traceback, nothing else
    for noise in ("py4j", "Py4J", "reentrant", "Exception while sending command", "ERROR", "\tat "):
        assert noise not in err, (noise, err[-5000:])
    assert err.count("Traceback") <= 1 and "During handling of the above exception" not in err, err[-5000:]
    # The JVM's own lines (a WARN per task it killed) may come after Python's: the traceback's last line is found.
    ended = [line for line in after if re.match(r"^KeyboardInterrupt: events\.y: interrupted; job \S+ was cancelled",
                                                line)]
    assert len(ended) == 1, "\n".join(after)

    # The job says it was cancelled; nothing of it landed; the table is whole.
    record = db.list_jobs("events")[0]
    assert str(record.status) in ("FAILED", "CANCELLED") and "cancel" in f"{record.status} {record.error}".lower()
    assert record.rows_committed == 0 and record.job_id in ended[0]
    assert tbl.to_arrow(["y"]).column("y").null_count == ROWS
    tbl.dataset().validate()

    # The rerun completes from the checkpoints: the rows computed before Ctrl-C are not computed again, but for
    # the tasks in flight (10 rows each).
    before = set(read_calls(call_dir))
    clear_calls(call_dir)
    result = tbl.backfill("y", spark=InProcessRunner())
    rerun = read_calls(call_dir)
    assert before | set(rerun) == set(range(ROWS)) and len(rerun) == len(set(rerun))
    assert len(before & set(rerun)) <= 40, sorted(before & set(rerun))
    assert result.rows_computed + result.rows_reused == ROWS
    values = tbl.to_arrow(["x", "y"])
    assert pc.all(pc.equal(values.column("y"), pc.multiply(values.column("x"), 2))).as_py()
    tbl.dataset().validate()
