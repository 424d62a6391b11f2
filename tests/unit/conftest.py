"""The unit tier: no JVM, no Airflow metadata DB (see tests/README.md for what belongs here).

While its tests run, ``java`` is a tripwire (:mod:`tests.unit.java_tripwire`); when they are done, the
tier fails if anything asked for Java, if a ``java`` process lives under this one, or if the Airflow
metadata DB was created or written meanwhile.  It holds whether the tier runs alone (``make test-unit``) or
as the first tier of ``make test``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.java_tripwire import JavaTripwire, java_descendants


def _airflow_db() -> tuple[bool, int]:
    """Whether the SQLite metadata DB of this run's AIRFLOW_HOME exists, and when it was last written."""
    path = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    return (True, path.stat().st_mtime_ns) if path.exists() else (False, 0)


@pytest.fixture(scope="package", autouse=True)
def _no_jvm_and_no_airflow_db(tmp_path_factory):
    wire = JavaTripwire(tmp_path_factory.mktemp("java-tripwire"))
    patch = pytest.MonkeyPatch()
    for name in ("JAVA_HOME", "PATH"):
        patch.setenv(name, wire.env(os.environ)[name])
    db_before, java_before = _airflow_db(), set(java_descendants())
    try:
        yield wire
    finally:
        patch.undo()
    problems = [f"java was called: {call}" for call in wire.calls()]
    problems += [f"a java process runs under the test process: {p}" for p in set(java_descendants()) - java_before]
    if _airflow_db() != db_before:
        problems.append(f"the Airflow metadata DB was created or written: {_airflow_db()} (before: {db_before})")
    if problems:
        pytest.fail("the unit tier starts no JVM and uses no Airflow DB:\n" + "\n".join(problems), pytrace=False)
