"""A job's lineage from what its planner holds (core): the UDF and its inputs, a view's query, the schemas.

One builder per kind of job that writes columns -- a backfill, a query view's refresh (or its creation), a chunker
or batch-UDTF view's refresh, a declaration or revision of columns -- each returning a
:class:`~geneva_provider.core.contracts.lineage_models.JobLineage` that the plan summary (or the operator that
did the work) carries to the Airflow surface, which reports it as OpenLineage facets.
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
from geneva_provider.core.functions.udf import udf_column_info


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


def query_view_lineage(source_uri: str, source_version: int, source_names: Sequence[str], view_uri: str,
                       view_schema: Any, query: Any) -> JobLineage:
    """A query view (its stored query: copied columns, UDF columns, filter) from its source at ``source_version``."""
    return view_lineage(source_uri, source_version, source_names, view_uri, view_schema, query.columns,
                        {c: (u.input_columns, udf_description("UDF", u.udf, u.version))
                         for c, u in query.udf_columns.items()}, query.where)


def declared_lineage(table_uri: str, version: int | None, schema: Any, columns: Sequence[str],
                     renamed: Mapping[str, str] | None = None) -> JobLineage:
    """Columns declared or revised on a table (``add_columns`` / ``alter_columns``), in its ``schema`` after the
    change: a UDF column from its UDF's input columns, a renamed column (new name -> old) from its old name."""
    renamed = renamed or {}
    edges = []
    for column in columns:
        info = udf_column_info(schema.field(column).metadata) if column in schema.names else None
        if info is not None:
            edges.append(ColumnEdge(column=column, inputs=list(info.input_columns or []), kind=EdgeKind.TRANSFORMATION,
                                    description=udf_description("UDF", info.name, info.version)))
        elif column in renamed:
            edges.append(ColumnEdge(column=column, inputs=[renamed[column]], kind=EdgeKind.IDENTITY,
                                    description=f"renamed from column {renamed[column]}"))
    return JobLineage(source_uri=table_uri, source_version=version, table_uri=table_uri, edges=edges,
                      written=written(schema, columns))


def written(schema: Any, columns: Sequence[str]) -> list[WrittenColumn]:
    """The written ``columns`` with their Arrow types, in the order of ``schema`` (the table's, as a user reads it)."""
    wanted = set(columns)
    return [WrittenColumn(name=f.name, type=str(f.type)) for f in schema if f.name in wanted]
