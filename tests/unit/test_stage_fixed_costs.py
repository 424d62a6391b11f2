"""What a Spark stage costs before its work (issue 44), checked without a JVM.

* a stage run in a process of its own is seen ending within a fraction of its time, not at the next 5 s poll;
* the package zip a stage ships is built once per version of the sources, not once per stage;
* the process that runs a detached Connect stage does not import Airflow (seconds of imports per stage);
* a small plan (``in_process_rows``) runs in the task's process unless a UDF asks for GPUs;
* a write+commit whose column files are small runs in the task's process, not in a second spark-submit JVM.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.operators._common import IN_PROCESS_ROWS, in_process_rows_setting
from geneva_provider.operators.spark import FIRST_POLL_SECONDS, poll_wait
from geneva_provider.operators.spark_backends import SparkSettings, small_plan, small_write
from geneva_provider.pipeline.stages import on_driver
from geneva_provider.spark_apps.package import package_zip
from geneva_provider.stages import plan_backfill
from tests.helpers import events_table


def test_a_short_stage_is_seen_ending_soon_and_a_long_one_polled_at_most_every_poll_interval():
    assert poll_wait(0.0, 5.0) == FIRST_POLL_SECONDS
    waits, elapsed = [], 0.0
    while elapsed < 2.0:  # a 2 s stage: looked at every 0.1-0.2 s, its end seen within 0.2 s
        waits.append(poll_wait(elapsed, 5.0))
        elapsed += waits[-1]
    assert max(waits) <= 0.21 and elapsed - 2.0 <= 0.21
    assert poll_wait(600.0, 5.0) == 5.0  # a long stage: no more often than poll_interval
    assert poll_wait(600.0, 0.01) == FIRST_POLL_SECONDS  # never a busy loop


def test_the_package_zip_is_built_once_per_version_of_the_sources(tmp_path):
    first = package_zip()
    stat = os.stat(first)
    again = package_zip()
    assert again == first
    assert (os.stat(again).st_ino, os.stat(again).st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)  # not rewritten
    with zipfile.ZipFile(first) as zf:
        names = set(zf.namelist())
    assert {"geneva_provider/__init__.py", "geneva_provider/spark_apps/apply.py",
            "geneva_provider/stage_runner/detached.py"} <= names
    target = package_zip(tmp_path / "pkg.zip")  # `make py-files`: a zip where asked, always written
    with zipfile.ZipFile(target) as zf:
        assert set(zf.namelist()) == names


def test_the_runner_of_a_detached_connect_stage_imports_no_airflow():
    code = ("import sys\n"
            "import geneva_provider.stage_runner.detached\n"
            "from geneva_provider.stage_runner.backends import ConnectStageBackend, SparkSettings\n"
            "from geneva_provider.pipeline.stage_reports import StageSubmission\n"
            "from geneva_provider.pipeline.stages.registry import spark_stage\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'airflow'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_in_process_rows_from_the_argument_the_config_or_the_default(monkeypatch):
    assert in_process_rows_setting(7, "apply") == 7
    monkeypatch.setenv("AIRFLOW__GENEVA__IN_PROCESS_ROWS", "123")
    assert in_process_rows_setting(None, "apply") == 123
    monkeypatch.setenv("AIRFLOW__GENEVA__IN_PROCESS_ROWS", "")
    assert in_process_rows_setting(None, "apply") == IN_PROCESS_ROWS
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidArgumentError, match=r"GenevaSparkApplyOperator 'apply': in_process_rows must be"):
            in_process_rows_setting(bad, "GenevaSparkApplyOperator 'apply'")
    monkeypatch.setenv("AIRFLOW__GENEVA__IN_PROCESS_ROWS", "many")
    with pytest.raises(InvalidArgumentError, match=r"\[geneva\] in_process_rows .* got 'many'"):
        in_process_rows_setting(None, "apply")


@gp.udf(data_type=pa.int64(), input_columns=["x"])
def doubled(x: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    return pc.multiply(x, 2)


@gp.udf(data_type=pa.int64(), num_gpus=1)
def on_a_gpu(x: int) -> int:
    return x * 2


def test_a_small_plan_runs_in_the_task_unless_it_is_larger_or_a_udf_wants_a_gpu(db):
    tbl = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": doubled, "g": on_a_gpu})
    small = plan_backfill(tbl.ref, "y")
    assert small.rows_to_compute == 3_000
    why = small_plan(SparkSettings(in_process_rows=3_000), small, None)
    assert why is not None and "3,000 rows to compute, at most 3,000" in why
    assert small_plan(SparkSettings(in_process_rows=2_999), small, None) is None
    assert small_plan(SparkSettings(in_process_rows=0), small, None) is None
    gpu = plan_backfill(tbl.ref, "g")
    assert small_plan(SparkSettings(in_process_rows=1_000_000), gpu, None) is None  # GPUs only on Spark


def test_a_write_of_small_column_files_runs_in_the_task_unless_they_are_larger_or_in_process_rows_is_0(
        db, monkeypatch):
    tbl = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": doubled})
    plan = plan_backfill(tbl.ref, "y")
    why = small_write(SparkSettings(in_process_rows=10), plan, None)  # a plan too large to run in the task
    # 3,000 rows of y (int64) and its fingerprint column (8 bytes a value): 48,000 bytes of column files
    assert why is not None and why.startswith("3,000 rows (~46 KiB)") and "no spark-submit" in why
    assert small_write(SparkSettings(in_process_rows=0), plan, None) is None  # 0: every stage on Spark
    monkeypatch.setattr(on_driver, "DRIVER_WRITE_BYTES", 3_000 * 16)
    assert small_write(SparkSettings(in_process_rows=10), plan, None) is not None
    monkeypatch.setattr(on_driver, "DRIVER_WRITE_BYTES", 3_000 * 16 - 1)  # one byte short: a JVM writes them
    assert small_write(SparkSettings(in_process_rows=10), plan, None) is None
