"""OpenLineage for the Geneva operators: one table dataset in and out, column edges, schema, statistics, versions.

Lineage tools (Marquez, DataHub, a cloud catalog) join datasets across tools by their OpenLineage name, so a job
reports its table under the naming spec's name for the table's URI (:func:`dataset_name`): a backfill reads and
writes the same dataset, a view's refresh (or creation) reads its source table and writes the view, a compaction,
an index build or a clean-up reads and writes its table, a sensor reads the table it waits on.  The facts come
from the plan summary (:class:`~geneva_provider.core.contracts.lineage_models.JobLineage`: each written column's
input columns and UDF, the filter's columns, the versions read), from what an operator did itself (the columns it
declared, the view it created), and from what the job committed (rows, files, bytes, the version after the last
commit: :class:`~geneva_provider.core.contracts.lineage_models.Committed`); never from the storage options, which
no event carries.

:class:`LineageMixin` gives every operator and sensor of the package the three methods the OpenLineage provider
calls (``get_openlineage_facets_on_start / on_complete / on_failure``); on failure the provider adds the error
facet.
The OpenLineage provider is optional: nothing here is imported until it calls those methods.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geneva_provider.core.contracts.lineage_models import Committed, JobLineage
    from geneva_provider.core.contracts.models import PlanSummary

_BUCKETS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "wasb", "wasbs", "oss", "hdfs")


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a table at ``uri``: ``file`` and the absolute path for a local table,
    ``s3://bucket`` (``gs://``, ``abfss://container@account``...) and the key path for an object store."""
    if "://" not in uri:
        return "file", os.path.abspath(uri).rstrip("/") or "/"
    scheme, _, rest = uri.partition("://")
    if scheme == "file":
        return "file", os.path.abspath(rest or "/").rstrip("/") or "/"
    authority, _, path = rest.partition("/")
    path = path.rstrip("/")
    if scheme in _BUCKETS:
        return f"{scheme}://{authority}", path
    return f"{scheme}://{authority}", f"/{path}"


def operator_lineage(lineage: JobLineage | None, committed: Committed | None = None) -> Any:
    """The job's ``OperatorLineage``: the input table at the version read and the output table, with its column
    lineage and schema (a column job's), and -- once committed -- its output statistics and the version
    committed.  A wait on a table (``reads_only``): the input alone.  No lineage: an empty one."""
    from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    if lineage is None:
        return OperatorLineage()
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

    source_ns, source_name = dataset_name(lineage.source_uri)
    source = InputDataset(namespace=source_ns, name=source_name, facets={} if lineage.source_version is None else {
        "version": DatasetVersionDatasetFacet(datasetVersion=str(lineage.source_version))})
    if lineage.reads_only:
        return OperatorLineage(inputs=[source])
    namespace, name = dataset_name(lineage.table_uri)
    facets: dict[str, Any] = {}
    if lineage.written:
        facets["schema"] = _schema(lineage)
    if lineage.edges or lineage.filter_columns or lineage.group_columns:
        facets["columnLineage"] = _column_lineage(lineage)
    output_facets: dict[str, Any] = {}
    if committed is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(committed.version))
        if committed.rows is not None or committed.bytes is not None or committed.files is not None:
            output_facets["outputStatistics"] = _statistics(committed)
    return OperatorLineage(inputs=[source], outputs=[OutputDataset(namespace=namespace, name=name, facets=facets,
                                                                   outputFacets=output_facets)])


def _column_lineage(lineage: JobLineage) -> Any:
    """Each written column from its input columns (``DIRECT``: the UDF's ``TRANSFORMATION``, a copy's
    ``IDENTITY``), and the filter's and grouping's columns (``INDIRECT``) for each and for the whole dataset."""
    from airflow.providers.common.compat.openlineage.facet import ColumnLineageDatasetFacet, Fields, InputField
    from openlineage.client.generated.column_lineage_dataset import Transformation

    namespace, name = dataset_name(lineage.source_uri)

    def indirect() -> list[Any]:
        return [InputField(namespace=namespace, name=name, field=column,
                           transformations=[Transformation(type="INDIRECT", subtype=subtype, description=label)])
                for columns, subtype, label in ((lineage.filter_columns, "FILTER", "where"),
                                                (lineage.group_columns, "GROUP_BY", "partition_by"))
                for column in columns]

    fields = {
        edge.column: Fields(
            inputFields=[*(InputField(namespace=namespace, name=name, field=column, transformations=[
                Transformation(type="DIRECT", subtype=str(edge.kind), description=edge.description)])
                for column in edge.inputs), *indirect()])
        for edge in lineage.edges}
    return ColumnLineageDatasetFacet(fields=fields, dataset=indirect())


