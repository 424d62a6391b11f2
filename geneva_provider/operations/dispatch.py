"""``run`` / ``submit`` / ``plan`` and one handler per operation, dispatched on the request's type
(``functools.singledispatch``): jobs (backfill, view refresh, index build) are *prepared* -- checked against the
table, changing nothing -- then run here or in a background thread, or only planned (an Airflow plan task, whose
later stages are tasks of their own); the other operations run at once."""

from __future__ import annotations

import importlib
from functools import singledispatch
from typing import TYPE_CHECKING, Any, Protocol

from geneva_provider.core.catalog import Catalog
from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.operations import (
    JOB_OPERATIONS,
    AddColumns,
    AlterColumns,
    BackfillColumn,
    CancelJob,
    ColumnsChanged,
    CreateIndex,
    CreateView,
    DropColumns,
    DropIndex,
    GetJob,
    IndexStats,
    JobAccepted,
    JobInfo,
    JobList,
    ListIndices,
    ListJobs,
    Operation,
    RefreshView,
    ViewCreated,
)
from geneva_provider.core.contracts.options import BackfillOptions, RefreshOptions
from geneva_provider.core.errors import InvalidArgumentError, JobNotFoundError
from geneva_provider.operations.background import JobHandle, PreparedJob
from geneva_provider.operations.indexes import create_index

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.jobs import JobControl


class HasCatalog(Protocol):
    catalog: Catalog


Db = Catalog | HasCatalog


def catalog_of(db: Db) -> Catalog:
    """The catalog a request runs on: ``db`` itself, or its ``.catalog`` (a facade Connection)."""
    catalog = db if isinstance(db, Catalog) else getattr(db, "catalog", None)
    if not isinstance(catalog, Catalog):
        raise InvalidArgumentError(f"operations: db must be a Catalog or a connection holding one, got {db!r}")
    return catalog


def run(db: Db, request: Operation, *, spark: Any = None, checkpoint_store: CheckpointStore | None = None,
        control: JobControl | None = None, options: dict[str, Any] | None = None) -> Any:
    """Runs ``request`` to its end in this process and returns its response (a job's result for a job).

    ``spark``: a session or task runner for a job (default: the active or a local session); ``options``: tuning
    options beyond the request's fields (``BackfillOptions`` / ``RefreshOptions``), checked with them."""
    from geneva_provider.pipeline.jobs import JobControl

    catalog = catalog_of(db)
    if isinstance(request, JOB_OPERATIONS):
        job = prepare(request, catalog, spark=spark, checkpoint_store=checkpoint_store, options=options)
        return job.run(control or JobControl())
    return handle(request, catalog, spark)


def submit(db: Db, request: Operation, *, spark: Any = None, checkpoint_store: CheckpointStore | None = None,
           options: dict[str, Any] | None = None) -> JobAccepted:
    """Starts the job of ``request`` in a background thread and returns its id once planned, before it ends.

    Its record is in the table's checkpoint store, so ``run(db, GetJob(job_id=...))`` from any process follows it,
    and ``CancelJob`` stops it.  A bad request raises here, changing nothing; so does a plan that fails.
    """
    job = prepare(request, catalog_of(db), spark=spark, checkpoint_store=checkpoint_store, options=options)
    return JobAccepted(job_id=start(job).wait_for_id())


def plan(db: Db, request: Operation, *, parallelism: int | None = None, airflow_run_id: str | None = None,
         checkpoint_store: CheckpointStore | None = None, options: dict[str, Any] | None = None) -> PlanSummary:
    """Only the plan step of the job of ``request`` (a backfill, a view refresh -- query, chunker or batch-UDTF
    view --, an index build): checked and planned exactly as :func:`run` would, the plan stored, its summary
    returned; the stages after it (Spark apply, write+commit, verify; or the Spark index build) take that summary.

    This is what the Airflow plan tasks call.  ``parallelism``: the Spark task slots the plan sizes its tasks for;
    ``airflow_run_id``: the DAG run the job's record names (a namespace's ``describe_job`` finds it by that id).
    The summary names the child namespace of the table (``db``'s), if any: the stages' links find its record there."""
    from geneva_provider.operations.unchanged import planned_once

    catalog = catalog_of(db)
    summary = planned_once(catalog, request, options, checkpoint_store, lambda: prepare(
        request, catalog, checkpoint_store=checkpoint_store, options=options).plan(parallelism, airflow_run_id))
    return summary.model_copy(update={"namespace": list(catalog.parent)}) if catalog.parent else summary


def confirm(db: Db, store: CheckpointStore, job_id: str) -> bool:
    """After job ``job_id`` was verified (the Airflow verify task): whether it left its table up to date for its
    request, asked with a dry plan and recorded so -- the next plan of that request at that state does not open the
    table (:mod:`geneva_provider.operations.unchanged`)."""
    from geneva_provider.operations.unchanged import confirm as confirm_job

    catalog = catalog_of(db)
    return confirm_job(catalog, store, job_id, lambda request, options: prepare(
        request, catalog, checkpoint_store=store, options=options).dry_plan)


