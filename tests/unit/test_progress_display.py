"""The progress a job run from Python shows where it runs (no JVM: the in-process task runner).

* A script that configured no logging, whose stderr is a pipe, prints progress lines (rows, rows/s)
  while the backfill runs and its outcome at the end, with no bar escape codes.
* Rows move within a checkpoint: the running UDF call's heartbeat counts the rows it has computed.
* The package's log handler goes on only where no logging is configured, and only once.

The terminal path (a real Spark session's console bar switched off meanwhile) is in
tests/spark/test_progress_terminal.py.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap
import time

import pyarrow as pa

import geneva_provider as gp
from geneva_provider.facade import progress as shown
from geneva_provider.stages import InProcessRunner
from tests.unit.test_quiet_runs import _child_env

ROWS = 60
_LINE = re.compile(r"geneva_provider\.progress: t\.y: (\d+) of 60 rows computed \(([\d,]+) rows/s")

_SCRIPT = textwrap.dedent("""
    import sys, time
    import pyarrow as pa
    import geneva_provider as gp
    import geneva_provider.facade.progress as shown
    from geneva_provider.stages import InProcessRunner

    shown.LOG_SECONDS = 0.5  # the cadence only: the script configures no logging at all
    db = gp.connect(sys.argv[1])
    tbl = db.create_table("t", pa.table({"x": list(range(60))}))

    @gp.udf(data_type=pa.int64())
    def slow(x):
        time.sleep(0.05)
        return x * 3

    tbl.add_columns({"y": slow})
    result = tbl.backfill("y", spark=InProcessRunner())
    print(result.rows_computed)
""")


def test_a_script_logging_nowhere_prints_progress_lines_and_the_outcome(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "db")], capture_output=True, text=True,
                          env=_child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(ROWS)
    lines = _LINE.findall(proc.stderr)
    assert len(lines) >= 3, proc.stderr[-3000:]
    rows = [int(r) for r, _ in lines]
    assert rows == sorted(rows) and rows[-1] > rows[0]
    assert any(float(rate.replace(",", "")) > 0 for _, rate in lines)
    # one fragment is "1 fragment" (issue 42: "1 fragments"); no row was skipped, so none is said to be
    assert re.search(rf"t\.y: done: {ROWS} rows computed, 0 reused, 1 fragment committed, version \d+, [\d.]+s$",
                     proc.stderr, re.M), proc.stderr[-3000:]
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr  # no bar, no cursor moves
    tbl = gp.connect(str(tmp_path / "db")).open_table("t")
    assert tbl.count_rows("y IS NULL OR y != x * 3") == 0


_SKIPPING = textwrap.dedent("""
    import sys
    import pyarrow as pa
    import geneva_provider as gp
    from geneva_provider.stages import InProcessRunner

    db = gp.connect(sys.argv[1])
    tbl = db.create_table("t", pa.table({"x": list(range(1_000))}), max_rows_per_file=250)

    @gp.udf(data_type=pa.int64(), on_error=gp.skip_on_error())
    def picky(x):
        if x % 400 == 7:
            raise ValueError(f"bad row {x}")
        return x * 3

    tbl.add_columns({"y": picky})
    result = tbl.backfill("y", spark=InProcessRunner())
    print(result.rows_failed)
