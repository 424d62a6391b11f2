"""Creating a chunker or batch-UDTF view: an empty Lance table with its schema and metadata, no UDTF run.

Every check a user can get wrong -- the source's row ids, the query's shape, the UDTF's input and
partition columns, output names that clash with carried ones, the view's name -- is made here, before
anything is written or any Spark starts.  The first refresh expands the rows.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from geneva_provider.core.catalog import Catalog
from geneva_provider.core.column_names import user_columns
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.filters import check_where
from geneva_provider.core.functions.udtf import UDTF, UDTFKind
from geneva_provider.core.refs import TableRef
from geneva_provider.core.views.meta import ViewQuery
from geneva_provider.core.views.udtf_meta import UdtfViewSpec, udtf_view_metadata

log = logging.getLogger(__name__)


def create_udtf_view(catalog: Catalog, name: str, source: TableRef, query: ViewQuery, fn: UDTF, *,
                     max_rows_per_fragment: int | None = None, source_version: int | None = None) -> TableRef:
    """Creates view ``name`` of ``fn`` over ``query`` on ``source`` (empty: ``refresh()`` expands it); of
    ``source_version`` and pinned to it when given (a checked-out handle's query), else of the latest."""
    if not isinstance(fn, UDTF):
        raise UDFDefinitionError(f"create_udtf_view '{name}': udtf must be a @chunker or @udtf function, got {fn!r}")
    subject = f"view '{name}' of {fn.label}"
    if catalog.exists(name):
        raise InvalidArgumentError(f"{subject}: table '{name}' already exists in {catalog.uri}; choose another name "
                                   "or drop it first")
    if max_rows_per_fragment is not None and (not isinstance(max_rows_per_fragment, int)
                                              or isinstance(max_rows_per_fragment, bool) or max_rows_per_fragment <= 0):
        raise InvalidArgumentError(f"{subject}: max_rows_per_fragment must be a positive integer, got "
                                   f"{max_rows_per_fragment!r}")
    if query.udf_columns:
        raise InvalidArgumentError(f"{subject}: the source query selects UDF columns {list(query.udf_columns)}; "
                                   "add UDF columns to the view itself after creating it (view.add_columns)")
    shaped = [k for k, v in (("shuffle", query.shuffle), ("limit", query.limit), ("offset", query.offset)) if v]
    if shaped:
        raise InvalidArgumentError(f"{subject}: {', '.join(shaped)} is not supported on a UDTF view's source query "
                                   "(only where and select)")
    src = source.dataset(source_version)
    if not src.has_stable_row_ids:
        raise InvalidArgumentError(f"{subject}: source table '{source.name}' has no stable row ids, so its rows "
                                   "cannot be followed across updates and compaction; create it with "
                                   "stable_row_ids=True")
    check_where(src, query.where, f"{subject} on table '{source.name}'")
    names = src.schema.names
    listed = user_columns(names)  # what an error names
    default = [c for c in listed if not c.startswith("__")]  # what no select means: no view column starts "__"

    def need(column: str, role: str) -> None:
        if column not in names:
            raise ColumnError(f"{subject}: {role} '{column}' is not a column of table '{source.name}' "
                              f"(columns: {listed})")

    if fn.kind is UDTFKind.CHUNKER:
        inputs = list(fn.input_columns or [])
        carried = dict(query.columns) if query.columns else {c: c for c in default}
        if not fn.inherit_input_columns:  # the inputs are read to call the chunker, not copied onto its rows
            carried = {out: src for out, src in carried.items() if src not in inputs}
    else:  # N:M rows have no single parent: nothing is carried, the selection is the UDTF's input
        carried = {}
        inputs = list(fn.input_columns) if fn.input_columns is not None else (
            list(query.columns.values()) if query.columns else default)
    for column in inputs:
        need(column, "input column")
    if fn.partition_by is not None:
        need(fn.partition_by, "partition_by column")
    clash = [c for c in fn.output_schema.names if c in carried]
    if clash:
        raise InvalidArgumentError(f"{subject}: output column(s) {clash} clash with source columns the view "
                                   f"carries {list(carried)}; select the source columns to carry "
                                   "(.select([...])) or rename them (.select({'new_name': 'column'}))")
    spec = UdtfViewSpec(kind=fn.kind, base_table=source.name, base_table_db_uri=catalog.uri, where=query.where,
                        columns=carried, udtf=fn.name, version=fn.version, input_columns=inputs,
                        partition_by=fn.partition_by, max_rows_per_fragment=max_rows_per_fragment)
    fields = [pa.field(out, src.schema.field(col).type, nullable=True) for out, col in carried.items()]
    schema = pa.schema([*fields, *fn.output_schema, *spec.reserved_fields()],
                       metadata=udtf_view_metadata(spec, fn.pickled_b64(), source_version))
    write_options: dict[str, Any] = {"enable_stable_row_ids": True}
    if max_rows_per_fragment:
        write_options["max_rows_per_file"] = max_rows_per_fragment
    try:
        view = catalog.create(name, schema.empty_table(), **write_options)
    except (OSError, ValueError, TypeError) as exc:
        if isinstance(exc, InvalidArgumentError):
            raise
        raise UDFDefinitionError(f"{subject}: its columns {[f'{f.name}: {f.type}' for f in schema]} cannot be "
                                 f"stored by Lance: {exc}") from None
    log.info("%s created over table '%s' (version %d): refresh it to expand the rows", subject, source.name,
             src.version)
    return view
