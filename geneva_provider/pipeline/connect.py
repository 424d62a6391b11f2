"""Spark Connect client sessions for the stages (pipeline).

An Airflow worker that talks to a long-lived Spark Connect server pays no JVM start-up per stage:
it opens a client session (under a second), ships this package's code with ``addArtifacts`` and
runs the stage's tasks through ``mapInArrow``.  Before any work, one tiny probe job checks that
the server's Python workers can run the stages -- same Python minor version as this client, the
same pyspark, pyarrow and pylance importable, this package's version -- so a mismatched cluster
fails the task in seconds with a message saying what differs, not with a pickling error deep in
a Spark log.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from geneva_provider.core.errors import SparkEnvironmentError

log = logging.getLogger(__name__)

FIRST_CONTACT_RETRIES = 5  # 0.05 s, x4 each time: about 17 s of back-off before a server counts as unreachable


def connect_session(url: str, *, pyfiles: Sequence[str] = (), session_id: str | None = None) -> Any:
    """A new Spark Connect client session on ``url`` with ``pyfiles`` shipped and the environment checked.

    Always a session of its own (never a default session another caller shares), so stopping it
    releases only what this stage used; ``session_id`` names it, so that a later attempt can stop
    its work with :func:`resume_session` if this process dies.  ``url`` may carry a token:
    it is never logged.
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    started = time.monotonic()
    try:
        spark = RemoteSparkSession.builder.remote(_with_session_id(url, session_id)).create()
        version = _first_contact(spark)
    except Exception as exc:  # noqa: BLE001 - the URL may hold a token: name the server by host only
        error = SparkEnvironmentError(f"cannot open a Spark Connect session on {_host(url)}: "
                                      f"{type(exc).__name__}: {_reason(exc)}")
        error.retryable = True  # the server may be restarting
        raise error from None
    try:
        _prepare(spark, pyfiles, _host(url))
    except BaseException:
        close_session(spark)
        raise
    log.info("Spark Connect session on %s ready in %.1fs (Spark %s)", _host(url), time.monotonic() - started,
             version)
    return spark


def _first_contact(spark: Any) -> str:
    """The server's Spark version: the session's first call, retried for ~20 s (not the client's 10 minutes).

    An unreachable server then fails the task soon, with a retryable error, and Airflow's retries
    (not a task stuck in gRPC back-off) decide how long to wait for it; once reached, the
    session keeps pyspark's patient retry policy for the work itself.
    """
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = spark.client
    patient = client.get_retry_policies()
    client.set_retry_policies([DefaultPolicy(max_retries=FIRST_CONTACT_RETRIES)])
    try:
        version = spark.version
    except BaseException:
        # Release the session without back-off now: else its exit hook would retry for minutes.
        client.set_retry_policies([DefaultPolicy(max_retries=0)])
        close_session(spark)
        raise
    client.set_retry_policies(patient)
    return version


