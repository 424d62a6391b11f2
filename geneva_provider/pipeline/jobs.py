"""A whole job in one process: plan -> apply -> write+commit -> verify, with one SparkSession (or task runner).

``Table.backfill`` and ``View.refresh`` (the notebook API and the test harness) run the very
same stage functions the Airflow operators and ``spark_apps`` call one per task.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from geneva_provider.core.catalog import TableResolver
from geneva_provider.core.contracts.index_models import IndexBuildResult, IndexRefresh, IndexSpec
from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.contracts.models import BackfillResult, CompactionResult, JobStatus, PlanSummary
from geneva_provider.core.contracts.options import BackfillOptions, RefreshOptions
from geneva_provider.core.errors import InvalidArgumentError, JobCancelledError
from geneva_provider.core.refs import TableRef
from geneva_provider.core.store.checkpoint import CheckpointStore, open_store, split_key_uri
from geneva_provider.pipeline.columns.plan_backfill import plan_backfill
from geneva_provider.pipeline.columns.plan_refresh import plan_refresh
from geneva_provider.pipeline.indexes.upkeep import (
    indexes_on,
    job_indexes,
    refresh_indexes,
    release_delta_segments,
    view_refresh_indexes,
)
from geneva_provider.pipeline.maintenance.compaction import (
    DEFAULT_TARGET_ROWS,
    compaction_options,
    plan_compaction,
    run_compaction,
)
from geneva_provider.pipeline.spark.contexts import context_session, ship_manifest
from geneva_provider.pipeline.spark.runner import local_session, running_context
from geneva_provider.pipeline.spark.task_runner import is_compute, task_runner
from geneva_provider.pipeline.stages.apply import run_apply
from geneva_provider.pipeline.stages.job_records import keep_alive, read_record, update_record, watch_cancel
from geneva_provider.pipeline.stages.verify import verify
from geneva_provider.pipeline.stages.write import run_write_commit

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, SparkSession
    from geneva_provider.pipeline.spark.task_runner import Compute, TaskRunner

log = logging.getLogger(__name__)



@dataclass
class JobControl:
    """How a caller follows and stops an in-process job: told its plan, asked to cancel between stages."""

    # Told the plan of a job with work to do once its Spark session is up (a progress bar drawn from then on
    # does not have the session's start-up output printed into it).
    on_plan: Callable[[PlanSummary], None] | None = None
    # Told the plan of a job with work to do before its Spark session (or runner) is brought up: a display says
    # "starting Spark" at once, not only once a JVM has started 15-35 s later.
    on_start: Callable[[PlanSummary], None] | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    runner: TaskRunner | None = None
    summary: PlanSummary | None = None

    def cancel(self) -> None:
        """Stops the job: its running Spark jobs are cancelled, and no later stage starts."""
        self.cancelled.set()
        if self.runner is not None and self.summary is not None:
            self.runner.cancel(self.summary.job_id)

    def check(self, stage: str) -> None:
        if self.cancelled.is_set():
            raise JobCancelledError(f"job {self.summary.job_id if self.summary else ''} was cancelled before {stage}")


def backfill(table: TableRef, column: str, options: BackfillOptions | None = None, *, spark: Compute | None = None,
             store: CheckpointStore | None = None, control: JobControl | None = None,
             refresh_indexes: bool = True) -> BackfillResult:
    """Runs every stage of a backfill of ``column`` in this process, on ``spark`` (a session or a task runner), the
    active session or the local one jobs without a session share (:func:`calls_session`); then, with
    ``refresh_indexes``, refreshes the indexes on the columns it writes (:func:`refresh_job_indexes`)."""
    return run_job(table, column, lambda parallelism: plan_backfill(
        table, column, options, store=store, parallelism=parallelism), spark, control,
        manifest=udf_manifest(table, column),
        indexes=(lambda ds: job_indexes(ds, column)) if refresh_indexes else None)


def udf_manifest(table: TableRef, column: str) -> Any:
    """The manifest the column's UDF was declared with (``@udf(manifest=...)``), if any."""
    from geneva_provider.core.functions.udf import lead_column
    from geneva_provider.pipeline.columns.inputs import udf_for

    ds = table.dataset()
    try:
        return udf_for(ds, lead_column(ds.schema, column)).manifest if column in ds.schema.names else None
    except InvalidArgumentError:  # not a UDF column: planning says so, naming it
        return None


def refresh(view: TableRef, options: RefreshOptions | None = None, *, resolve: TableResolver | None = None,
            spark: Compute | None = None, store: CheckpointStore | None = None, control: JobControl | None = None,
            refresh_indexes: bool = True) -> BackfillResult:
    """Refreshes a materialized view in this process: new source rows, then every stale fragment; then, with
    ``refresh_indexes``, the indexes on the columns it writes (:func:`refresh_job_indexes`; an index on a UDF
    column added to the view follows that column's backfill)."""
    return run_job(view, "*", lambda parallelism: plan_refresh(
        view, options, resolve=resolve, store=store, parallelism=parallelism), spark, control,
        manifest=udtf_manifest(view), indexes=view_refresh_indexes if refresh_indexes else None)


