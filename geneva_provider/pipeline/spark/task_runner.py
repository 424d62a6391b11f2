"""How a stage's tasks run: the ``TaskRunner`` seam, and the one place that picks a runner (pipeline).

Every stage that runs tasks -- apply, write+commit, compaction's rewrites, locating the fragment
that killed a worker -- hands them to a :class:`TaskRunner`, which also says how the tasks carry
storage options, what a UDF's resource asks become, how many tasks run at once, how a job's running
tasks are cancelled and what bounds a stage's retries.  The stages accept a runner wherever they
accept a SparkSession; :func:`task_runner` turns either into a runner, and nothing else asks which
kind of session or runner it was given:

* :class:`SparkRunner` -- a classic or Spark Connect session (:mod:`~geneva_provider.pipeline.spark.runner`
  holds how it spreads tasks and gathers their results);
* :class:`~geneva_provider.pipeline.spark.in_process.InProcessRunner` -- every task in this process,
  pickled and unpickled as on the way to a Python worker: for tests and quick local checks, no JVM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from geneva_provider.pipeline.spark import runner
from geneva_provider.pipeline.spark.connect import bounded_retries
from geneva_provider.pipeline.spark.task_resources import resource_profile

if TYPE_CHECKING:
    from typing import TypeAlias

    from geneva_provider.core.lib_types import SparkSession
    from geneva_provider.core.resources import ResourceAsk

T = TypeVar("T")
R = TypeVar("R")

# What runs a partition's tasks, and what may explain a failed job (see ``run_tasks``).
PartitionFn = Callable[[Iterator[T]], Iterable[R]]
Explain = Callable[[BaseException, list[list[T]]], BaseException | None]


@runtime_checkable
class TaskRunner(Protocol):
    """Runs a stage's tasks, one partition function per list of tasks, and returns their small results."""

    def run_tasks(self, tasks: Sequence[T], partition_fn: PartitionFn[T, R], *, description: str,
                  concurrency: int | None = None, progress: Callable[[], str | None] | None = None,
                  tag: str | None = None, explain: Explain[T] | None = None, profile: Any | None = None,
                  spans: list[tuple[float, float]] | None = None) -> list[R]:
        """``partition_fn`` over ``tasks`` (one partition per task unless ``concurrency`` asks for fewer); a
        package error a task raised is raised as itself (:func:`~geneva_provider.pipeline.spark.runner.run_tasks`)."""

    def options_for_tasks(self, storage_options: dict[str, str] | None) -> dict[str, str] | None:
        """The storage options as the tasks should carry them."""

    def resource_profile(self, asks: list[ResourceAsk], label: str) -> Any | None:
        """What the tasks of a job whose UDFs ask for resources run under; the package's error when it cannot
        give an ask (before any task runs)."""

    def parallelism(self) -> int:
        """How many tasks run at once (a plan cuts its work into about this many tasks)."""

    def cancel(self, job_id: str) -> None:
        """Stops the running tasks of a geneva job."""

    def retries(self) -> AbstractContextManager[None]:
        """What a stage's work runs inside (over Spark Connect: a bounded wait for a server that is gone)."""


if TYPE_CHECKING:
    # What a stage accepts: a session (classic or Spark Connect) or a task runner.
    Compute: TypeAlias = SparkSession | TaskRunner


@dataclass(frozen=True)
class SparkRunner:
    """A stage's tasks as Spark jobs on a classic or Spark Connect session."""

    spark: SparkSession

    def run_tasks(self, tasks: Sequence[T], partition_fn: PartitionFn[T, R], *, description: str,
                  concurrency: int | None = None, progress: Callable[[], str | None] | None = None,
                  tag: str | None = None, explain: Explain[T] | None = None, profile: Any | None = None,
                  spans: list[tuple[float, float]] | None = None) -> list[R]:
        return runner.run_tasks(self.spark, tasks, partition_fn, description=description, concurrency=concurrency,
                                progress=progress, tag=tag, explain=explain, profile=profile, spans=spans)

    def options_for_tasks(self, storage_options: dict[str, str] | None) -> dict[str, str] | None:
        return runner.options_for_tasks(self.spark, storage_options)

    def resource_profile(self, asks: list[ResourceAsk], label: str) -> Any | None:
        return resource_profile(self.spark, asks, label)

    def parallelism(self) -> int:
        return runner.default_parallelism(self.spark)

    def cancel(self, job_id: str) -> None:
        runner.cancel_jobs(self.spark, job_id)

    def retries(self) -> AbstractContextManager[None]:
        return bounded_retries(self.spark)


def is_compute(value: object) -> bool:
    """True for what a stage can run its tasks on: a SparkSession (classic or Spark Connect) or a task runner."""
    return isinstance(value, TaskRunner) or runner.is_session(value)  # type: ignore[arg-type] # any object


def task_runner(compute: Compute) -> TaskRunner:
    """The runner of a stage's tasks: ``compute`` itself when it is a runner, else a :class:`SparkRunner` of it."""
    if isinstance(compute, TaskRunner):
        return compute
    return SparkRunner(compute)
