"""The Airflow tier: ``spark_default`` is a ``spark_connect`` connection to the session's Spark Connect server.

So a ``dag.test()`` task's Spark stage runs as a client of one long-lived server instead of starting a
spark-submit JVM of its own.  A test about the spark-submit path asks for the ``spark_submit`` fixture and
keeps the ``spark`` (``local[2]``) connection of tests/conftest.py.
"""

from __future__ import annotations

import json

import pytest

from tests.class_archive import short_lived


@pytest.fixture
def spark_submit(monkeypatch):
    """This test's Spark stages go through spark-submit (the ``spark_default`` of tests/conftest.py), each stage
    program a short-lived JVM (tests/class_archive.py)."""
    short_lived(monkeypatch)


@pytest.fixture(autouse=True)
def spark_default(request, monkeypatch) -> str | None:
    """The ``spark_default`` connection of this test, as Airflow reads it from the environment."""
    if "spark_submit" in request.fixturenames:
        return None
    server = request.getfixturevalue("connect_server")
    conn = json.dumps({"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": server.port})
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", conn)
    return conn