def start(job: PreparedJob) -> JobHandle:
    """The prepared job started in a background thread."""
    return JobHandle(job.store, job.label, kind=job.kind, table=job.table, column=job.column).start(job.run)


# ---------------------------------------------------------------- jobs
@singledispatch
def prepare(request: Operation, catalog: Catalog, *, spark: Any = None,
            checkpoint_store: CheckpointStore | None = None, options: dict[str, Any] | None = None) -> PreparedJob:
    """The job of ``request``, checked against its table (the package's errors naming what is wrong)."""
    raise InvalidArgumentError(f"operation {getattr(request, 'op', request)!r} is not a job; run it with run()")


@prepare.register(BackfillColumn)
def _backfill(request: BackfillColumn, catalog: Catalog, *, spark: Any = None,
              checkpoint_store: CheckpointStore | None = None, options: dict[str, Any] | None = None) -> PreparedJob:
    from geneva_provider.core.filters import check_where
    from geneva_provider.core.functions.udf import lead_column
    from geneva_provider.pipeline.columns.plan_backfill import plan_backfill, udf_with_inputs
    from geneva_provider.pipeline.jobs import backfill

    name, column = request.table, request.column
    parsed = BackfillOptions.parse({**request.options(), **(options or {})}, job=f"backfill of table '{name}'",
                                   where=request.where)
    ref = catalog.ref(name)
    # Checked now, not from the job: a submitted job fails at the call on a dropped table, a column that is
    # missing or not a UDF column, a UDF input that is gone, or a bad filter -- as a run does.
    ds = ref.dataset()
    udf_with_inputs(ds, name, lead_column(ds.schema, column))
    if parsed.where:
        check_where(ds, parsed.where, f"table '{name}'")
    store = checkpoint_store or ref.checkpoint_store()
    return PreparedJob(lambda control: backfill(ref, column, parsed, spark=spark, store=store, control=control,
                                                refresh_indexes=request.refresh_indexes),
                       lambda parallelism, run_id: plan_backfill(ref, column, parsed, store=store,
                                                                 parallelism=parallelism, airflow_run_id=run_id),
                       store, f"{name}.{column}", JobKind.BACKFILL, name, column,
                       dry_plan=lambda: plan_backfill(ref, column, parsed, store=store, dry=True))


@prepare.register(RefreshView)
def _refresh(request: RefreshView, catalog: Catalog, *, spark: Any = None,
             checkpoint_store: CheckpointStore | None = None, options: dict[str, Any] | None = None) -> PreparedJob:
    from geneva_provider.pipeline.columns.plan_refresh import plan_refresh
    from geneva_provider.pipeline.jobs import refresh

    name = request.table
    parsed = RefreshOptions.parse({**request.options(), **(options or {})}, job=f"refresh of view '{name}'",
                                  src_version=request.src_version, max_rows_per_fragment=request.max_rows_per_fragment)
    ref = catalog.ref(name)
    ref.dataset()  # TableNotFoundError now, not from the job, if the view was dropped
    store = checkpoint_store or ref.checkpoint_store()
    return PreparedJob(lambda control: refresh(ref, parsed, resolve=catalog.resolve, spark=spark, store=store,
                                               control=control, refresh_indexes=request.refresh_indexes),
                       lambda parallelism, run_id: plan_refresh(ref, parsed, resolve=catalog.resolve, store=store,
                                                                parallelism=parallelism, airflow_run_id=run_id),
                       store, f"refresh {name}", JobKind.REFRESH, name)


prepare.register(CreateIndex, create_index)


# ---------------------------------------------------------------- the other operations
@singledispatch
def handle(request: Operation, catalog: Catalog, spark: Any = None) -> Any:
    """The response to ``request``, run at once (``spark``: where a job it starts runs)."""
    raise InvalidArgumentError(f"unknown operation {request!r}")


