"""A job's lineage from what its planner holds (core): the UDF and its inputs, a view's query, the schemas.

One builder per kind of job that writes columns -- a backfill, a query view's refresh, a chunker or batch-UDTF
view's refresh -- each returning a :class:`~geneva_provider.core.contracts.lineage_models.JobLineage` that the
plan summary carries to the Airflow surface, which reports it as OpenLineage facets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from geneva_provider.core.contracts.lineage_models import (
    ColumnEdge,
    EdgeKind,
    JobLineage,
    WrittenColumn,
    udf_description,
)
from geneva_provider.core.filters import filter_columns


def backfill_lineage(table_uri: str, version: int, schema: Any, outputs: Sequence[str], inputs: Sequence[str],
                     udf: tuple[str, str], where: str | None) -> JobLineage:
    """A backfill: the table read and written at ``version``, each output column computed by the UDF
    (``(name, version)``) from ``inputs``, the rows chosen by ``where``."""
    description = udf_description("UDF", *udf)
    return JobLineage(source_uri=table_uri, source_version=version, table_uri=table_uri,
                      edges=[ColumnEdge(column=c, inputs=list(inputs), kind=EdgeKind.TRANSFORMATION,
                                        description=description) for c in outputs],
                      filter_columns=filter_columns(where, schema.names), written=written(schema, outputs))


def view_lineage(source_uri: str, source_version: int, source_names: Sequence[str], view_uri: str, view_schema: Any,
                 copied: Mapping[str, str], computed: Mapping[str, tuple[Sequence[str], str]],
                 where: str | None, *, group_by: str | None = None) -> JobLineage:
    """A view's refresh: ``copied`` view columns from their source columns, ``computed`` ones (column ->
    (input columns, description)) by a function, the source rows chosen by ``where`` (and grouped by
    ``group_by``, a batch UDTF's partition key)."""
    edges = [ColumnEdge(column=c, inputs=[s], kind=EdgeKind.IDENTITY, description=f"copied from column {s}")
             for c, s in copied.items()]
    edges += [ColumnEdge(column=c, inputs=list(inputs), kind=EdgeKind.TRANSFORMATION, description=description)
              for c, (inputs, description) in computed.items()]
    return JobLineage(source_uri=source_uri, source_version=source_version, table_uri=view_uri, edges=edges,
                      filter_columns=filter_columns(where, source_names),
                      group_columns=[group_by] if group_by else [],
                      written=written(view_schema, [e.column for e in edges]))


def written(schema: Any, columns: Sequence[str]) -> list[WrittenColumn]:
    """The written ``columns`` with their Arrow types, in the order of ``schema`` (the table's, as a user reads it)."""
    wanted = set(columns)
    return [WrittenColumn(name=f.name, type=str(f.type)) for f in schema if f.name in wanted]
