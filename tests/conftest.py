"""Shared fixtures: one local[2] Spark session per test run, databases in temp dirs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.class_archive import jvm_options, suite_archive
from tests.file_order import expected_seconds, longest_first

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Object-store tests talk to a loopback server only: never let a credential chain reach for cloud metadata.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

# Airflow reads its configuration when first imported: set it up before any test imports it.
# DAGS_FOLDER holds the shipped example DAGs plus the test-only DAGs of tests/dags.
_ROOT = Path(__file__).resolve().parents[1]
# Everything the run writes to a temp dir goes under one directory, removed when the session ends
# (pytest_sessionfinish): pytest's tmp_path, Airflow's home, Python's tempfile in this process and
# its children (TMPDIR), Spark's local dirs (SPARK_LOCAL_DIRS) and the temp dir of every JVM that
# spark-submit starts -- the py4j gateway, Spark Connect servers, stage programs (SPARK_SUBMIT_OPTS).
_SYSTEM_TMP = Path(tempfile.gettempdir())
_SYSTEM_TMP_BEFORE = set(os.listdir(_SYSTEM_TMP))
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="geneva-tests-"))
for _sub in ("tmp", "spark", "java"):
    (_SESSION_TMP / _sub).mkdir()
os.environ["TMPDIR"] = str(_SESSION_TMP / "tmp")
os.environ["SPARK_LOCAL_DIRS"] = str(_SESSION_TMP / "spark")
# Spark's classes from a class-data-sharing archive when `make test` built one (tests/class_archive.py):
# every JVM spark-submit starts maps it, and starts in about half the CPU.
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [
    os.environ.get("SPARK_SUBMIT_OPTS"), f"-Djava.io.tmpdir={_SESSION_TMP / 'java'}", *jvm_options(suite_archive())]))
tempfile.tempdir = None  # this process too: gettempdir() reads TMPDIR again
_AIRFLOW_TMP = Path(tempfile.mkdtemp(prefix="geneva-airflow-"))
_DAGS = _AIRFLOW_TMP / "dags"
_DAGS.mkdir()
(_AIRFLOW_TMP / "home").mkdir()
for _src in [*(_ROOT / "dags_examples").glob("*.py"), *(_ROOT / "tests" / "dags").glob("*.py")]:
    shutil.copy(_src, _DAGS / _src.name)
LANCE_DB = _AIRFLOW_TMP / "lake"
# Where tests.helpers:flaky_double logs its calls, and the flag whose presence makes it die once: set before any
# server starts, so the Python workers of every Spark Connect server of the run see them too.
# This machine's warm Spark Connect sessions (geneva_provider.pipeline.spark.warm_sessions): the run's own, not the
# user's ~/.cache.
os.environ["GENEVA_CONNECT_SESSIONS_DIR"] = str(_SESSION_TMP / "connect-sessions")
os.environ["GENEVA_TEST_CALL_DIR"] = str(_SESSION_TMP / "flaky-calls")
os.environ["GENEVA_TEST_FAIL_FLAG"] = str(_SESSION_TMP / "flaky-dies-once")
(_SESSION_TMP / "flaky-calls").mkdir()
FAKE_SECRET = "FAKE-SECRET-9f3b2c7e"  # must never show up in XCom or task logs
os.environ.update({
    "AIRFLOW_HOME": str(_AIRFLOW_TMP / "home"),
    "AIRFLOW__CORE__DAGS_FOLDER": str(_DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(_AIRFLOW_TMP / "logs"),
    "AIRFLOW_CONN_LANCE_DEFAULT": json.dumps({
        "conn_type": "lance", "host": str(LANCE_DB),
        "extra": {"secret_storage_options": {"aws_secret_access_key": FAKE_SECRET}}}),
    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    "GENEVA_HOURLY_WAIT_SECONDS": "3",
    "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",  # the sensors honour it (the tests check deferral)
    # The suite's tables are small: every Spark stage goes to Spark, as the tests of that path expect; the tests of
    # small plans run in the task's process (in_process_rows) set it themselves.
    "AIRFLOW__GENEVA__IN_PROCESS_ROWS": "0",
})


def pytest_collection_modifyitems(session, config, items):
    """Test files longest first (tests/file_order.py), each file's tests in their own order: with
    ``--dist loadfile --no-loadscope-reorder`` the workers take the long files first and end together."""
    rank = {path: i for i, path in enumerate(longest_first([item.nodeid.split("::")[0] for item in items],
                                                             expected_seconds()))}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


def pytest_sessionfinish(session, exitstatus):
    """Removes the run's temp directory (GENEVA_KEEP_TMP=1 keeps it for a post-mortem)."""
    if os.environ.get("GENEVA_KEEP_TMP") != "1":
        shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Names what this run left in the system temp dir (entries of the kinds it makes, new since it began).

    Other processes on the machine may create such entries meanwhile, so this reports, it does not fail.
    """
    ours = ("geneva-", "spark-", "spark_connect_model_cache", "blockmgr-", "pytest-of-", "pyspark-")
    left = sorted(n for n in set(os.listdir(_SYSTEM_TMP)) - _SYSTEM_TMP_BEFORE if n.startswith(ours)
                  and n != _SESSION_TMP.name)
    if left:
        terminalreporter.write_line(f"temp dir check: new entries in {_SYSTEM_TMP} during this run: {left}",
                                    yellow=True)


@pytest.fixture(scope="session")
def spark():
    from geneva_provider.stages import local_session

    session = local_session("local[2]", app_name="geneva-tests", conf={"spark.ui.showConsoleProgress": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A long-lived Spark Connect server on 127.0.0.1 (local[2]), started for the tests that use it and stopped after.

    A killed client's orphaned query is given up after 2 s (the default server allows 15 s).
    """
    from geneva_provider.connect_server import LocalConnectServer

    conf = {"spark.connect.execute.manager.detachedTimeout": "2s",
            "spark.connect.execute.manager.maintenanceInterval": "1s"}
    with LocalConnectServer(0, master="local[2]", directory=tmp_path_factory.mktemp("connect"), conf=conf) as server:
        yield server


