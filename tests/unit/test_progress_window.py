"""Progress that tells the truth, without a JVM (issue 44): the rate and ETA of the last seconds, a first line at once,
and nothing that breaks the output of a terminal of zero width.

* :class:`RecentRate` over counts that arrive in steps: the rate of the steps now (not one step over a redraw's
  interval, not the average since a slow start), falling when the count stalls; the ETA from it.
* A job run from Python says "planning ..." and "starting Spark ..." before its first count, in its own words.
* A terminal of zero width (``COLUMNS=0``, a new pseudo-terminal, ``shutil.get_terminal_size()`` saying 0) gets
  plain lines, no bar redrawn with carriage returns.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shutil
import time

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.facade import progress as shown
from geneva_provider.pipeline.stages.progress_lines import RecentRate, eta_text
from geneva_provider.stages import InProcessRunner


def _steps(rate: RecentRate, start: float, end: float, rows_at, look: float = 0.25) -> None:
    """Looks every ``look`` seconds from ``start`` to ``end`` at the count ``rows_at(t)``."""
    t = start
    while t <= end + 1e-9:
        rate.add(rows_at(t), now=t)
        t += look


def test_steps_of_a_hundred_rows_every_point_nine_seconds_read_at_their_real_rate():
    rate = RecentRate(window=10)
    # 30 s of start-up with nothing moving, then a step of 100 rows every 0.9 s.
    _steps(rate, 0, 60, lambda t: 0 if t < 30 else 100 * int((t - 30) / 0.9))
    real = 100 / 0.9
    assert real * 0.85 <= rate.rate() <= real * 1.15, rate.rate()  # not tenfold, not averaged over the start-up
    rows_now = 100 * int(30 / 0.9)
    assert rate.eta(10_000) == pytest.approx((10_000 - rows_now) / rate.rate())
    assert abs(rate.eta(10_000) - (10_000 - rows_now) / real) <= 0.15 * (10_000 - rows_now) / real


def test_the_rate_is_the_recent_one_when_the_job_slows_down():
    rate = RecentRate(window=10)
    _steps(rate, 0, 20, lambda t: int(1_000 * t))  # 1,000 rows/s for 20 s
    _steps(rate, 20.25, 40, lambda t: 20_000 + int(100 * (t - 20)))  # then 100 rows/s
    assert 90 <= rate.rate() <= 110, rate.rate()  # the average since the start would say 550


def test_the_rate_falls_when_the_count_stalls_and_there_is_none_before_two_changes():
    rate = RecentRate(window=10)
    _steps(rate, 0, 5, lambda t: 0)
    assert rate.rate() is None and rate.eta(100) is None  # nothing moved
    rate.add(50, now=5.5)
    assert rate.rate() is None  # one step: the time its rows took is unknown (the start-up before it)
    _steps(rate, 5.75, 10, lambda t: 50 + int(100 * (t - 5.5)))
    moving = rate.rate()
    assert 80 <= moving <= 120, moving
    stalled_at = rate._changes[-1][1]
    _steps(rate, 10.25, 40, lambda t: stalled_at)  # 30 s with nothing moving
    assert rate.rate() < moving / 10, rate.rate()


def test_a_known_start_gives_a_rate_from_the_first_change():
    rate = RecentRate()
    rate.start(200, now=0.0)
    rate.add(1_000, now=0.5)
    assert rate.rate() == pytest.approx(1_600) and rate.eta(2_600) == pytest.approx(1.0)


def test_eta_text():
    assert eta_text(None) == "" and eta_text(4.24) == "ETA 4.2s" and eta_text(12.4) == "ETA 12s"
    assert eta_text(65) == "ETA 1m05s" and eta_text(9.96) == "ETA 10s"


@pytest.mark.parametrize("how", ["COLUMNS=0", "shutil says 0"])
def test_a_terminal_of_zero_width_gets_lines_not_a_bar(db, monkeypatch, how):
    class ZeroWidthTerminal(io.StringIO):
        def isatty(self) -> bool:
            return True

        def fileno(self) -> int:
            raise OSError("no real terminal")

    err = ZeroWidthTerminal()
    monkeypatch.setattr("sys.stderr", err)
    if how == "COLUMNS=0":
        monkeypatch.setenv("COLUMNS", "0")
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
        monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size((0, 0)))
    assert shown.terminal_width() == 0 and shown.display_here() == "log"
    monkeypatch.setattr(shown, "LOG_SECONDS", 0.3)
    root, package = logging.getLogger(), logging.getLogger(shown.PACKAGE_LOGGER)
    monkeypatch.setattr(root, "handlers", [])  # as a script that configured no logging
    monkeypatch.setattr(package, "handlers", [])
    monkeypatch.setattr(shown.log, "level", logging.NOTSET)
    tbl = db.create_table("t", pa.table({"x": list(range(40))}))

    @gp.udf(data_type=pa.int64())
    def slow(x):
        time.sleep(0.03)
        return x + 1

    tbl.add_columns({"y": slow})
    assert tbl.backfill("y", spark=InProcessRunner()).rows_computed == 40
    out = err.getvalue()
    assert "\r" not in out and "\x1b" not in out and "|" not in out, out  # no bar, no cursor moves
    assert re.search(r"t\.y: \d+ of 40 rows computed", out) and "t.y: done: 40 rows computed" in out, out
    assert tbl.count_rows("y != x + 1") == 0


def test_a_job_says_what_it_does_before_its_first_count(db, caplog, monkeypatch):
    monkeypatch.setattr(shown, "LOG_SECONDS", 0.3)
    tbl = db.create_table("t", pa.table({"x": list(range(30))}))

    @gp.udf(data_type=pa.int64())
    def slow(x):
        time.sleep(0.03)
        return x * 2

    tbl.add_columns({"y": slow})
    caplog.set_level(logging.INFO, logger="geneva_provider")
    tbl.backfill("y", spark=InProcessRunner())
    said = [r.getMessage() for r in caplog.records if r.name == "geneva_provider.progress"]
    assert said[0] == "t.y: planning ...", said
    assert said[1] == "t.y: planned 30 rows to compute; starting Spark ...", said
    assert any(re.match(r"t\.y: \d+ of 30 rows computed", m) for m in said[2:]), said
    plan = next(i for i, r in enumerate(caplog.records) if r.name.endswith("stages.planning"))
    first = next(i for i, r in enumerate(caplog.records) if r.getMessage() == "t.y: planning ...")
    assert first < plan  # said before the plan read the table
    tbl.backfill("y", spark=InProcessRunner())  # nothing to do: said so, once planned
    again = [r.getMessage() for r in caplog.records if r.name == "geneva_provider.progress"][len(said):]
    assert again == ["t.y: planning ...", "t.y: up to date: nothing to compute (30 rows reused)"], again


def test_an_airflow_apply_line_counts_the_running_calls_rows_and_gives_an_eta(db):
    """The task log's lines of an apply stage: the rows its running calls computed since their last checkpoint
    (their markers' heartbeats) on top of the checkpointed ones, and an ETA from the recent rate."""
    from geneva_provider.core.contracts.models import JobRecord, JobSpec
    from geneva_provider.pipeline.spark.worker_deaths import CallWatch
    from geneva_provider.pipeline.stages.job_records import start_record, update_record
    from geneva_provider.stage_runner.progress import ProgressLogger
    from tests.unit.test_quiet_runs import _collecting_logger

    tbl = db.create_table("t", pa.table({"x": [1]}))
    store = tbl.checkpoint_store
    start_record(store, JobRecord(job_id="j1", kind="backfill", table="t", column="y", status="RUNNING",
                                  stage="apply", created_at="2026-01-01T00:00:00", updated_at="2026-01-01T00:00:00",
                                  rows_planned=1_000, rows_checkpointed=200))
    job = JobSpec.model_construct(table="t")
    watch = CallWatch(store, job, "j1", partition=0, attempt=0)
    log, lines = _collecting_logger("geneva_provider.tests.in_flight")
    with ProgressLogger(store, "j1", "apply", log, seconds=0.1):
        with watch.calling("y", "slow", np.arange(100, dtype=np.uint64)) as tick:
            for _ in range(3):
                time.sleep(0.55)
                tick(50)  # a heartbeat at most every half second: 50, then 100, then 150 rows of this call
            time.sleep(0.3)
        update_record(store, "j1", rows_checkpointed=350)  # the call's rows, checkpointed
        time.sleep(0.3)
    computed = [int(m[1]) for line in lines if (m := re.search(r"; (\d+) computed", line))]
    assert computed and computed == sorted(computed) and computed[-1] == 350, lines
    assert {250, 300}.issubset(computed), lines  # the call's rows showed before its checkpoint
    assert any(re.search(r"computed, ETA [\d.]+s$", line) for line in lines), lines
    assert "; 350 of 1000 rows checkpointed, " in lines[-1] and "; 350 computed" in lines[-1], lines  # the last


def test_a_view_refresh_says_what_it_does_and_counts_its_rows(db, caplog, monkeypatch):
    monkeypatch.setattr(shown, "LOG_SECONDS", 0.2)
    tbl = db.create_table("events", pa.table({"id": list(range(40)), "x": list(range(40))}))

    @gp.udf(data_type=pa.int64())
    def slow(x):
        time.sleep(0.03)
        return 3 * x

    view = db.create_materialized_view("tripled", tbl.search(None).where("x < 30").select(
        {"id": "id", "x": "x", "z": slow}))
    caplog.set_level(logging.INFO, logger="geneva_provider")
    assert view.refresh(spark=InProcessRunner()).rows_computed == 30
    said = [r.getMessage() for r in caplog.records if r.name == "geneva_provider.progress"]
    assert said[:2] == ["refresh tripled: planning ...",
                        "refresh tripled: planned 30 rows to compute; starting Spark ..."], said
    counts = [int(m[1]) for s in said if (m := re.match(r"refresh tripled: (\d+) of 30 rows computed", s))]
    assert counts and counts == sorted(counts) and counts[-1] <= 30, said
    assert said[-1].startswith("refresh tripled: done: 30 rows computed"), said
    assert view.to_arrow(["x", "z"]).to_pylist() == [{"x": x, "z": 3 * x} for x in range(30)]
    view.to_lance().validate()
