"""The spark-submit programs run the apply and write+commit stages from a plan URI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyspark

from geneva_provider.core.contracts.models import StageReport
from geneva_provider.spark_apps import app_path
from geneva_provider.stages import plan_backfill, verify
from tests.class_archive import SHORT_LIVED_JVM_OPTIONS
from tests.helpers import counting_double, counting_split, events_table, read_calls

BIN = Path(sys.executable).parent


def spark_submit(app: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_SUBMIT_OPTS": " ".join([os.environ.get("SPARK_SUBMIT_OPTS", ""), *SHORT_LIVED_JVM_OPTIONS]),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.pyspark.python={sys.executable}", app_path(app), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd="/")


def test_spark_submit_apply_then_write_commit(db, call_dir, tmp_path):
    tbl = db.create_table("events", events_table(5_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl.ref, "y")

    apply_result = tmp_path / "apply.json"
    proc = spark_submit("apply", "--plan-uri", summary.plan_uri, "--result-file", str(apply_result))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = StageReport.model_validate_json(apply_result.read_text())
    assert report.status == "success" and report.result.stage == "apply" and report.result.rows_computed == 5_000
    assert sorted(read_calls(call_dir)) == list(range(5_000))

    write_result = tmp_path / "write.json"
    proc = spark_submit("write_commit", "--plan-uri", summary.plan_uri, "--result-file", str(write_result))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = StageReport.model_validate_json(write_result.read_text())
    assert report.status == "success" and report.result.fragments_committed == 3
    assert report.result.version == tbl.version

    assert verify(summary.plan_uri).rows_verified == 5_000
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


def test_spark_submit_programs_require_a_result_argument(db):
    proc = spark_submit("apply", "--plan-uri", f"{db.uri}/x.lance/_checkpoints/plan-x.lance")
    assert proc.returncode == 2
    assert "one of --result-file or --result-key is required" in proc.stdout + proc.stderr


def test_spark_submit_refreshes_a_chunker_view(db, call_dir, tmp_path):
    from geneva_provider.stages import plan_refresh

    docs = db.create_table("docs", pa.table({"doc_id": list(range(300)), "text": ["x" * (i % 35) for i in range(300)]}),
                           stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id"]), udtf=counting_split(call_dir))
    summary = plan_refresh(view.ref)
    assert summary.kind == "udtf" and summary.rows_to_compute == 300
    for stage in ("apply", "write_commit"):
        result = tmp_path / f"{stage}.json"
        proc = spark_submit(stage, "--plan-uri", summary.plan_uri, "--result-file", str(result))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert StageReport.model_validate_json(result.read_text()).status == "success"
    verify(summary.plan_uri)
    assert sorted(read_calls(call_dir)) == list(range(300))
    got = sorted(zip(*view.to_arrow(["doc_id", "start"]).to_pydict().values(), strict=True))
    assert got == sorted((i, s) for i in range(300) for s in range(0, i % 35, 10))
    view.dataset().validate()