@pytest.fixture(scope="module")
def connect_spark(connect_server):
    # The Connect client class itself: this test process also holds the suite's classic session,
    # beside which pyspark.sql.SparkSession.builder.remote() refuses to start a remote one.
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    session = RemoteSparkSession.builder.remote(connect_server.url).create()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def db(tmp_path):
    import geneva_provider as gp

    return gp.connect(str(tmp_path / "db"))


@pytest.fixture
def call_dir(tmp_path):
    d = tmp_path / "calls"
    d.mkdir()
    return str(d)


@pytest.fixture(autouse=True)
def _quiet_logs(caplog):
    caplog.set_level(logging.INFO, logger="geneva_provider")


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated Airflow metadata DB (SQLite in the temp AIRFLOW_HOME), for dag.test()."""
    from airflow.utils import db as airflow_db_utils

    airflow_db_utils.resetdb()
    yield


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors, bag.import_errors
    return bag


@pytest.fixture
def lance_db():
    """The database behind the lance_default connection, emptied for each test."""
    import geneva_provider as gp

    shutil.rmtree(LANCE_DB, ignore_errors=True)
    return gp.connect(str(LANCE_DB))


@pytest.fixture
def team(lance_db):
    """The sensors' table ``team`` (x = 0..4000, fragments of 1,500 rows), UDF column ``s = double(x)``."""
    from tests.helpers import double, events_table

    tbl = lance_db.create_table("team", events_table(4_001), max_rows_per_file=1_500)
    tbl.add_columns({"s": double})
    return tbl


@pytest.fixture(scope="module")
def s3():
    """An S3-compatible server (moto) on 127.0.0.1 for a module's object-store tests."""
    from tests.s3_server import S3Server

    with S3Server() as server:
        yield server
