"""pyspark's Python worker daemon, which also exits once its Spark Connect session is released.

A Spark Connect server starts one ``pyspark.daemon`` per session (the session's artifacts make
its workers' environment, ``SPARK_JOB_ARTIFACT_UUID``, its own) and stops none of them until the
server stops: a long-lived server kept one daemon (~48 MB) per finished job.  This module runs
pyspark's daemon unchanged and checks every few seconds whether its session was released (the
server then deletes the session's artifact directory, ``<java.io.tmpdir>/artifacts-*/<uuid>``).
If so, it removes the copy of the session's files Spark leaves in the daemon's working directory
(``userFiles-*/<uuid>``: this package's zip and the storage options the stages ship, else kept
until the server stops) and stops itself as Spark would, with SIGTERM; its idle workers go with
it.  When it cannot find that directory, it stops after ``GENEVA_DAEMON_IDLE_SECONDS`` (60)
without workers (Spark ends a pool's idle workers after a minute).  Should the session need
workers again, Spark restarts its daemon ("Assuming that daemon unexpectedly quit, attempting to
restart").

It also imports, once, the libraries every stage task imports (pyarrow, lance, pandas, pydantic:
about a second of CPU) and the stages' task code, before it forks its first worker, so each worker
starts with them instead of importing them again: on 2 cores that is over a second less per Python
worker a job starts (a Connect session's daemon is new with each job, so every job paid it twice).
The package comes from where this module does (``-m geneva_provider.worker_daemon`` imported it
already).  Importing them starts no Lance runtime (no thread of lance's: its fork warning is moot and
dropped here).

Use it where the Python has this package installed:
``--conf spark.python.daemon.module=geneva_provider.worker_daemon``
(:class:`~geneva_provider.connect_server.LocalConnectServer` and
:func:`~geneva_provider.stages.local_session` set it).  Outside a Connect session (no session uuid)
it is pyspark's daemon with the libraries imported.
"""

from __future__ import annotations

import gc
import glob
import importlib
import os
import shutil
import signal
import sys
import tempfile
import time

CHECK_SECONDS = 2.0
IDLE_SECONDS_ENV = "GENEVA_DAEMON_IDLE_SECONDS"
DEFAULT_IDLE_SECONDS = 60.0
# What a stage task imports besides the package, in import order; each is skipped when missing.
PRELOADED = ("numpy", "pyarrow", "pyarrow.compute", "pyarrow.dataset", "pandas", "pydantic", "cloudpickle", "lance")


def session_uuid() -> str | None:
    """The server-side uuid of this daemon's Connect session, None outside one."""
    session = os.environ.get("SPARK_JOB_ARTIFACT_UUID", "")
    return session if session and session != "default" else None


def artifact_directory(session: str) -> str | None:
    """The session's artifact directory, which the server deletes when it releases the session."""
    roots = {tempfile.gettempdir(), "/tmp", *jvm_temp_dirs(os.getppid())}
    found = [d for root in roots for d in glob.glob(os.path.join(root, "artifacts-*", session))]
    return found[0] if len(found) == 1 else None


def jvm_temp_dirs(pid: int) -> list[str]:
    """The ``java.io.tmpdir`` the JVM ``pid`` (the executor that started this daemon) was given, if any.

    The server makes its artifact directories there, which need not be this process's temp dir
    (a server started with ``-Djava.io.tmpdir=...`` in ``SPARK_SUBMIT_OPTS``).
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return []
    prefix = "-Djava.io.tmpdir="
    return [a[len(prefix):] for a in args if a.startswith(prefix)]


def has_workers(pid: int) -> bool:
    """True while process ``pid`` has a live child (a forked worker)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return bool(f.read().split())
    except OSError:
        return True  # cannot tell: never stop on a guess


def watch_session(directory: str | None, idle_seconds: float, seconds: float = CHECK_SECONDS) -> None:
    """SIGTERMs this process once ``directory`` is gone, or after ``idle_seconds`` without workers.

    A timer signal, not a thread: the daemon forks its workers, and must not hold a thread then.
    """
    daemon_pid = os.getpid()
    busy = [time.monotonic()]
    files = os.getcwd()  # the session's own files directory (session_uuid() checked it is named so)

    def check(signum: int, frame: object) -> None:
        if os.getpid() != daemon_pid:
            return
        if directory is not None:
            released = not os.path.isdir(directory)
            if released and os.path.basename(files) == session_uuid():
                shutil.rmtree(files, ignore_errors=True)  # the released session's files, shipped secrets included
        else:
            if has_workers(daemon_pid):
                busy[0] = time.monotonic()
            released = time.monotonic() - busy[0] > idle_seconds
        if released:
            signal.setitimer(signal.ITIMER_REAL, 0)
            os.kill(daemon_pid, signal.SIGTERM)  # pyspark's handler: SIGHUP to its workers, then exit

    # Workers are forked from the daemon: they must not keep its handler (timers are not inherited).
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGALRM, signal.SIG_DFL))
    signal.signal(signal.SIGALRM, check)
    signal.setitimer(signal.ITIMER_REAL, seconds, seconds)


def preload() -> None:
    """Imports :data:`PRELOADED` in the daemon, so the workers it forks inherit them.

    Not under ``spark.executor.pyspark.memory``: each worker caps its address space when its task
    starts, and one that inherited the libraries' reservations (jemalloc's arenas) would be killed by a
    UDF that goes over the cap, where a worker that imports them under it gets a ``MemoryError`` to report.
    """
    import warnings

    if os.environ.get("PYSPARK_EXECUTOR_MEMORY_MB"):
        return

    from geneva_provider.core.lance_logging import FORK_WARNING

    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    from geneva_provider.pipeline.stages import apply, write  # noqa: F401 - the stage drivers' task code
    from geneva_provider.pipeline.stages.kinds import job_kind, registered_kinds

    for kind in registered_kinds():
        job_kind(kind)  # each kind's executor and writer
    # Imported, never used here: forking this process is safe, and lance's warning on each fork is noise.
    warnings.filterwarnings("ignore", message=FORK_WARNING, category=UserWarning)
    # A reused worker runs a full collection after every task (pyspark's daemon): without this, it walks
    # the ~100,000 objects these imports made each time -- ~40 ms between two tasks of a worker on 2 cores,
    # against ~20 ms with pyspark's bare daemon.  Frozen, they are left out of every collection (and their
    # pages stay shared with the daemon instead of being written by the collector in each worker).
    gc.freeze()


def main() -> None:
    from pyspark import daemon

    preload()
    session = session_uuid()
    if session is not None:
        idle = float(os.environ.get(IDLE_SECONDS_ENV, DEFAULT_IDLE_SECONDS))
        watch_session(artifact_directory(session), idle)
    daemon.manager()


if __name__ == "__main__":
    sys.exit(main())