@handle.register(CreateView)
def _create_view(request: CreateView, catalog: Catalog, spark: Any = None) -> ViewCreated:
    from geneva_provider.pipeline.columns.view_create import create_view
    from geneva_provider.pipeline.udtf.view_create import create_udtf_view

    name, source = request.table, request.source_query
    what = f"create_materialized_view '{name}'" if request.kind == "query" else f"create_udtf_view '{name}'"
    source_ref = catalog.ref(source.id[-1])
    source_ref.dataset()  # TableNotFoundError naming the source if it was dropped
    if request.auto_refresh and source.version is not None:
        raise InvalidArgumentError(
            f"{what}: the query reads table '{source_ref.name}' checked out at version {source.version}, and a view "
            "of it stays at that version; refresh_on_change needs a view of the latest (build the query on a "
            "handle that is not checked out)")
    spec = source.view_query(catalog.uri)
    if request.kind == "query":
        if request.udtf_spec is not None:
            raise InvalidArgumentError(f"{what}: udtf_spec is for kind 'udtf' or 'chunker', not 'query'")
        ref = create_view(catalog, name, source_ref, spec, max_rows_per_fragment=request.max_rows_per_fragment,
                          source_version=source.version)
    else:
        ref = create_udtf_view(catalog, name, source_ref, spec, _udtf(request.udtf_spec, what),
                               max_rows_per_fragment=request.max_rows_per_fragment, source_version=source.version)
    if request.auto_refresh:
        from geneva_provider.pipeline.followers import META_REFRESH_ON_CHANGE
        from geneva_provider.pipeline.schema_changes import UpdateColumns

        UpdateColumns(ref).set_table_metadata({META_REFRESH_ON_CHANGE: "true"}).commit()
    job_id = None
    if not request.with_no_data:
        job_id = submit(catalog, RefreshView(id=request.id), spark=spark).job_id
    return ViewCreated(version=ref.dataset().version, job_id=job_id)


def _udtf(spec: Any, what: str) -> Any:
    """The UDTF of a view request: the object, or unpickled from its base64 form."""
    from geneva_provider.core.functions.udtf import UDTF

    if spec is None:
        raise InvalidArgumentError(f"{what}: udtf_spec (the chunker or batch UDTF) is required")
    return UDTF.load(spec) if isinstance(spec, str) else spec


@handle.register(AddColumns)
def _add_columns(request: AddColumns, catalog: Catalog, spark: Any = None) -> ColumnsChanged:
    from geneva_provider.operations.columns import add_columns

    changed = add_columns(request, catalog)
    for entry in request.new_columns:  # the spec's auto_backfill: the column's backfill is submitted too
        if entry.virtual_column is not None and entry.virtual_column.auto_backfill:
            submit(catalog, BackfillColumn(id=request.id, column=entry.name), spark=spark)
    return changed


def _answered_by(kind: type, module: str, name: str) -> None:
    """Registers as ``kind``'s handler the function ``name(request, catalog)`` of the front door's ``module``
    (imported when asked: the column and index modules load Lance and pyarrow)."""
    def answer(request: Any, catalog: Catalog, spark: Any = None) -> Any:
        return getattr(importlib.import_module(f"geneva_provider.operations.{module}"), name)(request, catalog)

    answer.__name__ = f"_{name}"
    handle.register(kind, answer)


for _kind, _module, _name in ((AlterColumns, "columns", "alter_columns"), (DropColumns, "columns", "drop_columns"),
                              (ListIndices, "indexes", "list_indices"), (IndexStats, "indexes", "index_stats"),
                              (DropIndex, "indexes", "drop_index")):
    _answered_by(_kind, _module, _name)


@handle.register(ListJobs)
def _list_jobs(request: ListJobs, catalog: Catalog, spark: Any = None) -> JobList:
    from geneva_provider.core.contracts.models import JobStatus
    from geneva_provider.pipeline.stages.job_records import read_records

    table, status, kind = (request.id[-1] if request.id else None), request.status, request.kind
    if status is not None and status.upper() not in JobStatus.__members__:
        raise InvalidArgumentError(f"list_jobs: status must be one of {list(JobStatus.__members__)}, got "
                                   f"{status!r}")
    status = status.upper() if status is not None else None  # "cancelled", as the CLI's --status takes it
    if kind is not None and kind not in list(JobKind):
        raise InvalidArgumentError(f"list_jobs: kind must be one of {[str(k) for k in JobKind]}, got {kind!r}")
    names = [table] if table is not None else catalog.names()
    records = [r for name in names for r in read_records(catalog.ref(name).checkpoint_store())]
    records = [r for r in records if (status is None or r.status == status) and (kind is None or r.kind == kind)]
    return JobList(jobs=sorted(records, key=lambda r: r.created_at, reverse=True))


@handle.register(GetJob)
def _get_job(request: GetJob, catalog: Catalog, spark: Any = None) -> JobInfo:
    from geneva_provider.pipeline.stages.job_records import find_record

    for name in catalog.names():
        record = find_record(catalog.ref(name).checkpoint_store(), request.job_id)
        if record is not None:
            return JobInfo(job=record)
    raise JobNotFoundError(f"no job {request.job_id!r} in database {catalog.uri} (or its records were cleaned up)")


@handle.register(CancelJob)
def _cancel_job(request: CancelJob, catalog: Catalog, spark: Any = None) -> JobInfo:
    from geneva_provider.pipeline.stages.job_records import request_cancel

    record = _get_job(GetJob(job_id=request.job_id), catalog).job
    return JobInfo(job=request_cancel(catalog.ref(record.table).checkpoint_store(), request.job_id))


__all__ = ["PreparedJob", "catalog_of", "handle", "plan", "prepare", "run", "start", "submit"]