def resume_session(url: str, session_id: str, *, pyfiles: Sequence[str] = ()) -> tuple[Any, int] | None:
    """Attaches to the session an earlier stage of the job left open: ``(session, operations stopped)``.

    The next stage reuses the job's session so it finds warm Python workers (this package and
    pylance imported, the table open) instead of paying a new session's worker start-up.  Whatever
    still runs there -- the query of an attempt whose worker died -- is interrupted first, so
    two attempts never compute the same rows side by side.  ``pyfiles`` are shipped and the probe
    runs again only if the session lacks its marker of them (a restarted server recreates the
    session empty).  None when the session cannot be used (released, or its artifacts changed):
    open a new one.
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    spark = RemoteSparkSession.builder.remote(_with_session_id(url, session_id)).create()
    try:
        _first_contact(spark)
        stopped = len(spark.interruptAll())
        _prepare(spark, pyfiles, _host(url))
    except Exception as exc:  # noqa: BLE001 - released (SESSION_CLOSED) or unusable: a new session will do
        log.info("the job's Spark Connect session %s cannot be reused (%s): opening a new one", session_id,
                 _reason(exc))
        close_session(spark)
        return None
    if stopped:
        log.info("stopped %d Spark Connect operations left running by an earlier attempt", stopped)
    return spark, stopped


PREPARED_CONF = "spark.geneva.session.prepared"  # a session conf: what was shipped to and checked in it


def _prepare(spark: Any, pyfiles: Sequence[str], server: str) -> None:
    """Ships ``pyfiles`` and probes the workers, unless this session already holds exactly that.

    The marker (a hash of the files and of this client's versions) is a session conf, so it lives
    and dies with the server-side session a later stage resumes.
    """
    import hashlib

    import pyspark

    from geneva_provider.core.version import __version__

    digest = hashlib.sha256(f"{sys.version_info[:2]} {pyspark.__version__} {__version__}".encode())
    for path in pyfiles:
        with open(path, "rb") as f:
            digest.update(f.read())
    marker = digest.hexdigest()
    if spark.conf.get(PREPARED_CONF, "") == marker:
        return
    for path in pyfiles:
        spark.addArtifacts(path, pyfile=True)
    check_environment(spark, server)
    spark.conf.set(PREPARED_CONF, marker)


def close_session(spark: Any, *, keep: bool = False) -> None:
    """Releases the session on the server; ``keep=True`` only closes this client's connection, leaving
    the session (and its warm Python workers) for the job's next stage to :func:`resume_session`.

    A kept session that no stage resumes is released by the server after its idle timeout
    (``spark.connect.session.manager.defaultSessionTimeout``).
    """
    if keep:
        spark.release_session_on_close = False
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - releasing a closed session may fail; nothing is left to release
        pass


def _with_session_id(url: str, session_id: str | None) -> str:
    if session_id is None:
        return url
    return f"{url};session_id={session_id}" if "/;" in url else f"{url.rstrip('/')}/;session_id={session_id}"


def check_environment(spark: Any, server: str = "the Spark Connect server") -> None:
    """Fails with :class:`SparkEnvironmentError` unless the server's Python workers match this client.

    Runs one task that reports its interpreter and package versions.  Spark refuses a worker
    whose Python minor version differs from the client's before the probe runs; that refusal is
    turned into the same clear error.
    """
    import pyspark

    from geneva_provider.core.version import __version__

    client_python = "{}.{}".format(*sys.version_info[:2])
    if pyspark.__version__ != spark.version:
        raise SparkEnvironmentError(
            f"{server} runs Spark {spark.version} but this client has pyspark {pyspark.__version__}: "
            "the stages' Python code must run on the same pyspark version as the server")
    try:
        rows = spark.range(0, 1, 1, 1).mapInArrow(_probe, _PROBE_SCHEMA).collect()
    except Exception as exc:  # noqa: BLE001 - any failure here means the workers cannot run the stages
        text = str(exc)
        if "PYTHON_VERSION_MISMATCH" in text or "different version" in text:
            raise SparkEnvironmentError(
                f"{server}: its Python workers run another Python minor version than this client "
                f"(Python {client_python}); run the server's workers (spark.pyspark.python) on Python "
                f"{client_python}: {_reason(exc)}") from None
        raise SparkEnvironmentError(f"{server}: its Python workers cannot run the stages: {_reason(exc)}") from None
    found = rows[0].asDict()
    problems = []
    if found["python"] != client_python:
        problems.append(f"Python {found['python']} (this client: {client_python})")
    if found["pyspark"] != pyspark.__version__:
        problems.append(f"pyspark {found['pyspark']} (this client: {pyspark.__version__})")
    if found["geneva_provider"] != __version__:
        problems.append(f"geneva_provider {found['geneva_provider']} (this client: {__version__})")
    if found["missing"]:
        problems.append(f"cannot import {found['missing']}")
    if problems:
        raise SparkEnvironmentError(f"{server}: its Python workers ({found['executable']}) have "
                                    + "; ".join(problems) + ": install the same versions there")


_PROBE_SCHEMA = "python string, pyspark string, geneva_provider string, executable string, missing string"


def _probe(batches: Iterator[Any]) -> Iterator[Any]:
    """Runs on a Python worker: what it runs and what it cannot import."""
    import importlib
    import sys

    import pyarrow as pa

    for _ in batches:
        pass
    missing = []
    versions = {}
    for module in ("pyspark", "lance", "cloudpickle", "geneva_provider.core.version"):
        try:
            versions[module] = getattr(importlib.import_module(module), "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - reported to the client
            missing.append(f"{module.split('.')[0]} ({type(exc).__name__}: {exc})")
            versions[module] = ""
    yield pa.RecordBatch.from_pydict({
        "python": ["{}.{}".format(*sys.version_info[:2])], "pyspark": [versions["pyspark"]],
        "geneva_provider": [versions["geneva_provider.core.version"]], "executable": [sys.executable],
        "missing": ["; ".join(missing)]})


def _host(url: str) -> str:
    """``sc://host:port`` of a Connect URL, without its parameters (a token lives there)."""
    return url.split(";", 1)[0].split("/;", 1)[0].rstrip("/")


_ERROR_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b: .+")


def _reason(exc: BaseException) -> str:
    """The line that says what went wrong: a worker's own error (``ModuleNotFoundError: ...``) over Spark's
    "An exception was thrown from the Python worker" wrapper."""
    text = str(exc).strip()
    grpc = re.search(r'details = "([^"]+)"', text)  # a gRPC error: its status details say it
    if grpc:
        return grpc[1]
    lines = text.splitlines()
    worker = [line.strip() for line in lines[1:] if _ERROR_LINE.match(line)]
    return worker[-1] if worker else (lines[0] if lines else type(exc).__name__)
