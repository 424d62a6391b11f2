"""Running a stage's tasks in this process, as a Spark Python worker would run them (pipeline).

For tests and quick local checks: a backfill, a view refresh or a compaction with no JVM, through
the very stages and :class:`~geneva_provider.pipeline.spark.task_runner.TaskRunner` seam the Spark
path uses.  It is not a mock of Spark: what crosses to a Python worker crosses here too, pickled the
stricter way of the two Spark paths.  The partition function and each partition's tasks are
cloudpickled before any task runs (pyspark's classic serializer is cloudpickle; over Spark Connect the
tasks travel inside the cloudpickled function) and loaded again for each partition; every result a
partition returns is pickled with plain ``pickle`` and loaded again (the Connect path pickles results
so; the classic one cloudpickles them, which takes more).  So a task, function or result that could
not reach a Spark worker or come back fails here as well, with a ``pickle.PicklingError`` naming the
stage and the partition (pyspark raises ``PicklingError("Could not serialize object: ...")`` for a
function or task, before any task runs; a result that cannot be pickled fails its task, which Spark
reports as a ``PythonException`` holding pickle's error); a package error a task raises comes back as
itself, as on Spark.

Partitions run one after another in the calling thread.  What needs a JVM is a no-op or an error:

* resource profiles: a UDF that asks for GPUs fails before any task runs with
  :class:`~geneva_provider.core.errors.ResourceUnavailableError` naming the UDF (no task is given a
  GPU here); cores and memory are given (one task runs at a time), so those asks are only logged;
* job tags: ``cancel(job_id)`` stops the job's running partitions before their next task;
* Spark's job descriptions and task counts: the description names the stage in errors, and the
  stages' own progress lines are logged as on Spark;
* worker deaths: a task runs in this process, so a UDF that ends its process ends this one.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

import cloudpickle

from geneva_provider.core.errors import InvalidArgumentError, JobCancelledError, ResourceUnavailableError
from geneva_provider.core.resources import task_resources
from geneva_provider.pipeline.spark.runner import (
    explained,
    job_tag,
    partitions,
    raise_task_errors,
    reporting,
    returning_errors,
)
from geneva_provider.pipeline.spark.worker_deaths import IN_PROCESS_PARTITION

if TYPE_CHECKING:
    from geneva_provider.core.resources import ResourceAsk
    from geneva_provider.pipeline.spark.task_runner import Explain, PartitionFn

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class InProcessRunner:
    """A :class:`~geneva_provider.pipeline.spark.task_runner.TaskRunner` that runs every task in this process.

    ``parallelism`` is how many tasks a plan cuts its work into (a session's default parallelism);
    they still run one at a time.  Pass it where a stage or a job takes a SparkSession
    (``tbl.backfill("y", spark=InProcessRunner())``, ``run_apply(plan_uri, InProcessRunner())``).
    """

    def __init__(self, parallelism: int = 2) -> None:
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidArgumentError(f"InProcessRunner: parallelism must be a positive whole number, "
                                       f"got {parallelism!r}")
        self._parallelism = parallelism
        self._lock = threading.Lock()
        self._running: dict[str, list[threading.Event]] = {}  # a job tag -> the stop flags of its running calls

    def __repr__(self) -> str:
        return f"InProcessRunner(parallelism={self._parallelism})"

    def run_tasks(self, tasks: Sequence[T], partition_fn: PartitionFn[T, R], *, description: str,
                  concurrency: int | None = None, progress: Callable[[], str | None] | None = None,
                  tag: str | None = None, explain: Explain[T] | None = None, profile: Any | None = None,
                  spans: list[tuple[float, float]] | None = None) -> list[R]:
        """``partition_fn`` over ``tasks``, partitioned as on Spark, each partition through pickles."""
        if not tasks:
            return []
        per_slice = partitions(tasks, concurrency)
        # Everything that goes to the workers is pickled before any task runs, as Spark does.
        command = _pickled(cloudpickle.dumps, returning_errors(partition_fn), f"{description}: the partition function")
        shipped = [_pickled(cloudpickle.dumps, part, f"{description}: the tasks of partition {index}")
                   for index, part in enumerate(per_slice)]
        stop = self._started(tag)
        results: list[Any] = []
        try:
            with explained(per_slice, explain), reporting(description, progress):
                for index, data in enumerate(shipped):
                    start = time.time()
                    token = IN_PROCESS_PARTITION.set(index)  # the partition its UDF calls' markers name
                    try:
                        results += _run_partition(pickle.loads(command), pickle.loads(data), stop, tag,
                                                  f"{description}: partition {index}")
                    finally:
                        IN_PROCESS_PARTITION.reset(token)
                    if spans is not None:
                        spans.append((start, time.time()))
        finally:
            self._ended(tag, stop)
        return raise_task_errors(results)

    def options_for_tasks(self, storage_options: dict[str, str] | None) -> dict[str, str] | None:
        """The options as they are: the tasks stay in this process (pickled, never logged)."""
        return storage_options

    def resource_profile(self, asks: list[ResourceAsk], label: str) -> Any | None:
        """None; ResourceUnavailableError naming the UDF when one asks for GPUs (no task here is given any)."""
        for ask in asks:
            if ask.resources.num_gpus:
                raise ResourceUnavailableError(
                    f"{label}: {ask.describe()}, but the in-process task runner runs tasks in this process, where no "
                    "task is given a GPU: run the job on a Spark session with GPUs (on this machine "
                    "geneva_provider.stages.local_session(gpus=N), or a cluster). Nothing was computed or written.")
        if task_resources(asks) is not None:
            log.info("%s: the in-process task runner runs one task at a time in this process; %s", label,
                     "; ".join(a.describe() for a in asks))
        return None

    def parallelism(self) -> int:
        return self._parallelism

    def cancel(self, job_id: str) -> None:
        """Stops the job's running partitions before their next task (each then raises JobCancelledError)."""
        with self._lock:
            for stop in self._running.get(job_tag(job_id), []):
                stop.set()

    def retries(self) -> AbstractContextManager[None]:
        return nullcontext()

    def _started(self, tag: str | None) -> threading.Event:
        stop = threading.Event()
        if tag:
            with self._lock:
                self._running.setdefault(tag, []).append(stop)
        return stop

    def _ended(self, tag: str | None, stop: threading.Event) -> None:
        if tag:
            with self._lock:
                running = self._running.get(tag, [])
                running.remove(stop)
                if not running:
                    self._running.pop(tag, None)


def _run_partition(partition_fn: Callable[[Iterator[Any]], Any], tasks: list[Any], stop: threading.Event,
                   tag: str | None, where: str) -> list[Any]:
    """One partition, as a Python worker runs it: its results pickled on the way back."""
    def fed() -> Iterator[Any]:
        for task in tasks:
            if stop.is_set():
                raise JobCancelledError(f"{where}: cancelled ({tag})")
            yield task

    try:
        return [pickle.loads(_pickled(pickle.dumps, result, f"{where}: a {type(result).__name__} it returned"))
                for result in partition_fn(fed())]
    except pickle.PicklingError:
        raise
    except Exception as exc:
        exc.add_note(f"(in {where}, run by the in-process task runner)")
        raise


def _pickled(dump: Callable[[Any], bytes], value: Any, what: str) -> bytes:
    """``dump(value)``; a PicklingError naming ``what`` when it cannot be pickled, as Spark must do to ship it."""
    try:
        return dump(value)
    except Exception as exc:  # pickle raises PicklingError, TypeError, AttributeError...
        raise pickle.PicklingError(f"{what} cannot be pickled, as a Spark worker would need it to be "
                                   f"({type(exc).__name__}: {exc})") from exc
