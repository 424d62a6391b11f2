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

import functools
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from geneva_provider.core.errors import (
    GenevaError,
    InvalidArgumentError,
    SparkEnvironmentError,
    SparkServerUnreachableError,
)

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import ConnectSession, SparkSession

log = logging.getLogger(__name__)

# Once the session works, a lost server is retried for about OUTAGE_SECONDS (by default 0.05, 0.2, 0.8, 3.2, then
# 10 s three times, plus pyspark's jitter: ~35 s) -- long enough for a blip, short enough that a dead server fails
# the stage in well under a minute instead of pyspark's ten, and Airflow's retry resumes from the checkpoints.  A
# server never reached is given half of it (~17 s).  GENEVA_CONNECT_OUTAGE_SECONDS sets it (a flakier network
# wants more; a test of outages, less).
OUTAGE_SECONDS_ENV = "GENEVA_CONNECT_OUTAGE_SECONDS"
OUTAGE_SECONDS = 35.0
STAGE_MAX_BACKOFF_MS = 10_000
RELEASE_RETRIES = 2  # releasing is best effort (the server's idle timeout releases what we could not): ~0.25 s


def connect_session(url: str, *, pyfiles: Sequence[str] = (), session_id: str | None = None) -> ConnectSession:
    """A new Spark Connect client session on ``url`` with ``pyfiles`` shipped and the environment checked.

    Always a session of its own (never a default session another caller shares), so stopping it
    releases only what this stage used; ``session_id`` names it, so that a later attempt can stop
    its work with :func:`resume_session` if this process dies.  ``url`` may carry a token:
    it is never logged.
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    outage_seconds()  # a bad setting is refused as itself, before any contact (not as an unreachable server)
    started = time.monotonic()
    try:
        spark = RemoteSparkSession.builder.remote(_with_session_id(url, session_id)).create()
        version = _first_contact(spark)
    except Exception as exc:  # noqa: BLE001 - the URL may hold a token: name the server by host only
        raise _unreachable_error(url, exc) from None
    try:
        _prepare(spark, pyfiles, session_host(url))
    except BaseException:
        close_session(spark)
        raise
    log.info("Spark Connect session on %s ready in %.1fs (Spark %s)", session_host(url), time.monotonic() - started,
             version)
    return spark


def outage_seconds() -> float:
    """How long a stage's client retries a lost Spark Connect server: ``GENEVA_CONNECT_OUTAGE_SECONDS`` or 35 s."""
    text = os.environ.get(OUTAGE_SECONDS_ENV, "").strip()
    if not text:
        return OUTAGE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 1 <= seconds <= 3600:  # nan fails too
        raise InvalidArgumentError(f"{OUTAGE_SECONDS_ENV} must be a number of seconds from 1 to 3600, got {text!r}")
    return seconds


def retries_within(seconds: float, max_backoff_ms: float) -> int:
    """The retries of pyspark's back-off (50 ms, x4 each time, at most ``max_backoff_ms``) that wait about
    ``seconds`` in all: the fewest whose waits add up to within a second of it (jitter adds up to 0.5 s to
    each wait of 2 s or more)."""
    total, wait, retries = 0.0, 50.0, 0
    while total < seconds * 1000 - 1000 or retries == 0:
        total, wait, retries = total + wait, min(wait * 4, max_backoff_ms), retries + 1
    return retries


def _first_contact_retries() -> int:
    return retries_within(outage_seconds() / 2, 60_000)  # pyspark's own cap: 5 retries, ~17 s by default


def _stage_schedule() -> tuple[int, int]:
    """(retries, max back-off in ms) of a stage's policy: about :func:`outage_seconds` in all."""
    seconds = outage_seconds()
    cap = int(min(STAGE_MAX_BACKOFF_MS, max(200.0, seconds * 1000 / 3)))
    return retries_within(seconds, cap), cap


