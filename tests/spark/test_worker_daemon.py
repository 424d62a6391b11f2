"""The Python daemon of a local session forks its workers with the task libraries already imported."""

from __future__ import annotations


def _daemon_of_this_worker(_rows):
    """In a Spark task: the command line of the worker's parent (its daemon) and whether lance's library is in it."""
    import os

    parent = os.getppid()
    with open(f"/proc/{parent}/cmdline", "rb") as f:
        command = f.read().replace(b"\0", b" ").decode(errors="replace")
    with open(f"/proc/{parent}/maps") as f:
        lance_mapped = "lance.abi3.so" in f.read()
    yield command, lance_mapped


def test_a_local_sessions_workers_are_forked_by_a_daemon_that_imported_lance(spark):
    [(command, lance_mapped)] = spark.sparkContext.parallelize([0], 1).mapPartitions(_daemon_of_this_worker).collect()
    assert "geneva_provider.worker_daemon" in command, command
    # The daemon itself never runs a task: lance is in it only because it imported it for its workers.
    assert lance_mapped