def udtf_manifest(view: TableRef) -> Any:
    """The manifest a chunker or batch-UDTF view's function was declared with (``@chunker(manifest=...)``), if any."""
    from geneva_provider.core.functions.udtf import load_udtf
    from geneva_provider.core.views.udtf_meta import is_udtf_view, udtf_view_state

    metadata = view.dataset().schema.metadata
    if not is_udtf_view(metadata):
        return None
    return getattr(load_udtf(udtf_view_state(metadata, view.name).pickle), "manifest", None)


def compact(table: TableRef, options: dict[str, Any] | None = None, *, spark: Compute | None = None,
            store: CheckpointStore | None = None, exclude_live_jobs: bool = True,
            refresh_indexes: bool = True) -> CompactionResult:
    """Compacts ``table`` with its rewrite tasks on Spark (no session is started when there is nothing to do).

    With ``refresh_indexes``, the indexes and the compaction never undo each other: first the small segments
    that would keep the compaction from coalescing small fragments are dropped
    (:func:`~geneva_provider.pipeline.indexes.upkeep.release_delta_segments`); after the compaction, the remap
    check: every index indexes add-only what is left uncovered (nothing: no Spark job, no commit)."""
    if spark is not None and not is_compute(spark):
        raise InvalidArgumentError(f"compaction of table '{table.name}': spark must be a SparkSession or a task "
                                   "runner (or None), "
                                   f"got {spark!r}")
    summary = plan_compaction_keeping_indexes(table, options, store=store, exclude_live_jobs=exclude_live_jobs,
                                              release_index_segments=refresh_indexes)
    if summary.nothing_to_do:
        log.info("compaction of table '%s': nothing to compact%s", table.name,
                 f" (fragments {summary.fragments_excluded} left alone: held by live jobs)"
                 if summary.fragments_excluded else "")
        result = CompactionResult(job_id=summary.job_id, version=summary.read_version, fragments_removed=0,
                                  fragments_added=0, files_removed=0, files_added=0,
                                  excluded=summary.fragments_excluded, held_by=summary.fragments_held_by)
    else:
        result = run_compaction(summary.plan_uri, _runner(spark), table.storage_options)
    if not refresh_indexes:
        return result
    t = time.perf_counter()
    refreshed = refresh_job_indexes(table, indexes_on, spark, store)
    return result.model_copy(update={"indexes": refreshed, "seconds": result.seconds + time.perf_counter() - t})


def plan_compaction_keeping_indexes(table: TableRef, options: dict[str, Any] | None = None, *,
                                    store: CheckpointStore | None = None, exclude_live_jobs: bool = True,
                                    airflow_run_id: str | None = None, release_index_segments: bool = True
                                    ) -> PlanSummary:
    """:func:`~geneva_provider.pipeline.maintenance.compaction.plan_compaction`, with ``release_index_segments``
    first dropping the small index segments that would keep it from coalescing small fragments
    (:func:`~geneva_provider.pipeline.indexes.upkeep.release_delta_segments`): the plan of a compaction followed by
    its index stage, which indexes again what the compaction made of their fragments (``compact`` here, Airflow's
    ``compaction_task_group``)."""
    if release_index_segments:
        checked, _, _ = compaction_options(table, options)  # bad options change nothing
        release_delta_segments(table, checked.get("target_rows_per_fragment") or DEFAULT_TARGET_ROWS, store)
    return plan_compaction(table, options, store=store, exclude_live_jobs=exclude_live_jobs,
                           airflow_run_id=airflow_run_id)


_CALLS_SESSION: list[SparkSession] = []  # the local session that jobs given no session share (the first starts it)
_CALLS_SESSION_LOCK = threading.Lock()


def calls_session() -> SparkSession:
    """The local ``local[*]`` session of the jobs given no session and finding none active.

    Started by the first such job and kept for the next ones, as a notebook keeps its session: a job
    then costs its work, not a SparkContext's start and stop (~4 s on 2 cores).  One the caller stopped
    is started again; it ends with the process.  A SparkContext running already (not active in this
    thread) is shared as it is, whatever its master: local_session would warn that it is not ``local[*]``.
    """
    with _CALLS_SESSION_LOCK:
        if not _CALLS_SESSION or _CALLS_SESSION[0].sparkContext._jsc is None:
            running = running_context()
            master = running.master if running is not None else None
            _CALLS_SESSION[:] = [local_session(master or "local[*]", app_name="geneva")]
        return _CALLS_SESSION[0]


