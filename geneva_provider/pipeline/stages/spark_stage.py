"""What every Spark stage of a plan runs inside, whoever calls it: an operator, ``Table.backfill``, the stage API."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from geneva_provider.core.errors import GenevaError
from geneva_provider.pipeline.spark.pinned_versions import check_pinned_versions, translate_gone
from geneva_provider.pipeline.spark.runner import spark_ui_url
from geneva_provider.pipeline.spark.task_runner import SparkRunner
from geneva_provider.pipeline.stages.job_records import job_stage

if TYPE_CHECKING:
    from geneva_provider.core.contracts.kinds import Stage
    from geneva_provider.core.contracts.models import JobPlan
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.spark.task_runner import TaskRunner


@contextmanager
def spark_stage(plan: JobPlan, store: CheckpointStore, stage: Stage, runner: TaskRunner,
                storage_options: dict[str, str] | None) -> Iterator[None]:
    """The stage's job record (RUNNING, then FAILED with the error), around the stage's Spark work.

    Inside the record, so that it says the package's error rather than Spark's: the versions the
    plan reads are checked first (a clean-up since the plan fails the stage before Spark starts,
    naming the table and version), a task that meets a version cleaned up meanwhile is reported the
    same way, and a Spark Connect server that dies fails the stage within a minute
    (:func:`~geneva_provider.pipeline.spark.connect.bounded_retries`).
    """
    # Where the stage's Spark UI is, for its task's link: written with the stage's RUNNING mark.
    ui = {"spark_ui": spark_ui_url(runner.spark)} if isinstance(runner, SparkRunner) else {}
    with job_stage(store, plan.job_id, stage, **ui), runner.retries():
        check_pinned_versions(plan, plan.job_id, storage_options)
        try:
            yield
        except GenevaError:
            raise
        except Exception as exc:
            gone = translate_gone(plan, plan.job_id, exc)
            if gone is None:
                raise
            raise gone from exc