def _first_contact(spark: ConnectSession) -> str:
    """The server's Spark version: the session's first call, retried for half the outage bound (~17 s; not
    the client's 10 minutes).

    An unreachable server then fails the task soon, with a retryable error, and Airflow's retries
    (not a task stuck in gRPC back-off) decide how long to wait for it.  Once reached, the session's
    work is retried under :func:`stage_retry_policy` (about 35 s by default), never pyspark's ten minutes.
    """
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = spark.client
    client.set_retry_policies([DefaultPolicy(max_retries=_first_contact_retries())])
    try:
        version = spark.version
    except BaseException:
        close_session(spark)
        raise
    client.set_retry_policies([stage_retry_policy()])
    return version


def stage_retry_policy() -> Any:
    """pyspark's :class:`DefaultPolicy`, bounded to :func:`outage_seconds`, that remembers an outage while it
    retries.

    The progress line reads it (:func:`unreachable`) to say the server is unreachable instead of
    printing a healthy-looking "RUNNING"; once it has given up on an unreachable server it retries
    nothing more, so the session's background releases and its own release fail at once.
    """
    retries, cap = _stage_schedule()
    return _stage_policy_class()(retries, cap)


@functools.cache
def _stage_policy_class() -> type:
    import grpc
    from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicyState

    class OutageState(RetryPolicyState):
        def next_attempt(self, exception: BaseException | None = None) -> int | None:
            wait_ms = super().next_attempt(exception)
            cast("StageRetryPolicy", self.policy).saw(exception, wait_ms)
            return wait_ms

    class StageRetryPolicy(DefaultPolicy):
        def __init__(self, retries: int, max_backoff_ms: int) -> None:
            super().__init__(max_retries=retries, max_backoff=max_backoff_ms)
            self.outage_since: float | None = None  # monotonic time the client first failed to reach the server
            self.retrying_until = 0.0  # when the current back-off ends
            self.reason = ""
            self.gave_up = False

        def to_state(self) -> RetryPolicyState:
            return OutageState(self)

        def can_retry(self, e: BaseException) -> bool:
            return not self.gave_up and super().can_retry(e)

        def saw(self, exc: BaseException | None, wait_ms: int | None) -> None:
            if not isinstance(exc, grpc.RpcError) or exc.code() != grpc.StatusCode.UNAVAILABLE:
                return
            now = time.monotonic()
            if self.outage_since is None or now > self.retrying_until + OUTAGE_GAP_SECONDS:
                self.outage_since = now  # a new outage (the last one ended: calls went through in between)
            self.retrying_until = now + (wait_ms or 0) / 1000
            self.reason = _reason(exc)
            self.gave_up = wait_ms is None

    return StageRetryPolicy


OUTAGE_GAP_SECONDS = 5.0  # no failed call for this long after a back-off: the server answered again


def unreachable(spark: ConnectSession, url: str) -> str | None:
    """What to say while the session's client cannot reach its server (None while it can)."""
    policy = _stage_policy(spark)
    if policy is None or policy.outage_since is None:
        return None
    now = time.monotonic()
    if not policy.gave_up and now > policy.retrying_until + OUTAGE_GAP_SECONDS:
        return None
    return (f"the Spark Connect server {session_host(url)} is unreachable ({policy.reason}) for "
            f"{now - policy.outage_since:.0f}s; " + ("giving up" if policy.gave_up else "still retrying"))


def lost_server(spark: ConnectSession, url: str, exc: BaseException) -> SparkServerUnreachableError | None:
    """The retryable error naming the server, when ``exc`` is the session's client giving up on reaching it.

    A dead or restarting server is no fault of the stage: the task's retry (Airflow's) reconnects and
    resumes from the checkpoints.  None for any other failure.
    """
    policy = _stage_policy(spark)
    if not (policy is not None and policy.gave_up) and not _is_unavailable(exc):
        return None
    since = f" for {time.monotonic() - policy.outage_since:.0f}s" if policy and policy.outage_since else ""
    reason = policy.reason if policy is not None and policy.reason else _reason(exc)
    return SparkServerUnreachableError(f"lost the Spark Connect server {session_host(url)}: unreachable{since} "
                                       f"({reason}); a retry resumes from the checkpoints")


