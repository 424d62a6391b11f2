"""How a Spark driver JVM the package starts on this machine logs: quietly, unless the user configured it.

Spark's own log4j2 defaults print a banner as every JVM starts ("Using Spark's default log4j
profile", "Setting default log level to "WARN"", "To adjust logging level use sc.setLogLevel",
Hadoop's NativeCodeLoader warning) -- on every local session a notebook or a ``tbl.compact()``
starts, and in every stage's task log.  The package's configuration (:data:`SPARK_LOG_CONFIG`) is
Spark's defaults with the root at WARN and that one harmless Hadoop warning at ERROR: Spark's other
warnings and every error still show.  It is named in log4j2's environment variable, which any
``-Dlog4j.configurationFile`` of the user's (``spark.driver.extraJavaOptions``, ``SPARK_SUBMIT_OPTS``,
``spark-defaults.conf``) wins over, and which a variable the user set is left alone for.

One line is the JVM's own, not log4j's: Spark's launcher always adds ``--add-modules=jdk.incubator.vector``,
and Java then prints "WARNING: Using incubator modules: jdk.incubator.vector", with no option to
turn it off.  A local session's JVM therefore gets, as its standard error, a pipe that a thread of
this process copies to the process's own standard error, as it comes (a console bar's carriage
returns too), leaving that one line out.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path

# geneva_provider/spark_log4j2.properties, shipped as package data
SPARK_LOG_CONFIG = Path(__file__).resolve().parents[2] / "spark_log4j2.properties"
LOG_CONFIG_ENV = "LOG4J_CONFIGURATION_FILE"
JVM_NOTICE = b"WARNING: Using incubator modules: "  # Java's, for the module Spark's launcher always adds


def quiet_log_environment(environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variable that gives a JVM started with ``environment`` (default: this process's) the quiet configuration;
    {} when the environment names a configuration of its own."""
    named = os.environ if environment is None else environment
    return {} if LOG_CONFIG_ENV in named else {LOG_CONFIG_ENV: SPARK_LOG_CONFIG.as_uri()}


@contextmanager
def quiet_jvm_start(launching: bool = True) -> Iterator[None]:
    """Within it, a JVM that pyspark launches (it copies ``os.environ`` as it starts one) logs quietly; after it,
    this process's environment is as it was, so other programs it starts are not affected.  ``launching``: a JVM
    is about to start here (none runs yet), whose standard error is then copied without Java's notice."""
    added = quiet_log_environment()
    os.environ.update(added)
    try:
        with _stderr_without_notice() if launching and os.name == "posix" else nullcontext():
            yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@contextmanager
def _stderr_without_notice() -> Iterator[None]:
    """While it lasts, file descriptor 2 is a pipe (what a process started now inherits); a daemon thread copies
    the pipe to the real standard error until the last writer closes it (the JVM and its Python workers exit)."""
    try:
        out = os.dup(2)
    except OSError:  # no standard error at all: nothing to keep quiet
        yield
        return
    read, write = os.pipe()
    threading.Thread(target=_copy_without_notice, args=(read, out), daemon=True, name="geneva-jvm-stderr").start()
    _flush_stderr()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        _flush_stderr()
        os.dup2(out, 2)  # this process's own writes go straight to standard error again


def _flush_stderr() -> None:
    """What Python buffered for standard error, out before the descriptor under it changes (none: pythonw)."""
    if sys.stderr is not None:
        sys.stderr.flush()


def _copy_without_notice(read: int, out: int) -> None:
    """Copies ``read`` to ``out`` as it comes, without lines that start with :data:`JVM_NOTICE`.  It reads until the
    last writer is gone, whatever happens to ``out`` (a JVM whose pipe nobody drained would block on its next line)."""
    held, writable = b"", True
    try:
        while chunk := os.read(read, 65536):
            if not writable:
                continue
            data, held = without_notice(held + chunk)
            try:
                _write_all(out, data)
            except OSError:  # the standard error went away: drain the rest, as a closed stderr would have
                writable = False
        if writable and held:
            _write_all(out, held)
    except OSError:
        pass
    finally:
        os.close(read)
        os.close(out)


def without_notice(data: bytes) -> tuple[bytes, bytes]:
    """``data`` without the lines that start with :data:`JVM_NOTICE`, and the piece at its end held back because
    its next bytes may make it such a line (a piece that cannot is never held: a console bar's redraws pass)."""
    lines = data.splitlines(keepends=True)
    held = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
    if held and not (JVM_NOTICE.startswith(held) or held.startswith(JVM_NOTICE)):
        lines.append(held)
        held = b""
    return b"".join(line for line in lines if not line.startswith(JVM_NOTICE)), held


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
