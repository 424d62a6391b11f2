"""Quiet, tidy runs and logs that read true.

* A backfill's stderr (a process whose stderr is a pipe, as in an Airflow task) holds no Lance
  DataReplacement warning, no lance fork-safety warning, no Spark ``[Stage 0:>`` bars and no
  logging errors at exit -- while the commits still happen and other Lance logs still show.
* Progress lines give a real rows/s, also for a stage that ends before the first tick.
* Plan and operator describe a plan in the same words; compaction logs speak of rewritten rows.
* A refresh whose source table is gone names the view, and its error reads once.

Real Lance tables, real Spark, real Airflow operators.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import time
import traceback

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import JobRecord
from geneva_provider.pipeline.stages.job_records import start_record, update_record

NOISE = {
    "Lance DataReplacement warning": "DataReplacement operation. This operation is not stable yet",
    "lance fork-safety warning": "lance is not fork-safe",
    "Spark console progress bar": "[Stage ",
    "logging error": "--- Logging error ---",
    "closed-file error": "I/O operation on closed file",
}

def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LANCE_LOG"}
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


_COMMIT = textwrap.dedent("""
    import os, sys, uuid
    import geneva_provider  # noqa: F401 - what every user of the package imports first
    import lance, pyarrow as pa
    from lance.file import LanceFileWriter
    from lance.fragment import DataFile

    uri = sys.argv[1]
    ds = lance.write_dataset(pa.table({"x": [1, 2, 3]}), uri)
    ds.add_columns(pa.field("y", pa.int64()))
    ds = lance.dataset(uri)
    rel = uuid.uuid4().hex + ".lance"
    schema = pa.schema([pa.field("y", pa.int64())])
    with LanceFileWriter(os.path.join(uri, "data", rel), schema) as w:
        w.write_batch(pa.record_batch([pa.array([10, 20, 30])], schema=schema))
    file = DataFile(rel, fields=[ds.lance_schema.field("y").id()], column_indices=[0], file_major_version=2,
                    file_minor_version=2)
    op = lance.LanceOperation.DataReplacement([lance.LanceOperation.DataReplacementGroup(0, file)])
    lance.LanceDataset.commit(uri, op, read_version=ds.version)
    print(lance.dataset(uri).to_table().column("y").to_pylist())
