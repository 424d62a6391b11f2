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

import json
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
from geneva_provider.core.models import JobRecord
from geneva_provider.pipeline.compaction import plan_compaction, run_compaction
from geneva_provider.pipeline.job_records import read_record, start_record, update_record

NOISE = {
    "Lance DataReplacement warning": "DataReplacement operation. This operation is not stable yet",
    "lance fork-safety warning": "lance is not fork-safe",
    "Spark console progress bar": "[Stage ",
    "logging error": "--- Logging error ---",
    "closed-file error": "I/O operation on closed file",
}

_BACKFILL = textwrap.dedent("""
    import json, sys
    import pyarrow as pa
    import geneva_provider as gp
    from geneva_provider.stages import local_session

    db = gp.connect(sys.argv[1])
    tbl = db.create_table("t", pa.table({"x": list(range(30_000))}), max_rows_per_file=10_000)
    tbl.add_columns({"y": gp.udf(data_type=pa.int64())(lambda x: x * 3)})
    before = tbl.version
    spark = local_session("local[2]", app_name="quiet-test")
    result = tbl.backfill("y", spark=spark, progress=False, commit_granularity=1)
    spark.stop()
    print(json.dumps({"before": before, "version": result.version, "rows": result.rows_computed,
                      "fragments": result.fragments_committed}))
""")


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LANCE_LOG"}
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def test_a_backfill_prints_no_noise_and_still_commits(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _BACKFILL, str(tmp_path / "db")], capture_output=True, text=True,
                          env=_child_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rows"] == 30_000 and out["fragments"] == 3
    assert out["version"] >= out["before"] + 3  # one DataReplacement commit per fragment
    tbl = gp.connect(str(tmp_path / "db")).open_table("t")
    assert tbl.count_rows("y IS NULL OR y != x * 3") == 0
    tbl.dataset().validate()
    found = {what: text for what, text in NOISE.items() if text in proc.stderr}
    assert not found, f"{found} in stderr:\n{proc.stderr[-3000:]}"


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
    from geneva_provider.operators.progress import ProgressLogger

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


def test_plan_and_operator_agree_on_fragments_already_valid(lance_db, spark, capsys, caplog):
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator

    tbl = lance_db.create_table("events", pa.table({"x": list(range(300))}), max_rows_per_file=100)
    tbl.add_columns({"y": gp.udf(data_type=pa.int64())(lambda x: x + 1)})
    tbl.backfill("y", spark=spark, progress=False)
    tbl.add(pa.table({"x": list(range(300, 350))}))
    capsys.readouterr()
    caplog.clear()
    caplog.set_level(logging.INFO)
    summary = GenevaPlanBackfillOperator(task_id="plan", table="events", column="y").execute({"run_id": "r2"})
    assert summary["fragments_done"] == 3 and summary["fragments_reused"] == 0
    # Once Airflow has set up logging its lines are printed, else they reach the logging handlers: read both.
    out = capsys.readouterr()
    log = "\n".join([out.out, out.err, *(r.getMessage() for r in caplog.records)])
    job = summary["job_id"]
    planned = re.search(rf"\bplan {job}: table 'events' column 'y': (.*?)(?: \[geneva_provider|$)", log, re.M)[1]
    operator = re.search(rf"\bPlan {job}: (.*?)(?: \[airflow|$)", log, re.M)[1]
    assert planned == operator
    assert "50 rows to compute" in operator and "3 fragments already valid" in operator
    assert "0 staged fragments reused" in operator


def test_compaction_logs_rewritten_rows_not_rows_to_compute(db, spark):
    from geneva_provider.operators.progress import ProgressLogger

    tbl = db.create_table("t", pa.table({"x": list(range(1_100))}), max_rows_per_file=100)
    summary = plan_compaction(tbl.ref, {"target_rows_per_fragment": 1_000}, store=tbl.checkpoint_store)
    assert not summary.nothing_to_do
    description = summary.describe()
    assert "rows to compute" not in description and "rewrite task" in description and "11 fragments" in description
    log, lines = _collecting_logger("geneva_provider.tests.compact")
    with ProgressLogger(tbl.checkpoint_store, summary.job_id, "compact", log, seconds=3_600):
        result = run_compaction(summary.plan_uri, spark)
    assert result.fragments_removed == 11
    final = lines[-1]
    assert "1100 of 1100 rows rewritten and committed" in final and "checkpointed" not in final
    assert read_record(tbl.checkpoint_store, summary.job_id).rows_committed == 1_100
    assert tbl.count_rows() == 1_100
    tbl.dataset().validate()


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