def _runner(spark: Compute | None) -> TaskRunner:
    """The runner of ``spark``, else of the execution context's session (``db.context()``), else of the active
    session, else of :func:`calls_session`."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = context_session() or SparkSession.getActiveSession() or calls_session()  # never stopped here
    return task_runner(spark)


def _parallelism(spark: Compute | None) -> int | None:
    """How many tasks ``spark`` (or the execution context's session) runs at once; None when no session is given
    (one starts only if there is work)."""
    spark = spark if spark is not None else context_session()
    if spark is None:
        return None
    runner = task_runner(spark)
    with runner.retries():  # a caller's Connect session whose server is gone fails here, soon
        return runner.parallelism()


def run_job(table: TableRef, column: str, plan: Callable[[int | None], PlanSummary], spark: Compute | None,
            control: JobControl | None = None, manifest: Any = None,
            indexes: Callable[[Dataset], list[str]] | None = None) -> BackfillResult:
    """plan -> apply -> write+commit -> verify with one SparkSession (started only if there is work) or task runner;
    ``manifest`` (the UDF's :class:`~geneva_provider.core.manifest.GenevaManifest`) is shipped to its workers.

    ``indexes`` (the names of the indexes the job's commit touches, of the table's dataset): the index stage
    after verify refreshes them (:func:`refresh_job_indexes`), also when the job had nothing to compute (a
    rerun finishes the index stage of a run that failed in it); None: no index stage.
    """
    control = control or JobControl()
    if spark is not None and not is_compute(spark):
        raise InvalidArgumentError(f"job on table '{table.name}': spark must be a SparkSession, classic or Spark "
                                   f"Connect, or a task runner (or None for the active or a local session), "
                                   f"got {spark!r}")
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    # Plan first: bad input fails before any JVM starts.
    parallelism = _parallelism(spark)
    summary = plan(parallelism)
    control.summary = summary
    seconds[Stage.PLAN] = time.perf_counter() - t0
    so = table.storage_options
    if summary.nothing_to_do:
        log.info("job %s on table '%s': up to date", summary.job_id, table.name)
        version = table.dataset().version
        refreshed = _index_stage(table, indexes, spark, None, seconds)
        seconds["total"] = time.perf_counter() - t0
        return BackfillResult(job_id=summary.job_id, column=column, rows_computed=0, rows_reused=summary.rows_reused,
                              fragments_committed=0, fragments_reused=0, version=version,
                              seconds=_rounded(seconds), indexes=refreshed)
    store = open_store(split_key_uri(summary.plan_uri)[0], so)
    try:
        control.check(Stage.APPLY)
        t = time.perf_counter()
        # Heartbeats from the plan to the end: the job is live while its Spark session starts, too.
        # A cancel request from another process (``geneva-provider jobs cancel``) stops it as a handle's cancel does.
        with keep_alive(store, summary.job_id), watch_cancel(store, summary.job_id, control.cancel):
            if control.on_start is not None:
                control.on_start(summary)
            control.runner = runner = _runner(spark)
            if manifest is not None:
                ship_manifest(runner, manifest, f"job on table '{table.name}'"
                              + (f" column '{column}'" if column != "*" else ""))
            seconds["session"] = time.perf_counter() - t
            if control.on_plan is not None:  # once the session is up: what it prints starting comes before a bar
                control.on_plan(summary)
            t = time.perf_counter()
            applied = run_apply(summary.plan_uri, runner, so)
            seconds[Stage.APPLY] = time.perf_counter() - t
            if not applied.timed_out:
                control.check("write+commit")
                t = time.perf_counter()
                written = run_write_commit(summary.plan_uri, runner, so)
                seconds[Stage.WRITE_COMMIT] = time.perf_counter() - t
            control.runner = None
    except Exception as exc:  # noqa: BLE001 - _raise_ended raises it (or the cancel it was)
        _raise_ended(exc, store, summary, control)
    if applied.timed_out:  # nothing committed: the next job finds the checkpoints and computes only the rest
        update_record(store, summary.job_id, status=JobStatus.FAILED,
                      error=f"timed out after computing {applied.rows_computed} of {summary.rows_to_compute} rows; "
                            "nothing was committed, and a later job resumes from its checkpoints")
        seconds["total"] = time.perf_counter() - t0
        return BackfillResult(job_id=summary.job_id, column=column, rows_computed=applied.rows_computed,
                              rows_reused=applied.rows_reused, fragments_committed=0, fragments_reused=0,
                              version=table.dataset().version, rows_failed=applied.rows_failed,
                              rows_retried=applied.rows_retried, seconds=_rounded(seconds), timed_out=True)
    t = time.perf_counter()
    verify(summary, so)
    seconds[Stage.VERIFY] = time.perf_counter() - t
    refreshed = _index_stage(table, indexes, runner, store, seconds)
    seconds["total"] = time.perf_counter() - t0
    result = BackfillResult(
        job_id=summary.job_id, column=column, rows_computed=applied.rows_computed, rows_reused=applied.rows_reused,
        fragments_committed=written.fragments_committed, fragments_reused=summary.fragments_reused,
        version=written.version, fragments_vanished=written.fragments_vanished, rows_failed=applied.rows_failed,
        rows_retried=applied.rows_retried, seconds=_rounded(seconds), indexes=refreshed)
    log.info("job %s on table '%s' (%s): %s", result.job_id, table.name, column, result.describe())
    return result


def _index_stage(table: TableRef, indexes: Callable[[Dataset], list[str]] | None, spark: Compute | None,
                 store: CheckpointStore | None, seconds: dict[str, float]) -> list[IndexBuildResult]:
    """The job's index stage: the indexes ``indexes`` names refreshed (its time in ``seconds["index"]``)."""
    if indexes is None:
        return []
    t = time.perf_counter()
    refreshed = refresh_job_indexes(table, indexes, spark, store)
    seconds["index"] = time.perf_counter() - t
    return refreshed


def refresh_job_indexes(table: TableRef, indexes: Callable[[Dataset], list[str]], spark: Compute | None,
                        store: CheckpointStore | None = None, *, retrain: bool = False) -> list[IndexBuildResult]:
    """Refreshes add-only the indexes ``indexes`` names of ``table``'s latest version, on ``spark``, else the
    session a job would use (:func:`_runner`), started only when an index has fragments to index."""
    return refresh_indexes(table, indexes(table.dataset()), lambda: _runner(spark), store, retrain=retrain)


def _raise_ended(exc: Exception, store: CheckpointStore, summary: PlanSummary, control: JobControl) -> NoReturn:
    """How an in-process job that raised ends: a failure re-raised (recorded FAILED when it had not started its
    first stage -- its Spark session did not start -- so it holds nothing now); a cancelled job recorded CANCELLED
    and JobCancelledError raised."""
    if not control.cancelled.is_set():
        if (record := read_record(store, summary.job_id)) is not None and record.status is JobStatus.PENDING:
            update_record(store, summary.job_id, status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}"[:2_000])
        raise exc
    update_record(store, summary.job_id, status=JobStatus.CANCELLED, error="cancelled",
                  finished_at=dt.datetime.now(dt.UTC).isoformat())
    if isinstance(exc, JobCancelledError):
        raise exc
    raise JobCancelledError(f"job {summary.job_id} was cancelled while running") from None


def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in seconds.items()}


def build_index(table: TableRef, request: IndexSpec | IndexRefresh, *, spark: Compute | None = None,
                store: CheckpointStore | None = None, control: JobControl | None = None,
                target_groups: int | None = None, max_segments: int | None = None) -> IndexBuildResult:
    """An index build (or refresh) in this process: planned first -- a bad request fails before any Spark session
    starts, nothing changed --, then its segment tasks and the one commit on ``spark`` (a session or a task runner),
    the execution context's or active session, or :func:`calls_session` (none is started with nothing to do).

    ``control.cancel()`` and a cancel request from another process (``geneva-provider jobs cancel``) stop its
    Spark jobs: the job is recorded CANCELLED, nothing committed, and JobCancelledError raised.
    """
    from geneva_provider.pipeline.indexes.build import DEFAULT_MAX_SEGMENTS
    from geneva_provider.pipeline.indexes.kind import plan_index, run_index

    control = control or JobControl()
    if spark is not None and not is_compute(spark):
        raise InvalidArgumentError(f"index job on table '{table.name}': spark must be a SparkSession, classic or "
                                   f"Spark Connect, or a task runner (or None), got {spark!r}")
    summary = plan_index(table, request, store=store, target_groups=target_groups,
                         max_segments=DEFAULT_MAX_SEGMENTS if max_segments is None else max_segments,
                         parallelism=_parallelism(spark))
    control.summary = summary
    so = table.storage_options
    if summary.nothing_to_do:
        log.info("index job %s on table '%s': %s", summary.job_id, table.name, summary.describe())
        return IndexBuildResult(index_name=summary.index_name or "", version=summary.read_version,
                                refresh=isinstance(request, IndexRefresh))
    store = open_store(split_key_uri(summary.plan_uri)[0], so)
    try:
        control.check(Stage.INDEX)
        with keep_alive(store, summary.job_id), watch_cancel(store, summary.job_id, control.cancel):
            if control.on_start is not None:
                control.on_start(summary)
            control.runner = runner = _runner(spark)
            if control.on_plan is not None:
                control.on_plan(summary)
            return run_index(summary.plan_uri, runner, so)
    except Exception as exc:  # noqa: BLE001 - _raise_ended raises it (or the cancel it was)
        _raise_ended(exc, store, summary, control)
    finally:
        control.runner = None