def _schema(lineage: JobLineage) -> Any:
    from airflow.providers.common.compat.openlineage.facet import SchemaDatasetFacet, SchemaDatasetFacetFields

    return SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=c.name, type=c.type) for c in lineage.written])


def _statistics(committed: Committed) -> Any:
    from airflow.providers.common.compat.openlineage.facet import OutputStatisticsOutputDatasetFacet

    return OutputStatisticsOutputDatasetFacet(rowCount=committed.rows, size=committed.bytes,
                                              fileCount=committed.files)


class LineageMixin:
    """The OpenLineage provider's three methods, for every operator and sensor of the package.

    What an operator knows, first found first: the lineage it recorded while it ran (``_lineage``: the columns
    it declared, the view it created), its plan summary's (:meth:`lineage_plan`: the one it planned or read, or
    its ``plan`` argument), else :meth:`lineage_default` (its table, by name, before it ran); and what was
    committed (:meth:`lineage_written`, once known).  The events of a job's tasks then name the same datasets
    and columns.
    """

    _lineage: JobLineage | Callable[[], JobLineage] | None = None
    _committed: Committed | None = None
    lineage_reads_only = False  # a sensor: it reads the table it waits on, writes nothing

    def lineage_plan(self) -> PlanSummary | None:
        """The job's plan summary: the one the operator planned or read (``_summary``), else its ``plan``
        argument as rendered (None when it is not one yet)."""
        from geneva_provider.core.contracts.models import PlanSummary
        from geneva_provider.core.errors import InvalidArgumentError

        summary: PlanSummary | None = getattr(self, "_summary", None)
        if summary is not None:
            return summary
        plan = getattr(self, "plan", None)
        try:
            return PlanSummary.from_xcom(plan) if plan is not None else None
        except InvalidArgumentError:  # not rendered (an XComArg before the task ran): no lineage yet
            return None

    def lineage_written(self) -> Committed | None:
        """What the job committed, when this operator knows it (default: what it recorded, ``_committed``)."""
        return self._committed

    def record_lineage(self, lineage: JobLineage | Callable[[], JobLineage],
                       committed_version: int | None = None) -> None:
        """What the operator's own work read and wrote (and the version it committed), for its events; a
        callable is called when an event asks (the table it reads is opened then, not in the task's work)."""
        from geneva_provider.core.contracts.lineage_models import Committed

        self._lineage = lineage
        if committed_version is not None:
            self._committed = Committed(version=committed_version)

    def lineage_tables(self) -> tuple[str, str] | None:
        """The (source, output) table names of the operator's job, for :meth:`lineage_default` (default: its
        ``table`` read and written; None: no table named yet)."""
        table = getattr(self, "table", None)
        return (table, table) if isinstance(table, str) else None

    def lineage_default(self) -> JobLineage | None:
        """The operator's tables by URI (a table it creates: where it will be), before it ran (no version read)."""
        from geneva_provider.core.contracts.lineage_models import JobLineage
        from geneva_provider.hooks.lance import LanceHook

        tables = self.lineage_tables()
        if tables is None:
            return None
        catalog = LanceHook(getattr(self, "lance_conn_id", LanceHook.default_conn_name)).database.catalog
        source, output = (catalog.location(t) for t in tables)
        if source is None or output is None:  # a table a namespace has not placed yet: named once it exists
            return None
        return JobLineage(source_uri=source, source_version=None, table_uri=output, reads_only=self.lineage_reads_only)

    def _operator_lineage(self) -> Any:
        lineage = self._lineage() if callable(self._lineage) else self._lineage
        if lineage is None:
            plan = self.lineage_plan()
            lineage = plan.lineage if plan is not None else None
        return operator_lineage(lineage if lineage is not None else self.lineage_default(), self.lineage_written())

    def get_openlineage_facets_on_start(self) -> Any:
        return self._operator_lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._operator_lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._operator_lineage()


def inject_parent_job_info(conf: dict[str, Any], context: Any) -> dict[str, Any]:
    """``conf`` with the OpenLineage parent job properties of this task (``spark.openlineage.parentJobName``,
    ``parentRunId``, ...), as ``SparkSubmitOperator(openlineage_inject_parent_job_info=True)`` adds them: the
    OpenLineage Spark listener of the stage's application then names this task as its parent."""
    from airflow.providers.common.compat.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
    )

    return inject_parent_job_information_into_spark_properties(dict(conf), context)
