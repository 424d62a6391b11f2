"""Apply stage, for every job kind: run the plan's pending tasks on Spark executors, one checkpoint per batch.

Each task opens what it needs inside the Python worker (Lance data never crosses the JVM or the
driver) and returns a small :class:`ApplyTaskResult`.  Before computing, a task lists the
checkpoints already present, so a retried task or a rerun job only computes what is missing.
UDF failures come back as data, not exceptions, so a deterministic bug is reported once with its
row instead of being retried by Spark.  What a task computes is its job kind's
(:mod:`geneva_provider.pipeline.stages.kinds`); the rest -- the record, errors, counts, progress,
dead workers, skip limits -- is here, once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.kinds import RowOutcome, Stage
from geneva_provider.core.contracts.models import ApplyResult, ApplyTaskResult, JobPlan
from geneva_provider.core.errors import UDFExecutionError
from geneva_provider.core.incarnations import check_planned_columns
from geneva_provider.core.store.error_store import ErrorStore
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.spark.runner import describe_profile, job_tag, most_at_once
from geneva_provider.pipeline.spark.task_runner import task_runner
from geneva_provider.pipeline.spark.worker_deaths import clear_markers, death_error, read_call, worker_death
from geneva_provider.pipeline.stages.context import StageContext
from geneva_provider.pipeline.stages.job_records import update_record
from geneva_provider.pipeline.stages.kinds import JobKindSpec, job_kind
from geneva_provider.pipeline.stages.on_driver import apply_runner
from geneva_provider.pipeline.stages.planning import load_plan, measured_row_seconds, record_row_seconds
from geneva_provider.pipeline.stages.skip_limits import check_skip_limits
from geneva_provider.pipeline.stages.spark_stage import spark_stage

if TYPE_CHECKING:
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.spark.task_runner import Compute, TaskRunner

log = logging.getLogger(__name__)


def apply_partition(ctx: StageContext, tasks: Iterable[Any]) -> Iterator[ApplyTaskResult]:
    """Executor side: one Spark partition's tasks, run by the executor its job kind opens once."""
    executor = job_kind(ctx.job.kind).executor(ctx)
    for task in tasks:
        yield executor.run(task)


def run_apply(plan_uri: str, spark: Compute, storage_options: dict[str, str] | None = None) -> ApplyResult:
    """Apply stage: computes every pending task of the plan on Spark (or another task runner); returns counts."""
    plan, store = load_plan(plan_uri, storage_options)
    if plan.nothing_to_do:  # an up-to-date table: no Spark job, no record
        log.info("apply %s: nothing to do: %s was up to date at version %d", plan.job_id, plan.label(),
                 plan.read_version)
        return ApplyResult(job_id=plan.job_id, tasks_run=0, rows_computed=0, rows_reused=plan.rows_reused,
                           checkpoints_written=0, errors=0, seconds=0.0)
    runner = apply_runner(task_runner(spark), plan, lambda: measured_row_seconds(store, plan))
    profile = runner.resource_profile(plan.resource_asks, plan.label())  # refused before any Spark job
    with spark_stage(plan, store, Stage.APPLY, runner, storage_options):
        check_planned_columns(plan, storage_options, "apply")  # no value is computed for a column re-created since
        return _apply(job_kind(plan.kind), plan, store, runner, storage_options, profile)


