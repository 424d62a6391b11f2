"""The spark-submit programs run the apply and write+commit stages from a plan URI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from geneva_provider.backfill import verify_backfill
from geneva_provider.plan import plan_backfill
from geneva_provider.spark_apps import app_path
from tests.helpers import counting_double, events_table, read_calls

BIN = Path(sys.executable).parent


def spark_submit(app: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.pyspark.python={sys.executable}", app_path(app), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd="/")


def test_spark_submit_apply_then_write_commit(db, call_dir, tmp_path):
    tbl = db.create_table("events", events_table(5_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl, "y")

    apply_result = tmp_path / "apply.json"
    proc = spark_submit("apply", "--plan-uri", summary["plan_uri"], "--result-file", str(apply_result))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(apply_result.read_text())
    assert result["status"] == "success" and result["rows_computed"] == 5_000
    assert sorted(read_calls(call_dir)) == list(range(5_000))

    write_result = tmp_path / "write.json"
    proc = spark_submit("write_commit", "--plan-uri", summary["plan_uri"], "--result-file", str(write_result))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(write_result.read_text())
    assert result["status"] == "success" and result["fragments_committed"] == 3
    assert result["version"] == tbl.version

    assert verify_backfill(summary["plan_uri"])["rows_verified"] == 5_000
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]]
    tbl.dataset().validate()


def test_spark_submit_failure_exits_non_zero_with_the_reason(db, tmp_path):
    missing = f"{db.uri}/events.lance/_checkpoints/plan-nope.lance"
    result_file = tmp_path / "r.json"
    proc = spark_submit("write_commit", "--plan-uri", missing, "--result-file", str(result_file))
    assert proc.returncode == 1
    # spark-submit's PythonRunner merges the Python driver's stderr into its own stdout.
    assert f"geneva write_commit failed: InvalidArgumentError: plan not found: {missing}" in proc.stdout + proc.stderr
    assert json.loads(result_file.read_text())["status"] == "failed"
