"""Quiet, tidy runs and logs that read true.

The part that needs a Spark session; the rest is in tests/unit/test_quiet_runs.py.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap

import pyarrow as pa

import geneva_provider as gp
from geneva_provider.pipeline.maintenance.compaction import plan_compaction, run_compaction
from geneva_provider.pipeline.stages.job_records import read_record
from tests.unit.test_quiet_runs import NOISE, _child_env, _collecting_logger

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
    operator = re.search(rf"\bPlan {job} of backfill of table 'events': (.*?)(?: \[airflow|$)", log, re.M)[1]
    assert planned == operator
    assert "50 rows to compute" in operator and "3 fragments already valid" in operator
    assert "0 staged fragments reused" in operator


def test_compaction_logs_rewritten_rows_not_rows_to_compute(db, spark):
    from geneva_provider.stage_runner.progress import ProgressLogger

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




# What Spark's JVM prints as it starts with its own log4j2 defaults: none of it is the user's business.
JVM_BANNER = {
    "Java's incubator-module notice": "WARNING: Using incubator modules",
    "log4j profile": "Using Spark's default log4j profile",
    "default log level": "Setting default log level to",
    "setLogLevel hint": "To adjust logging level use sc.setLogLevel",
    "native-hadoop warning": "NativeCodeLoader",
}

_NOTEBOOK = textwrap.dedent("""
    import json, sys
    import pyarrow as pa
    import geneva_provider as gp

    db = gp.connect(sys.argv[1])
    tbl = db.create_table("t", pa.table({"x": list(range(4_000))}), max_rows_per_file=500)
    tbl.add_columns({"y": gp.udf(data_type=pa.int64())(lambda x: x * 3)})
    result = tbl.backfill("y", progress=False)  # no session given: the package starts its local one
    compacted = tbl.compact(target_rows_per_fragment=2_000)
    from pyspark.sql import SparkSession
    jvm = SparkSession.getActiveSession().sparkContext._jvm
    jvm.org.apache.logging.log4j.LogManager.getLogger("org.apache.spark.geneva.test").warn("a warning that matters")
    print(json.dumps({"rows": result.rows_computed, "removed": compacted.fragments_removed}), flush=True)
""")


def _notebook(tmp_path, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", _NOTEBOOK, str(tmp_path / "db")], capture_output=True, text=True,
                          env=_child_env(**env), timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"rows": 4_000, "removed": 8}
    tbl = gp.connect(str(tmp_path / "db")).open_table("t")
    assert tbl.count_rows() == 4_000 and tbl.count_rows("y IS NULL OR y != x * 3") == 0
    tbl.dataset().validate()
    return proc


def test_a_local_session_starts_without_the_jvm_banner(tmp_path):
    """A backfill and a compaction given no session start the package's local one: stderr holds no JVM start-up
    banner, and a Spark warning logged after the start still reaches it."""
    proc = _notebook(tmp_path)
    found = {what: text for what, text in JVM_BANNER.items() if text in proc.stderr}
    assert not found, f"{found} in stderr:\n{proc.stderr[-3000:]}"
    assert re.search(r"WARN test: a warning that matters", proc.stderr), proc.stderr[-3000:]


def test_a_users_own_log4j_configuration_still_applies_to_a_local_session(tmp_path):
    """LOG4J_CONFIGURATION_FILE set by the user is theirs: Spark logs with its layout and loggers (all of Hadoop's
    warnings included)."""
    mine = tmp_path / "log4j2.properties"
    mine.write_text("rootLogger.level = info\nrootLogger.appenderRef.stdout.ref = console\n"
                    "appender.console.type = Console\nappender.console.name = console\n"
                    "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                    "appender.console.layout.pattern = MINE %p %c{1}: %m%n\n")
    proc = _notebook(tmp_path, LOG4J_CONFIGURATION_FILE=mine.as_uri())
    # not anchored at a line start: the JVM and Python both write to stderr, and a line of one can split the other's
    assert re.search(r"MINE WARN NativeCodeLoader: ", proc.stderr), proc.stderr[-3000:]
    assert re.search(r"MINE WARN test: a warning that matters", proc.stderr), proc.stderr[-3000:]