@contextmanager
def bounded_retries(spark: SparkSession | None) -> Iterator[None]:
    """Runs a stage's Spark work on ``spark`` as the operators run theirs: a dead Connect server fails it soon.

    A session the caller made (``SparkSession.builder.remote(...)`` in a notebook) keeps pyspark's retry
    policy, which waits some ten minutes for a server that is gone while the job record says RUNNING.  For
    the block it gets :func:`stage_retry_policy` (about 35 s by default), and the caller's policies are put back
    after it; a session that has it already (the operators') keeps its own.  The client giving up is
    raised as the retryable :class:`SparkServerUnreachableError` naming the server -- inside the stage's
    job record, which says so -- and a rerun resumes from the checkpoints.  A classic session is left alone.
    """
    if spark is None or not type(spark).__module__.startswith("pyspark.sql.connect"):
        yield
        return
    connect = cast("ConnectSession", spark)
    client = connect.client
    saved = client.get_retry_policies()
    ours = _stage_policy(connect) is None
    if ours:
        client.set_retry_policies([stage_retry_policy()])
    try:
        yield
    except GenevaError:  # the stage's own error (a UDF's, a cleaned-up version's) says more than the server
        raise
    except Exception as exc:
        lost = lost_server(connect, session_url(connect), exc)
        if lost is None:
            raise
        raise lost from exc
    finally:
        if ours:
            client.set_retry_policies(saved)


def session_url(spark: ConnectSession) -> str:
    """``sc://host:port`` of a Connect session's server (never its token or other parameters)."""
    endpoint = getattr(getattr(spark.client, "_builder", None), "endpoint", None)
    return f"sc://{endpoint}" if endpoint else "the Spark Connect server"


def _stage_policy(spark: ConnectSession) -> Any:
    try:
        policies = spark.client.get_retry_policies()
    except Exception:  # noqa: BLE001 - not a Connect session
        return None
    return next((p for p in policies if isinstance(p, _stage_policy_class())), None)


def _is_unavailable(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what it was raised from) is gRPC's UNAVAILABLE: the server cannot be reached."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = getattr(exc, "getGrpcStatusCode", None) or getattr(exc, "code", None)
        try:
            if callable(code) and getattr(code(), "name", "") == "UNAVAILABLE":
                return True
        except Exception:  # noqa: BLE001 - an exception whose code() needs arguments
            pass
        exc = exc.__cause__ or exc.__context__
    return False


def resume_session(url: str, session_id: str, *, pyfiles: Sequence[str] = (),
                   tag: str | None = None) -> tuple[ConnectSession, int] | None:
    """Attaches to the session an earlier stage of the job left open: ``(session, operations stopped)``.

    The next stage reuses the job's session so it finds warm Python workers (this package and
    pylance imported, the table open) instead of paying a new session's worker start-up.  Whatever
    still runs there -- the query of an attempt whose worker died -- is interrupted first, so
    two attempts never compute the same rows side by side: the operations tagged ``tag`` (the job's, in a
    session other jobs share), else all of them.  ``pyfiles`` are shipped and the probe
    runs again only if the session lacks its marker of them (a restarted server recreates the
    session empty).  None when the session cannot be used (released, or its artifacts changed):
    open a new one.
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    spark = RemoteSparkSession.builder.remote(_with_session_id(url, session_id)).create()
    try:
        _first_contact(spark)
    except Exception as exc:  # noqa: BLE001 - the URL may hold a token: name the server by host only
        if _is_unavailable(exc):  # no server: a new session would wait through the same back-off again
            raise _unreachable_error(url, exc) from None
        log.info("the job's Spark Connect session %s cannot be reused (%s): opening a new one", session_id,
                 _reason(exc))
        return None
    try:
        stopped = len(spark.interruptTag(tag) if tag else spark.interruptAll())
        _prepare(spark, pyfiles, session_host(url))
    except Exception as exc:  # noqa: BLE001 - released (SESSION_CLOSED) or unusable: a new session will do
        log.info("the job's Spark Connect session %s cannot be reused (%s): opening a new one", session_id,
                 _reason(exc))
        close_session(spark)
        return None
    if stopped:
        log.info("stopped %d Spark Connect operations left running by an earlier attempt", stopped)
    return spark, stopped


PREPARED_CONF = "spark.geneva.session.prepared"  # a session conf: what was shipped to and checked in it


def code_marker(pyfiles: Sequence[str]) -> str:
    """A hash of ``pyfiles`` and of this client's versions (Python, pyspark, this package): what a session must hold
    for this client's stages to run in it."""
    import hashlib

    import pyspark

    from geneva_provider.core.version import __version__

    digest = hashlib.sha256(f"{sys.version_info[:2]} {pyspark.__version__} {__version__}".encode())
    for path in pyfiles:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def _prepare(spark: ConnectSession, pyfiles: Sequence[str], server: str) -> None:
    """Ships ``pyfiles`` and probes the workers, unless this session already holds exactly that.

    The marker (:func:`code_marker`) is a session conf, so it lives and dies with the server-side session a
    later stage resumes.
    """
    marker = code_marker(pyfiles)
    if spark.conf.get(PREPARED_CONF, "") == marker:
        return
    for path in pyfiles:
        spark.addArtifacts(path, pyfile=True)
    check_environment(spark, server)
    spark.conf.set(PREPARED_CONF, marker)