def _apply(kind: JobKindSpec[Any, Any], plan: JobPlan, store: CheckpointStore, runner: TaskRunner,
           storage_options: dict[str, str] | None, profile: Any | None) -> ApplyResult:
    tasks = kind.pending_tasks(plan, store)
    planned = plan.rows_to_compute
    log.info("apply %s: %d of %d planned tasks still to run (%s)", plan.job_id, len(tasks), len(plan.tasks),
             plan.summary("").describe())
    t0 = time.perf_counter()
    ctx = StageContext.of(plan, runner.options_for_tasks(storage_options) if tasks else storage_options)
    progress = kind.progress(plan, store, tasks)

    def explain(exc: BaseException, partitions: list[list[Any]]) -> BaseException | None:
        death = worker_death(exc)
        if death is None:
            return None
        dead = partitions[death.partition] if death.partition is not None and death.partition < len(
            partitions) else [t for p in partitions for t in p]
        call = read_call(store, plan.job_id, death.partition)
        if call is not None and len(call.fragments) > 1 and not call.deaths:
            call, death = kind.locate(runner, ctx, store, call, dead, profile) or (call, death)
        return death_error(call, death, kind.death_fallback(plan, dead) if call is None else None,
                           deaths=call.deaths + 1 if call is not None else 1)

    spans: list[tuple[float, float]] = []
    if tasks:
        clear_markers(store, plan.job_id)  # an earlier run's: a marker means "this attempt's worker died"
    try:
        results = runner.run_tasks(tasks, partial(apply_partition, ctx),
                            description=f"geneva apply {plan.table}.{','.join(plan.output_columns)}",
                            concurrency=plan.settings.concurrency, progress=progress,
                            tag=job_tag(plan.job_id), explain=explain, profile=profile, spans=spans) if tasks else []
    finally:
        if tasks:
            progress.final()
            clear_markers(store, plan.job_id)
    errors = [r.error for r in results if r.error]
    timed_out = any(r.timed_out for r in results)
    computed = sum(r.rows_computed for r in results)
    failures = [f for r in results for f in r.failures]
    ErrorStore(plan.table_uri, storage_options).append(plan.job_id, plan.table, failures)
    failed = sum(1 for f in failures if f.outcome == RowOutcome.SKIPPED)
    calls = sum(r.calls for r in results)
    counts = ApplyResult(
        job_id=plan.job_id, tasks_run=len(tasks), rows_computed=computed,
        rows_reused=plan.rows_reused + (max(planned - computed, 0) if not errors and not timed_out else 0),
        checkpoints_written=sum(r.checkpoints for r in results), errors=len(errors), rows_failed=failed,
        rows_retried=sum(1 for f in failures if f.outcome == RowOutcome.RECOVERED),
        seconds=round(time.perf_counter() - t0, 3), udtf_calls=calls if kind.counts_calls else None,
        max_tasks_at_once=most_at_once(spans) if profile is not None and spans else None, timed_out=timed_out)
    log.info("apply %s: %d %s in %s (%d skipped by the error policy, %d recovered by retries), "
             "%.1fs%s", plan.job_id, calls if kind.counts_calls else computed, kind.computed_noun,
             counted(counts.checkpoints_written, "checkpoint"), failed, counts.rows_retried, counts.seconds,
             "" if counts.max_tasks_at_once is None else
             f"; under the resource profile {describe_profile(profile)}: at most {counts.max_tasks_at_once} tasks "
             "ran at once")
    measured = {"tasks": len(tasks), "read_seconds": round(sum(r.read_seconds for r in results), 3),
                "udf_seconds": round(sum(r.udf_seconds for r in results), 3)}
    if errors:
        update_record(store, plan.job_id, **measured)
        raise UDFExecutionError(errors[0].message + (f" ({len(errors)} tasks failed)" if len(errors) > 1 else "")
                                + (f"; the failed rows are in the error store (job {plan.job_id})" if failures else ""))
    if timed_out:
        log.warning("apply %s: the job's timeout passed: its tasks stopped at a checkpoint after %d rows; a later "
                    "job resumes from the checkpoints", plan.job_id, computed)
        update_record(store, plan.job_id, rows_failed=failed, rows_retried=counts.rows_retried, **measured)
        return counts
    update_record(store, plan.job_id, rows_checkpointed=planned, rows_failed=failed, rows_retried=counts.rows_retried,
                  **measured)
    if not kind.counts_calls:  # a column's rows: what one cost tells the next plan whether splitting a fragment pays
        record_row_seconds(store, plan, computed, measured["read_seconds"] + measured["udf_seconds"])
    check_skip_limits(plan, failed)
    return counts