""")


def test_the_done_line_counts_the_rows_the_error_policy_skipped(tmp_path):
    """The outcome a notebook prints, and the job's own line, say how many rows the error policy left NULL."""
    proc = subprocess.run([sys.executable, "-c", _SKIPPING, str(tmp_path / "db")], capture_output=True, text=True,
                          env=_child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "3"  # x = 7, 407, 807
    tbl = gp.connect(str(tmp_path / "db")).open_table("t")
    assert tbl.to_arrow(filter="y IS NULL").column("x").to_pylist() == [7, 407, 807]
    assert tbl.count_rows("y IS NOT NULL AND y != x * 3") == 0
    done = re.search(r"t\.y: done: (.*)$", proc.stderr, re.M)
    assert done is not None, proc.stderr[-3000:]
    assert re.fullmatch(r"1,000 rows computed, 0 reused, 3 rows skipped by the error policy \(left NULL\), "
                        r"4 fragments committed, version \d+, [\d.]+s", done[1]), done[1]


def test_progress_moves_within_one_checkpoint(db, caplog, monkeypatch):
    monkeypatch.setattr(shown, "LOG_SECONDS", 0.3)
    tbl = db.create_table("t", pa.table({"x": list(range(ROWS))}))

    @gp.udf(data_type=pa.int64())
    def slow(x):
        time.sleep(0.05)
        return x + 1

    tbl.add_columns({"y": slow})
    caplog.set_level(logging.INFO, logger="geneva_provider.progress")
    result = tbl.backfill("y", spark=InProcessRunner(), checkpoint_size=1_000)  # the 60 rows: one checkpoint
    assert result.rows_computed == ROWS
    batches = [k for k in tbl.checkpoint_store.list_keys("") if "_frag-" in k]
    assert len(batches) == 1, batches
    rows = [int(m[1]) for r in caplog.records if r.name == "geneva_provider.progress"
            if (m := _LINE.search(f"geneva_provider.progress: {r.getMessage()}"))]
    assert any(0 < r < ROWS for r in rows), rows  # a checkpoint holds all 60 or none: these are the call's own
    assert tbl.count_rows("y != x + 1") == 0


def test_the_log_handler_goes_on_only_where_no_logging_is_configured_and_once(monkeypatch):
    root, package = logging.getLogger(), logging.getLogger(shown.PACKAGE_LOGGER)
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(package, "handlers", [])
    monkeypatch.setattr(shown.log, "level", logging.NOTSET)
    shown.ensure_log_handler()
    shown.ensure_log_handler()
    assert [type(h) for h in package.handlers] == [shown._PackageHandler]
    assert shown.log.getEffectiveLevel() == logging.INFO
    record = shown.log.makeRecord(shown.log.name, logging.INFO, __file__, 1, "12 of 60 rows", (), None)
    assert package.handlers[0].filter(record)
    root.handlers = [logging.NullHandler()]  # logging configured later: the root's handler prints, ours stands down
    assert not package.handlers[0].filter(record)
    package.handlers = []
    shown.log.setLevel(logging.NOTSET)
    shown.ensure_log_handler()  # a configured root logger: nothing is added
    assert package.handlers == [] and shown.log.level == logging.NOTSET


def test_the_log_handler_writes_to_stderr_as_it_is_when_a_line_is_logged(monkeypatch):
    """stderr replaced (and the old stream closed) after the handler went on -- a notebook's redirection, a test's
    capture --: the next progress line goes to the stderr of its moment, not a logging error about a closed file."""
    import io

    root, package = logging.getLogger(), logging.getLogger(shown.PACKAGE_LOGGER)
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(package, "handlers", [])
    monkeypatch.setattr(shown.log, "level", logging.NOTSET)
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    shown.ensure_log_handler()
    first.close()
    later = io.StringIO()
    monkeypatch.setattr(sys, "stderr", later)
    shown.log.info("12 of 60 rows")
    assert later.getvalue().endswith("INFO geneva_provider.progress: 12 of 60 rows\n"), later.getvalue()
    assert "Logging error" not in later.getvalue()


# A bar's text: "t.z:  40%|████      | 200/600 [00:02<00:03, 98.5rows/s, apply]"
_BAR = re.compile(r"(\d+)/600 \[(\d\d):(\d\d)<[^,\]]*, ([\d.]+)rows/s")


def test_a_bar_shows_the_rate_the_rows_move_at(db, capsys, monkeypatch, tmp_path):
    # Rows arrive in steps of up to 100 (a batch UDF's call counts when it returns), about one a second: the rate
    # beside the bar is the steps' own, from the UDF's call times -- not one step over the last redraw's
    # interval (tenfold), nor the rows over the whole time shown.
    monkeypatch.setattr(shown, "display_here", lambda: "terminal")
    times = str(tmp_path / "ends.txt")
    tbl = db.create_table("t", pa.table({"x": list(range(600))}))

    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def stepwise(x: pa.Array) -> pa.Array:
        time.sleep(0.9)
        with open(times, "a") as f:
            f.write(f"{time.time()} {len(x)}\n")
        return x

    tbl.add_columns({"z": stepwise})
    result = tbl.backfill("z", spark=InProcessRunner(), checkpoint_size=100, task_size=600)  # one task, 6 calls
    calls = [(float(t), int(n)) for t, n in (line.split() for line in open(times).read().splitlines())]
    assert result.rows_computed == 600 and [n for _, n in calls] == [100] * 6
    real = sum(n for _, n in calls[1:]) / (calls[-1][0] - calls[0][0])  # the calls' rows over their time
    bar = capsys.readouterr().err
    shown_lines = [(int(n), float(rate)) for n, _, _, rate in _BAR.findall(bar)]
    mid_run = [(n, rate) for n, rate in shown_lines if 300 <= n < 600]  # three steps seen: two intervals
    assert len(mid_run) >= 3, shown_lines
    for rows, rate in mid_run:
        assert real * 0.7 <= rate <= real * 1.3, (rows, rate, real, shown_lines)