def close_session(spark: ConnectSession, *, keep: bool = False, interrupt: bool = False,
                  tag: str | None = None) -> None:
    """Releases the session on the server; ``keep=True`` only closes this client's connection, leaving
    the session (and its warm Python workers) for the job's next stage to :func:`resume_session`.
    ``interrupt=True`` first stops the session's running operations (a killed task's): those tagged ``tag`` when
    given (the session is shared), else all.

    Releasing is brief (a fraction of a second of retries, not pyspark's ten minutes): in a task
    that fails because the server is gone there is nothing to release, and a session this client
    could not release is released by the server after its idle timeout
    (``spark.connect.session.manager.defaultSessionTimeout``).
    """
    if interrupt:
        interrupt_session(spark, tag)
    else:
        _brief_retries(spark)
    if keep:
        spark.release_session_on_close = False
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - releasing a closed session may fail; nothing is left to release
        pass


def interrupt_session(spark: ConnectSession, tag: str | None = None) -> bool:
    """Stops the session's running operations on the server (a killed task's) -- those tagged ``tag`` when given (a
    session other jobs share), else all --; False when the server could not be asked (it is gone, and runs nothing
    any more, or it did not answer within a brief retry: logged).

    The session's retries become brief first, for every caller of it: its stage, which is being stopped, too.
    """
    _brief_retries(spark)
    try:
        if tag:
            spark.interruptTag(tag)
        else:
            spark.interruptAll()
    except Exception as exc:  # noqa: BLE001 - a server that is gone runs nothing any more
        log.warning("Could not interrupt the operations of Spark Connect session %s: %s: %s",
                    spark.session_id, type(exc).__name__, _reason(exc))
        return False
    return True


def _brief_retries(spark: ConnectSession) -> None:
    from pyspark.sql.connect.client.retries import DefaultPolicy

    spark.client.set_retry_policies([DefaultPolicy(max_retries=RELEASE_RETRIES)])


def _unreachable_error(url: str, exc: BaseException) -> SparkServerUnreachableError:
    return SparkServerUnreachableError(f"cannot open a Spark Connect session on {session_host(url)}: "
                                       f"{type(exc).__name__}: {_reason(exc)}")


def _with_session_id(url: str, session_id: str | None) -> str:
    if session_id is None:
        return url
    return f"{url};session_id={session_id}" if "/;" in url else f"{url.rstrip('/')}/;session_id={session_id}"


def check_environment(spark: ConnectSession, server: str = "the Spark Connect server") -> None:
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
    for module in ("pyspark", "lance", "cloudpickle", "xxhash", "geneva_provider.core.version"):
        try:
            versions[module] = getattr(importlib.import_module(module), "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - reported to the client
            missing.append(f"{module.split('.')[0]} ({type(exc).__name__}: {exc})")
            versions[module] = ""
    yield pa.RecordBatch.from_pydict({
        "python": ["{}.{}".format(*sys.version_info[:2])], "pyspark": [versions["pyspark"]],
        "geneva_provider": [versions["geneva_provider.core.version"]], "executable": [sys.executable],
        "missing": ["; ".join(missing)]})


def session_host(url: str) -> str:
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
