"""An index build as a job kind: its plan document, job record, Spark stage (``Stage.INDEX``) and cancel.

:func:`plan_index` checks the request and plans the build on the driver (pins a version, cuts the groups,
trains IVF / PQ once) -- everything that can be refused is refused here, before any Spark job -- and stores
an :class:`~geneva_provider.core.contracts.models.IndexPlan` like every job's plan, with a record
(``list_jobs()`` shows it); the summary is what XCom carries.  :func:`run_index` is the index stage: the
segment tasks and the one commit inside the job's record, its progress the segments finished out of the
groups, its Spark jobs tagged with the job id so a cancel stops them with nothing committed.  The notebook's
:func:`create_index` / :func:`refresh_index` are the two in one process.  The registry line is ``INDEX``:
an index build holds no fragments (a compaction landing meanwhile makes it re-plan, :func:`.build.rebuilding`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.index_models import IndexBuildResult, IndexRefresh, IndexSpec
from geneva_provider.core.contracts.kinds import JobKind, Stage
from geneva_provider.core.contracts.models import IndexPlan, JobRecord, PlanSummary
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.store.layout import IndexRecords, JobStore, new_job_id
from geneva_provider.pipeline.indexes.build import (
    DEFAULT_MAX_SEGMENTS,
    check_max,
    plan_build,
    rebuilding,
    run_build,
)
from geneva_provider.pipeline.spark.runner import job_tag
from geneva_provider.pipeline.spark.task_runner import task_runner
from geneva_provider.pipeline.stages.job_records import (
    check_leases,
    finish_record,
    job_stage,
    start_record,
    take_over,
    update_record,
)
from geneva_provider.pipeline.stages.kinds import KindSpec
from geneva_provider.pipeline.stages.planning import open_plan

if TYPE_CHECKING:
    from geneva_provider.core.contracts.index_models import IndexBuildPlan
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.spark.task_runner import Compute

log = logging.getLogger(__name__)

# The segment tasks a plan made without a Spark session (an Airflow plan task) cuts the table into, at most
# (and never a group under ``MIN_GROUP_ROWS`` rows); a session's own parallelism otherwise.
PLAN_PARALLELISM = 8


def plan_index(table: TableRef, request: IndexSpec | IndexRefresh, *, store: CheckpointStore | None = None,
               airflow_run_id: str | None = None, target_groups: int | None = None,
               max_segments: int = DEFAULT_MAX_SEGMENTS, record: bool = True,
               parallelism: int | None = None) -> PlanSummary:
    """Plans the build of ``request`` (an :class:`IndexSpec`, or an :class:`IndexRefresh` of an index by name) and
    stores the plan; the package's error, naming the column and the value, when it cannot be built.

    ``parallelism``: the segment tasks wanted when ``target_groups`` is not given (default
    :data:`PLAN_PARALLELISM`).  A refresh of an index covering every fragment has nothing to do: its plan is
    stored (the index stage is then handed a no-op) but no record.  ``record`` writes the job's record.
    """
    if not isinstance(request, IndexSpec | IndexRefresh):
        raise InvalidArgumentError(f"index job on table '{table.name}': the request must be an IndexSpec or an "
                                   f"IndexRefresh, got {request!r}")
    check_max(max_segments)
    check_leases()
    store = store or table.checkpoint_store()
    build = plan_build(table, request, store, parallelism=parallelism or PLAN_PARALLELISM,
                       target_groups=target_groups, max_segments=max_segments)
    now = dt.datetime.now(dt.UTC)
    name = request.index_name
    doc = IndexPlan(job_id=new_job_id(now), created_at=now.isoformat(), table=table.name, table_uri=table.uri,
                    read_version=build.read_version if build is not None else table.dataset().version,
                    store_uri=store.uri or "", index_name=name, request=request, build=build,
                    target_groups=target_groups, max_segments=max_segments)
    jobs = JobStore(store)
    jobs.put_plan(doc.job_id, doc.model_dump_json())
    summary = doc.summary(jobs.plan_uri(doc.job_id))
    if record and build is not None:
        first = JobRecord(job_id=doc.job_id, kind=JobKind.INDEX, table=table.name, column=build.spec.column,
                          created_at=doc.created_at, updated_at=doc.created_at, read_version=doc.read_version,
                          rows_planned=build.rows, tasks=len(build.groups), segments_planned=len(build.groups),
                          segments_done=0, airflow_run_id=airflow_run_id)
        start_record(store, first)
        take_over(store, first)
    log.info("index plan %s: table '%s': %s", doc.job_id, table.name, summary.describe())
    return summary


def run_index(plan_uri: str, spark: Compute, storage_options: dict[str, str] | None = None) -> IndexBuildResult:
    """The index stage: the plan's segment tasks on Spark and the one commit, in the job's record.

    A compaction that rewrote the fragments being indexed makes the build plan again at the latest version and
    run again (a bounded number of times); a cancel (``JobControl.cancel``, ``geneva-provider jobs cancel``)
    stops its Spark jobs, records it CANCELLED, and nothing is committed.
    """
    from geneva_provider.core.refs import TableRef

    plan, store = open_plan(plan_uri, storage_options)
    if not isinstance(plan, IndexPlan):
        raise InvalidArgumentError(f"{plan_uri} is a {plan.kind} plan, not an index plan")
    if plan.build is None:  # no Spark job, no commit, no record
        log.info("index job %s: nothing to do: index '%s' of table '%s' covers every fragment at version %d",
                 plan.job_id, plan.index_name, plan.table, plan.read_version)
        return IndexBuildResult(index_name=plan.index_name, version=plan.read_version,
                                refresh=isinstance(plan.request, IndexRefresh))
    runner = task_runner(spark)
    table = TableRef(plan.table, plan.table_uri, storage_options)
    first = plan.build
    t0 = time.perf_counter()

    def once(attempt: int) -> IndexBuildResult:
        build = first if attempt == 0 else plan_build(
            table, plan.request, store, parallelism=runner.parallelism(), target_groups=plan.target_groups,
            max_segments=plan.max_segments)
        if build is None:  # a re-plan found every fragment covered
            return IndexBuildResult(job_id=plan.job_id, index_name=plan.index_name, version=table.dataset().version,
                                    refresh=True)
        if attempt:
            update_record(store, plan.job_id, read_version=build.read_version, rows_planned=build.rows,
                          segments_planned=len(build.groups), segments_done=0, rows_checkpointed=0)
        look = segment_progress(store, plan.job_id, build)
        try:
            done = run_build(table, store, build, runner, tag=job_tag(plan.job_id), progress=look)
        finally:  # a failed or cancelled build's record too says what it finished (its rerun reuses those)
            try:
                look()
            except Exception as exc:  # noqa: BLE001 - the stage's own outcome (or error) is what matters
                log.warning("index job %s: could not record its progress: %s", plan.job_id, exc)
        return done.model_copy(update={"job_id": plan.job_id})

    with job_stage(store, plan.job_id, Stage.INDEX), runner.retries():
        result = rebuilding(table, plan.index_name, once)
    result = result.model_copy(update={"seconds": {"total": round(time.perf_counter() - t0, 3)}})
    finish_record(store, plan.job_id, version=result.version, rows_committed=result.rows_indexed,
                  rows_checkpointed=result.rows_indexed, segments_done=len(result.segments_per_task))
    log.info("index job %s of table '%s': %s", plan.job_id, plan.table, result.describe())
    return result


def segment_progress(store: CheckpointStore, job_id: str, build: IndexBuildPlan) -> Callable[[], str]:
    """The index stage's progress line, called every few seconds while its tasks run: the segments finished (a
    rerun's found ones too) out of the groups, and their rows, also written to the job's record."""
    records = IndexRecords(store, build.spec.index_name)

    def look() -> str:
        done = records.segments(build.build_id)
        rows = sum(build.group_rows[r.group] for r in done if r.group < len(build.group_rows))
        update_record(store, job_id, segments_done=len(done), rows_checkpointed=rows)
        return (f"index {job_id}: {len(done)} of {len(build.groups)} segments built ({rows:,} of {build.rows:,} "
                "rows)")
    return look


def create_index(table: TableRef, spec: IndexSpec, spark: Compute, *, store: CheckpointStore | None = None,
                 target_groups: int | None = None, max_segments: int = DEFAULT_MAX_SEGMENTS) -> IndexBuildResult:
    """Builds ``spec``'s index over every fragment of ``table``: planned here, segments by tasks, one commit.

    Checked before any Spark job; an index of the same name is refused unless ``spec.replace``, and replaced by
    the commit otherwise.  ``target_groups``: how many segment tasks (default: the runner's parallelism).
    Rerun after a kill, it resumes (the same build, its finished segments found).
    """
    return _in_process(table, spec, spark, store, target_groups, max_segments)


def refresh_index(table: TableRef, index_name: str, spark: Compute, *, store: CheckpointStore | None = None,
                  target_groups: int | None = None, max_segments: int = DEFAULT_MAX_SEGMENTS,
                  retrain: bool = False) -> IndexBuildResult:
    """Indexes, add-only, the fragments of ``table`` the index ``index_name`` does not cover (new, rewritten,
    remapped) with its saved artifacts -- no retraining -- and commits them as new segments beside the old.

    ``retrain=True`` builds the whole index again from a new training instead.  Nothing to index: no Spark
    job, no commit.
    """
    return _in_process(table, IndexRefresh.of(index_name, retrain), spark, store, target_groups, max_segments)


def _in_process(table: TableRef, request: IndexSpec | IndexRefresh, spark: Compute, store: CheckpointStore | None,
                target_groups: int | None, max_segments: int) -> IndexBuildResult:
    runner = task_runner(spark)
    summary = plan_index(table, request, store=store, target_groups=target_groups, max_segments=max_segments,
                         parallelism=runner.parallelism())
    return run_index(summary.plan_uri, runner, table.storage_options)


class IndexKind(KindSpec[IndexPlan]):
    """The index kind: plans with :func:`plan_index`, runs :func:`run_index`, holds no fragment (a compaction meanwhile
    makes the build plan again) and reads no batch checkpoint (its segment records are its own keys)."""

    kinds = (JobKind.INDEX,)

    @property
    def planner(self) -> Callable[..., PlanSummary]:
        return plan_index

    def held_fragments(self, plan: IndexPlan) -> set[int]:
        return set()

    def checkpoint_prefix(self, plan: IndexPlan) -> str | None:
        return None

    def keeps_checkpoint(self, plan: IndexPlan, key: Any) -> bool:
        return False


INDEX = IndexKind()