""")


@pytest.mark.parametrize("user_level", [None, "info"])
def test_only_the_data_replacement_warning_is_silenced(tmp_path, user_level):
    """Lance's other logs keep their level: with LANCE_LOG=info its commit events still show."""
    env = _child_env(**({"LANCE_LOG": user_level} if user_level else {}))
    proc = subprocess.run([sys.executable, "-c", _COMMIT, str(tmp_path / "t.lance")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[10, 20, 30]"
    assert NOISE["Lance DataReplacement warning"] not in proc.stderr
    if user_level == "info":  # the user's own level still applies to the rest of Lance
        assert re.search(r'INFO .*event="committed".*operation="DataReplacement"', proc.stderr), proc.stderr


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _collecting_logger(name: str) -> tuple[logging.Logger, list[str]]:
    """A logger whose messages land in a list (Airflow's log set-up may bypass caplog)."""
    log = logging.getLogger(name)
    handler = _Lines()
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    return log, handler.lines


def _rate(line: str) -> float:
    return float(re.search(r"\(([\d.]+) rows/s\)", line)[1])


def test_a_stage_ending_before_the_first_tick_logs_its_real_rate(db):
    from geneva_provider.stage_runner.progress import ProgressLogger

    tbl = db.create_table("t", pa.table({"x": [1]}))
    store = tbl.checkpoint_store
    start_record(store, JobRecord(job_id="j1", kind="backfill", table="t", column="y", created_at="2026-01-01T00:00:00",
                                  updated_at="2026-01-01T00:00:00", rows_planned=1_000, rows_checkpointed=200))
    log, lines = _collecting_logger("geneva_provider.tests.progress")
    t0 = time.monotonic()
    with ProgressLogger(store, "j1", "apply", log, seconds=3_600):  # no tick: only the final line
        time.sleep(0.05)
        update_record(store, "j1", rows_checkpointed=1_000)
    outer = time.monotonic() - t0
    assert len(lines) == 1 and "1000 of 1000 rows checkpointed" in lines[0]
    rate = _rate(lines[0])
    # 800 rows in this stage (200 were checkpointed before it began), over at least the 0.05 s slept.
    assert 800 / outer - 1 <= rate <= 800 / 0.05 + 1


def test_a_stages_last_line_counts_the_rows_the_error_policy_skipped(db):
    """The operator's final progress line of a stage says how many rows were skipped, and says nothing of it when
    none were."""
    from geneva_provider.stage_runner.progress import ProgressLogger

    tbl = db.create_table("t", pa.table({"x": [1]}))
    store = tbl.checkpoint_store
    for job_id, failed in (("j1", 3), ("j2", 0)):
        start_record(store, JobRecord(job_id=job_id, kind="backfill", table="t", column="y",
                                      created_at="2026-01-01T00:00:00", updated_at="2026-01-01T00:00:00",
                                      rows_planned=1_000, rows_checkpointed=0))
        log, lines = _collecting_logger(f"geneva_provider.tests.skipped.{job_id}")
        with ProgressLogger(store, job_id, "write_commit", log, seconds=3_600):
            update_record(store, job_id, rows_checkpointed=1_000, rows_ready=1_000, rows_committed=1_000,
                          rows_failed=failed)
        assert len(lines) == 1, lines
        if failed:
            assert "1000 committed, 3 rows skipped by the error policy (left NULL) (" in lines[0], lines[0]
        else:
            assert "skipped" not in lines[0] and "1000 committed (" in lines[0], lines[0]


def test_a_missing_view_source_names_the_view_once(lance_db):
    from geneva_provider.operators.views import GenevaPlanRefreshOperator

    src = lance_db.create_table("events", pa.table({"x": list(range(10))}))
    lance_db.create_materialized_view("evens", src.search(None).where("x % 2 = 0").select({"x": "x"}))
    lance_db.drop_table("events")
    with pytest.raises(gp.TableNotFoundError) as info:
        GenevaPlanRefreshOperator(task_id="refresh", view="evens").execute({"run_id": "r3"})
    message = str(info.value)
    assert "view 'evens'" in message and "'events'" in message
    logged = "".join(traceback.format_exception(info.value))  # what a task log shows
    assert logged.count(message) == 1, logged


def _record(**rows: int) -> JobRecord:
    return JobRecord(job_id="j1", kind="backfill", table="t", column="y", status="RUNNING",
                     created_at="2026-01-01T00:00:00", updated_at="2026-01-01T00:00:00", rows_planned=1_000, **rows)


def test_progress_lines_come_when_rows_move_and_now_and_then_when_none_do():
    from geneva_provider.pipeline.stages.progress_lines import HEARTBEATS, ProgressLines

    lines = ProgressLines("j1", "apply", begin=_record(rows_checkpointed=100))
    first = lines.look(_record(rows_checkpointed=100))
    assert first is not None and "100 of 1000 rows checkpointed" in first and "(0 rows/s)" in first
    quiet = [lines.look(_record(rows_checkpointed=100)) for _ in range(HEARTBEATS - 1)]
    assert quiet == [None] * (HEARTBEATS - 1)  # nothing moved: no line...
    heartbeat = lines.look(_record(rows_checkpointed=100))
    assert heartbeat is not None and "100 of 1000" in heartbeat  # ...until the heartbeat's
    moved = lines.look(_record(rows_checkpointed=400))
    assert moved is not None and "400 of 1000 rows checkpointed" in moved and _rate(moved) > 0
    assert lines.look(_record(rows_checkpointed=400)) is None
    assert lines.look(_record(rows_checkpointed=400), final=True) is not None  # the stage's end: always a line


def test_the_progress_interval_is_the_operators_argument_else_the_geneva_config_option(monkeypatch):
    from geneva_provider.core.errors import InvalidArgumentError
    from geneva_provider.operators.spark import GenevaSparkApplyOperator

    assert GenevaSparkApplyOperator(task_id="a", plan={}).progress_interval == 5.0
    assert GenevaSparkApplyOperator(task_id="a", plan={}, progress_interval=2).progress_interval == 2.0
    monkeypatch.setenv("AIRFLOW__GENEVA__PROGRESS_INTERVAL", "3")
    assert GenevaSparkApplyOperator(task_id="a", plan={}).progress_interval == 3.0
    with pytest.raises(InvalidArgumentError, match=r"GenevaSparkApplyOperator 'a': progress_interval must be a "
                                                   r"positive number of seconds, got 0"):
        GenevaSparkApplyOperator(task_id="a", plan={}, progress_interval=0)


def test_a_running_stage_logs_a_line_per_interval_only_while_rows_move(db):
    from geneva_provider.stage_runner.progress import ProgressLogger

    tbl = db.create_table("t", pa.table({"x": [1]}))
    store = tbl.checkpoint_store
    start_record(store, JobRecord(job_id="j1", kind="backfill", table="t", column="y", created_at="2026-01-01T00:00:00",
                                  updated_at="2026-01-01T00:00:00", rows_planned=1_000, rows_checkpointed=0))
    log, lines = _collecting_logger("geneva_provider.tests.progress_cadence")
    with ProgressLogger(store, "j1", "apply", log, seconds=0.1):
        time.sleep(0.45)  # four looks at a record that does not move: the first makes a line, the rest none
        update_record(store, "j1", rows_checkpointed=500)
        time.sleep(0.3)
    checkpointed = [int(re.search(r"; (\d+) of 1000 rows checkpointed", line)[1]) for line in lines]
    assert checkpointed[0] == 0 and checkpointed.count(0) == 1, lines
    assert checkpointed[1:] == [500] * (len(checkpointed) - 1) and len(checkpointed) in (2, 3), lines


def test_a_local_jvm_s_stderr_loses_javas_incubator_notice_and_nothing_else():
    """What the copy of a local session's JVM stderr keeps: every byte but Java's incubator-module notice, a
    console bar's carriage-return redraws passed on as they come (never held for a newline)."""
    from geneva_provider.pipeline.spark.jvm_logs import without_notice

    notice = b"WARNING: Using incubator modules: jdk.incubator.vector\n"
    warn = b"26/12/02 01:11:50 WARN TaskSetManager: Lost task 0.0\n"
    assert without_notice(notice + warn) == (warn, b"")
    assert without_notice(b"\r[Stage 0:>   (0 + 2) / 5]") == (b"\r[Stage 0:>   (0 + 2) / 5]", b"")
    # the notice cut in two by the pipe: its first piece waits, then goes with the rest
    data, held = without_notice(notice[:20])
    assert (data, held) == (b"", notice[:20])
    assert without_notice(held + notice[20:] + warn) == (warn, b"")
    # a user's line that merely starts like it is passed on once it cannot be the notice
    assert without_notice(b"WARNING: disk almost full\n") == (b"WARNING: disk almost full\n", b"")
