"""``GenevaNamespace``: a Lance namespace (``lance_namespace.LanceNamespace``) that does, besides the table CRUD,
the operations the spec names and no open implementation serves: backfill a UDF column, create and refresh
materialized views (query, chunker and batch-UDTF views), add / alter / drop UDF and computed columns, and build,
list, describe and drop indexes (``num_partitions`` / ``num_sub_vectors`` honoured) -- plus the job operations the
spec lacks (``describe_job``, ``list_jobs``, ``cancel_job``).

Table and namespace CRUD go to an inner namespace (Lance's directory namespace over ``root`` unless
``inner_impl`` names another); the rest is turned into the front door's operations
(:mod:`geneva_provider.namespace.convert`) and run by :mod:`geneva_provider.operations`, jobs on the configured
runner (:mod:`geneva_provider.namespace.runners`).  Responses are the spec's models; no storage option (secret)
is ever put in one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import lance_namespace as ln

import geneva_provider.namespace.convert as convert
from geneva_provider.core.contracts.operations import (
    BackfillColumn,
    CancelJob,
    ColumnsChanged,
    CreateView,
    GetJob,
    IndexList,
    IndexStatsInfo,
    JobInfo,
    JobList,
    ListJobs,
    Operation,
    RefreshView,
    ViewCreated,
)
from geneva_provider.core.errors import InvalidArgumentError, JobNotFoundError
from geneva_provider.namespace.config import NamespaceConfig
from geneva_provider.namespace.runners import runner_for

if TYPE_CHECKING:
    from geneva_provider.core.catalog import Catalog

#: the operations this namespace serves itself; every other one goes to the inner namespace
SERVED = frozenset({
    "namespace_id", "alter_table_backfill_columns", "create_materialized_view", "refresh_materialized_view",
    "alter_table_add_columns", "alter_table_alter_columns", "alter_table_drop_columns", "create_table_index",
    "create_table_scalar_index", "list_table_indices", "describe_table_index_stats", "drop_table_index",
})


class GenevaNamespace(ln.LanceNamespace):
    """``lance_namespace.connect("geneva", {"root": "/data/lake"})`` -- see the module docstring for the
    properties (:class:`~geneva_provider.namespace.config.NamespaceConfig`)."""

    def __init__(self, **properties: str) -> None:
        from geneva_provider.core.catalog import Catalog

        self.config = NamespaceConfig.of(properties)
        self.inner: ln.LanceNamespace = ln.connect(self.config.inner_impl, self.config.inner_properties())
        self.catalog = Catalog(self.config.root, self.config.storage_options())
        self.runner = runner_for(self.config, self.catalog)

    def namespace_id(self) -> str:
        return f"GenevaNamespace {{ root: '{self.catalog.uri}', inner: {self.inner.namespace_id()} }}"

    def __repr__(self) -> str:  # storage options and tokens are never shown
        return self.namespace_id()

    # ------------------------------------------------------------ jobs
    def alter_table_backfill_columns(self, request: ln.AlterTableBackfillColumnsRequest
                                     ) -> ln.AlterTableBackfillColumnsResponse:
        return ln.AlterTableBackfillColumnsResponse(job_id=self._submit(convert.backfill(request)))

    def refresh_materialized_view(self, request: ln.RefreshMaterializedViewRequest
                                  ) -> ln.RefreshMaterializedViewResponse:
        return ln.RefreshMaterializedViewResponse(job_id=self._submit(convert.refresh(request)))

    def create_materialized_view(self, request: ln.CreateMaterializedViewRequest
                                 ) -> ln.CreateMaterializedViewResponse:
        operation = convert.create_view(request)
        with_data = not operation.with_no_data
        created: ViewCreated = self._run(operation.model_copy(update={"with_no_data": True}))
        job_id = self._submit(RefreshView(id=operation.id)) if with_data else None
        return ln.CreateMaterializedViewResponse(version=created.version, job_id=job_id)

    def create_table_index(self, request: ln.CreateTableIndexRequest) -> ln.CreateTableIndexResponse:
        return ln.CreateTableIndexResponse(context={"job_id": self._submit(convert.create_index(request))})

    def create_table_scalar_index(self, request: ln.CreateTableIndexRequest) -> ln.CreateTableScalarIndexResponse:
        job_id = self._submit(convert.create_index(request, scalar=True))
        return ln.CreateTableScalarIndexResponse(context={"job_id": job_id})

    # ------------------------------------------------------------ columns and indexes, answered at once
    def alter_table_add_columns(self, request: ln.AlterTableAddColumnsRequest) -> ln.AlterTableAddColumnsResponse:
        operation = convert.add_columns(request)
        backfills = [entry for entry in operation.new_columns
                     if entry.virtual_column is not None and entry.virtual_column.auto_backfill]
        manual = operation.model_copy(update={"new_columns": [
            e.model_copy(update={"virtual_column": e.virtual_column.model_copy(update={"auto_backfill": False})})
            if e.virtual_column else e for e in operation.new_columns]})
        changed: ColumnsChanged = self._run(manual)
        jobs = [self._submit(BackfillColumn(id=operation.id, column=entry.name)) for entry in backfills]
        context = {"job_id": jobs[0]} if len(jobs) == 1 else {"job_ids": ",".join(jobs)} if jobs else None
        return ln.AlterTableAddColumnsResponse(version=changed.version, context=context)

    def alter_table_alter_columns(self, request: ln.AlterTableAlterColumnsRequest
                                  ) -> ln.AlterTableAlterColumnsResponse:
        changed: ColumnsChanged = self._run(convert.alter_columns(request))
        return ln.AlterTableAlterColumnsResponse(version=changed.version)

    def alter_table_drop_columns(self, request: ln.AlterTableDropColumnsRequest) -> ln.AlterTableDropColumnsResponse:
        changed: ColumnsChanged = self._run(convert.drop_columns(request))
        return ln.AlterTableDropColumnsResponse(version=changed.version)

    def list_table_indices(self, request: ln.ListTableIndicesRequest) -> ln.ListTableIndicesResponse:
        listed: IndexList = self._run(convert.list_indices(request))
        table = convert.table_id(request, "list_table_indices")
        uuids = {index["name"]: index["uuid"] for index in self.catalog_for(table).ref(table[-1]).dataset()
                 .list_indices()} if listed.indexes else {}
        return ln.ListTableIndicesResponse(indexes=[convert.index_content(stats, uuids.get(stats.name, ""))
                                                    for stats in listed.indexes])

    def describe_table_index_stats(self, request: ln.DescribeTableIndexStatsRequest
                                   ) -> ln.DescribeTableIndexStatsResponse:
        stats = self._run(convert.index_stats(request))
        assert isinstance(stats, IndexStatsInfo)
        s = stats.stats
        return ln.DescribeTableIndexStatsResponse(distance_type=s.distance_type, index_type=s.index_type,
                                                  num_indexed_rows=s.num_indexed_rows,
                                                  num_unindexed_rows=s.num_unindexed_rows, num_indices=s.num_segments)

    def drop_table_index(self, request: ln.DropTableIndexRequest) -> ln.DropTableIndexResponse:
        self._run(convert.drop_index(request))
        return ln.DropTableIndexResponse()

    # ------------------------------------------------------------ the extension: jobs
    def describe_job(self, request: GetJob) -> JobInfo:
        """The job's record: its status, stage and row counts; for the id of a DAG run (``job_runner=airflow``) the
        record of the job the run planned, or the run's state before it planned one; JobNotFoundError naming it
        otherwise."""
        try:
            return self._in_any_namespace(request)
        except JobNotFoundError:
            record = self._by_run_id(request.job_id) or self.runner.describe(request.job_id)
            if record is None:
                raise
            return JobInfo(job=record)

    def list_jobs(self, request: ListJobs) -> JobList:
        """The jobs of the table ``id`` names, or of every table in every namespace, newest first."""
        if request.id:
            jobs: JobList = self._run(request)
            return jobs
        from geneva_provider.operations import run

        found = [job for catalog in self._catalogs() for job in run(catalog, request).jobs]
        return JobList(jobs=sorted(found, key=lambda job: job.created_at, reverse=True))

    def cancel_job(self, request: CancelJob) -> JobInfo:
        return self._in_any_namespace(request)

    # ------------------------------------------------------------ helpers
    def catalog_for(self, table_id: Sequence[str]) -> Catalog:
        """The tables ``table_id`` is among: the root's for a name alone; for a longer id (``["lake", "docs"]``) the
        child namespace's, whose tables the inner namespace placed (found by its ``describe_table``)."""
        return self.catalog.of_table(table_id, self.inner)

    def _catalog_of(self, operation: Operation) -> Catalog:
        """Where ``operation``'s table is; a view and its source are in one namespace (InvalidArgumentError else)."""
        table_id = list(getattr(operation, "id", None) or [])
        if isinstance(operation, CreateView) and operation.source_query.id[:-1] != table_id[:-1]:
            raise InvalidArgumentError(f"create_materialized_view {table_id}: its source "
                                       f"{operation.source_query.id} is in another namespace; a view is created in "
                                       "the namespace of its source")
        return self.catalog_for(table_id) if table_id else self.catalog

    def _catalogs(self) -> Iterator[Catalog]:
        """The root's catalog, then every child namespace's, depth first (what the inner namespace lists)."""
        todo: list[list[str]] = [[]]
        while todo:
            path = todo.pop()
            yield self.catalog.child(path, self.inner)
            try:
                children = self.inner.list_namespaces(ln.ListNamespacesRequest(id=path)).namespaces
            except NotImplementedError:  # an inner namespace without child namespaces
                children = []
            todo.extend([*path, child] for child in reversed(children))

    def _in_any_namespace(self, request: GetJob | CancelJob) -> JobInfo:
        """``request`` run on the namespace whose tables hold its job; JobNotFoundError naming it otherwise."""
        from geneva_provider.operations import run

        for catalog in self._catalogs():
            try:
                info: JobInfo = run(catalog, request)
                return info
            except JobNotFoundError:
                continue
        raise JobNotFoundError(f"no job {request.job_id!r} in {self.catalog.uri} or its namespaces (or its records "
                               "were cleaned up)")

    def _run(self, operation: Operation) -> Any:
        from geneva_provider.operations import run

        return run(self._catalog_of(operation), operation)

    def _submit(self, operation: Operation) -> str:
        """The job of ``operation`` started on the configured runner, on its table's namespace; its id."""
        return self.runner.submit(operation, self._catalog_of(operation))

    def _by_run_id(self, run_id: str) -> Any:
        """The record of the job a DAG run ``run_id`` planned, if it has planned one."""
        return next((job for job in self.list_jobs(ListJobs()).jobs if job.airflow_run_id == run_id), None)


def _delegated(name: str) -> Any:
    def method(self: GenevaNamespace, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the inner namespace (``inner_impl``, default Lance's directory namespace)."
    return method


for _name in [n for n in vars(ln.LanceNamespace) if not n.startswith("_") and n not in SERVED]:
    setattr(GenevaNamespace, _name, _delegated(_name))
