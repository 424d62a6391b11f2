"""A class-data-sharing archive of Spark's classes, so the suite's many JVMs start in about half the CPU.

Why: the suite starts dozens of Spark JVMs (a session per test worker, Connect servers that tests kill
and start again, spark-submit stage programs, clusters), and on a 2-core machine most of a JVM's start
is loading and verifying Spark's ~15,000 classes.  A dynamic CDS archive (JDK 13+) holds them parsed
and verified: a JVM that maps it starts a Spark Connect server in ~4 s instead of ~8 s, with a third
less CPU, and behaves the same otherwise (it is the JVM's own class-loading cache, not a change to Spark).

``python -m tests.class_archive PATH`` builds it (``make test`` does, once per virtualenv, at
``.venv/spark-classes.jsa``): a Spark
Connect server run with ``-XX:ArchiveClassesAtExit`` serves a backfill with a Python UDF, so the classes
of a server, a job, its Python runner and its commit are all in it, then stops normally, which writes the
archive.  ``tests/conftest.py`` hands ``jvm_options(suite_archive())`` to every JVM that ``spark-submit``
starts (``SPARK_SUBMIT_OPTS``); :func:`every_jvm` gives it to the JVMs spark-submit does not start (a standalone
cluster's daemons and executors, a ``local-cluster`` master's executors).  An
archive that does not fit a JVM (another JDK, other jars on its class path) is ignored by that JVM,
silently: it only starts slower.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path


def suite_archive() -> Path:
    """The archive the suite's JVMs map: ``GENEVA_TEST_CLASS_ARCHIVE``, else the virtualenv's (``make test``'s)."""
    return Path(os.environ.get("GENEVA_TEST_CLASS_ARCHIVE", Path(sys.prefix) / "spark-classes.jsa"))


def jvm_options(archive: Path) -> list[str]:
    """The JVM options that map ``archive`` when it fits, and say nothing when it does not (none without it)."""
    if not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off,cds+dynamic=off"]


def every_jvm() -> dict[str, str]:
    """The environment that maps the suite's archive in every JVM a process starts, through ``JAVA_TOOL_OPTIONS``:
    for JVMs that ``spark-submit`` does not start -- a cluster's daemons and the executors they launch, a
    ``local-cluster`` master's executors -- which inherit it from the process that starts them.  Empty without
    an archive."""
    options = jvm_options(suite_archive())
    return {"JAVA_TOOL_OPTIONS": " ".join(options)} if options else {}


# For a JVM that starts, runs one stage and exits (a spark-submit stage program and its launcher): the first,
# quick JIT tier only.  Such a JVM spends much of its CPU compiling hot start-up code with the optimising
# compiler, which it never lives long enough to profit from: a stage program then takes ~20 % less CPU.  Not
# for the suite's long-lived JVMs (its sessions and Connect servers), which run many jobs and gain from it.
SHORT_LIVED_JVM_OPTIONS = ["-XX:TieredStopAtLevel=1"]


def short_lived(monkeypatch) -> None:
    """Gives the JVMs that ``spark-submit`` starts from now on (in this test) :data:`SHORT_LIVED_JVM_OPTIONS`."""
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", " ".join(filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"),
                                                                  *SHORT_LIVED_JVM_OPTIONS])))


def build(archive: Path) -> None:
    """Writes the archive at ``archive`` (atomically: a JVM never maps a half-written one)."""
    t0 = time.monotonic()
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="geneva-class-archive-") as tmp:
            _run_a_backfill_on_a_server_that_archives(partial, Path(tmp))
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    print(f"class archive: {archive} ({archive.stat().st_size // 2**20} MiB) in {time.monotonic() - t0:.0f}s")


def _run_a_backfill_on_a_server_that_archives(partial: Path, tmp: Path) -> None:
    import pyarrow as pa

    import geneva_provider as gp
    from geneva_provider import connect_server
    from geneva_provider.connect_server import LocalConnectServer

    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [
        os.environ.get("SPARK_SUBMIT_OPTS"), f"-XX:ArchiveClassesAtExit={partial}", "-Xlog:cds=off,cds+dynamic=off"]))
    connect_server.STOP_TIMEOUT_SECONDS = 180  # writing the archive at exit takes a while
    server = LocalConnectServer(0, master="local[2]", directory=tmp / "server")
    try:
        server.start()
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        spark = RemoteSparkSession.builder.remote(server.url).create()

        @gp.udf(data_type=pa.int64())
        def double(x: int) -> int:
            return 2 * x

        table = gp.connect(str(tmp / "db")).create_table("t", pa.table({"x": list(range(20_000))}),
                                                         max_rows_per_file=5_000)
        table.add_columns({"y": double})
        table.backfill("y", spark=spark, progress=False)
        spark.stop()
    finally:
        server.stop()
    if not partial.exists():
        raise SystemExit("class archive: the Spark Connect server wrote no archive:\n"
                         + server.log_path.read_text(errors="replace")[-3000:])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.class_archive PATH")
    build(Path(sys.argv[1]).resolve())
