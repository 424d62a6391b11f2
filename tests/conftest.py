"""Shared fixtures: one local[2] Spark session per test run, databases in temp dirs."""

from __future__ import annotations

import logging
import os

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from geneva_provider.spark import local_session

    session = local_session("local[2]", app_name="geneva-tests", conf={"spark.ui.showConsoleProgress": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
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
