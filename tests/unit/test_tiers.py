"""The unit tier's guard bites: `java` is a tripwire while the unit tests run, and a Spark session asked for
under it fails at once, recorded, with no JVM started (tests/unit/conftest.py fails the run on such a record)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.unit.java_tripwire import EXIT_CODE, JavaTripwire, java_descendants


def test_java_is_the_tripwire_while_the_unit_tests_run(_no_jvm_and_no_airflow_db):
    assert shutil.which("java") == str(_no_jvm_and_no_airflow_db.root / "bin" / "java")
    assert os.environ["JAVA_HOME"] == str(_no_jvm_and_no_airflow_db.root)


def test_a_spark_session_under_the_tripwire_fails_and_is_recorded_without_a_jvm(tmp_path):
    wire = JavaTripwire(tmp_path / "wire")
    script = ("from pyspark.sql import SparkSession\n"
              "SparkSession.builder.master('local[1]').getOrCreate()\n")
    proc = subprocess.run([sys.executable, "-c", script], env=wire.env(os.environ), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "the unit tier starts no JVM" in proc.stderr, proc.stderr[-2000:]
    calls = wire.calls()
    assert len(calls) == 1 and "org.apache.spark.launcher.Main" in calls[0], calls
    assert java_descendants() == []


def test_a_direct_java_call_is_refused_and_recorded(tmp_path):
    wire = JavaTripwire(tmp_path / "wire")
    proc = subprocess.run(["java", "-version"], env=wire.env(os.environ), capture_output=True, text=True, timeout=30)
    assert proc.returncode == EXIT_CODE
    assert wire.calls()[0].endswith(" -version")
