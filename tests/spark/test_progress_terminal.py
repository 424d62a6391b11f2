"""On a terminal, a backfill draws one bar (rows, rate, ETA) and Spark's ``[Stage N:`` bar keeps off its line.

The job runs in a child process under a pseudo-terminal, on a real local session started with
Spark's console progress on; after the job, Spark's bar is back and draws for Spark's own jobs.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap

import geneva_provider as gp
from tests.unit.test_quiet_runs import _child_env


def _script(rows: int, sleep: float, then: str) -> str:
    """A child script: a table of ``rows`` rows (two fragments) with a slow UDF column ``y``, then ``then``."""
    return textwrap.dedent(f"""
        import sys, time
        import pyarrow as pa
        import geneva_provider as gp
        from geneva_provider.stages import local_session

        db = gp.connect(sys.argv[1])
        tbl = db.create_table("t", pa.table({{"x": list(range({rows}))}}), max_rows_per_file={rows // 2})

        @gp.udf(data_type=pa.int64())
        def slow(x):
            time.sleep({sleep})
            return x * 3

        tbl.add_columns({{"y": slow}})
    """) + textwrap.dedent(then)


_SCRIPT = _script(40, 0.1, """
    spark = local_session("local[2]", app_name="tty-test", conf={"spark.ui.showConsoleProgress": "true"})
    bar = spark.sparkContext._jsc.sc().progressBar()
    print("SPARK BAR BEFORE", bar.isDefined(), file=sys.stderr, flush=True)
    result = tbl.backfill("y", spark=spark)
    print("SPARK BAR AFTER", spark.sparkContext._jsc.sc().progressBar().isDefined(), result.rows_computed,
          file=sys.stderr, flush=True)
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(2) or x).collect()
    print("SPARK JOB DONE", file=sys.stderr, flush=True)
    spark.stop()
""")


def _run_in_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Runs ``args`` with a 120-column pseudo-terminal as stdin, stdout and stderr; its exit status and output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out.append(data)
    os.close(master)
    return proc.wait(timeout=600), b"".join(out).decode(errors="replace")


def test_the_bar_draws_alone_and_sparks_bar_comes_back(tmp_path):
    code, out = _run_in_terminal([sys.executable, "-c", _SCRIPT, str(tmp_path / "db")], _child_env())
    assert code == 0, out[-3000:]
    assert "SPARK BAR BEFORE True" in out, out[-3000:]
    during = out.split("SPARK BAR BEFORE True", 1)[1].split("SPARK BAR AFTER", 1)[0]
    frames = [f for f in during.split("\r") if f.startswith("t.y:")]
    assert any("rows/s" in f and "40/40" in f for f in frames), during[-2000:]  # ours: rows and their rate
    assert any("/40 [" in f and "<00:" in f and "?" not in f.split("<", 1)[1] for f in frames), during[-2000:]  # ETA
    assert "[Stage" not in during, during[-2000:]  # Spark's bar stayed off while ours drew
    after = out.split("SPARK BAR AFTER", 1)[1]
    assert after.startswith(" True 40"), after[:200]
    assert "[Stage" in after.split("SPARK JOB DONE", 1)[0], after[:2000]  # and it is back for Spark's own jobs
    tbl = gp.connect(str(tmp_path / "db")).open_table("t")
    assert tbl.count_rows("y IS NULL OR y != x * 3") == 0


_STARTS_ITS_SESSION = _script(20, 0.05, """
    print("JOB STARTS", file=sys.stderr, flush=True)
    print("JOB DONE", tbl.backfill("y").rows_computed, file=sys.stderr, flush=True)
""")


def test_a_job_that_starts_its_session_draws_its_bar_with_no_start_up_output_in_it(tmp_path):
    """A job that starts its own session: Spark's JVM prints no start-up lines (its log4j profile, the default log
    level, Java's incubator-module notice) into the terminal, so nothing breaks into the bar."""
    code, out = _run_in_terminal([sys.executable, "-c", _STARTS_ITS_SESSION, str(tmp_path / "db")], _child_env())
    assert code == 0, out[-3000:]
    during = out.split("JOB STARTS", 1)[1].split("JOB DONE", 1)[0]
    for text in ("log4j", "Setting default log level", "incubator modules", "NativeCodeLoader"):
        assert text not in during, during[-2000:]
    frames = [f for f in during.split("\r") if f.startswith("t.y:")]
    assert any("20/20" in f and "rows/s" in f for f in frames), during[-2000:]
    assert out.split("JOB DONE", 1)[1].startswith(" 20"), out[-500:]
