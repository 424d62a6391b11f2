"""Creating a materialized view: placeholders and metadata, no UDF run.

The view table gets one row per matching source row -- its ``__source_row_id`` (the source's
stable row id; a row address when the source has none) -- in the query's order; the view
columns and ``__is_set`` start as all-NULL virtual columns, filled by the first refresh.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from geneva_provider.core.catalog import Catalog
from geneva_provider.core.errors import InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.filters import check_where
from geneva_provider.core.fingerprints import fingerprint_field
from geneva_provider.core.refs import TableRef
from geneva_provider.core.views.meta import IS_SET, SOURCE_ROW_ID, ViewQuery, view_metadata
from geneva_provider.pipeline.schema_changes import UpdateColumns

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

log = logging.getLogger(__name__)


def create_view(catalog: Catalog, name: str, source: TableRef, query: ViewQuery, *,
                max_rows_per_fragment: int | None = None, source_version: int | None = None) -> TableRef:
    """Creates view ``name`` in ``catalog`` over ``source`` (placeholders only: refresh computes it).

    ``source_version`` (a query of a handle checked out at it): the view is made of that version and pinned to it --
    a refresh without a version refreshes at the one it holds -- else of the latest, which its refreshes follow.
    """
    if not query.columns and not query.udf_columns:
        raise InvalidArgumentError(f"view '{name}': the query selects no columns; call .select(...)")
    if max_rows_per_fragment is not None and (not isinstance(max_rows_per_fragment, int)
                                              or isinstance(max_rows_per_fragment, bool) or max_rows_per_fragment <= 0):
        raise InvalidArgumentError(f"view '{name}': max_rows_per_fragment must be a positive integer, got "
                                   f"{max_rows_per_fragment!r}")
    if catalog.exists(name):
        raise InvalidArgumentError(f"table '{name}' already exists in {catalog.uri}")
    src = source.dataset(source_version)
    check_where(src, query.where, f"view '{name}' on table '{source.name}'")
    stable = bool(src.has_stable_row_ids)
    if not stable:
        warnings.warn(f"source table '{query.base_table}' has no stable row ids: view '{name}' stores row "
                      "addresses (format 1) and can only be refreshed at the source version it was created from; "
                      "create the source with stable_row_ids=True for incremental refreshes", stacklevel=3)
    ids, next_id = matching_row_ids(src, query.where, stable)
    ids = query.stored().rows(ids)

    metadata = view_metadata(query, src.version, stable, next_id, pinned=source_version is not None)
    # Only __source_row_id is written; the view columns and __is_set start as all-NULL virtual
    # columns (NULL __is_set: not refreshed yet), so a refresh lands them as one new file per fragment.
    schema = pa.schema([pa.field(SOURCE_ROW_ID, pa.int64(), nullable=False)], metadata=metadata)
    placeholders = pa.table({SOURCE_ROW_ID: pa.array(ids, pa.int64())}, schema=schema)
    write_options: dict[str, Any] = {"enable_stable_row_ids": True}
    if max_rows_per_fragment:
        write_options["max_rows_per_file"] = max_rows_per_fragment
    fields = [pa.field(out, src.schema.field(col).type, nullable=True) for out, col in query.columns.items()]
    for out, (fn, inputs) in query.udf_columns.items():
        try:
            fields.append(fn.field(out, inputs))
        except UDFDefinitionError as exc:
            raise UDFDefinitionError(f"view '{name}' column '{out}': {exc}") from None
    view = catalog.create(name, placeholders, **write_options)
    try:
        UpdateColumns(view, subject=f"view '{name}'").add_fields([
            *fields, *(fingerprint_field(c) for c in query.udf_columns), pa.field(IS_SET, pa.bool_(), nullable=True),
            fingerprint_field(None)]).commit()
    except BaseException:
        catalog.drop(name)  # no half-made view is left behind
        raise
    log.info("view '%s': %d placeholder rows from table '%s' version %d (format %s)", name, len(ids),
             query.base_table, src.version, "2" if stable else "1")
    return view


def matching_row_ids(ds: Dataset, where: str | None, stable: bool) -> tuple[np.ndarray, int]:
    """Row ids (stable) or addresses of the rows matching ``where``; and the next row id."""
    ids = ds.to_table(columns=[], filter=where, with_row_id=True).column("_rowid").to_numpy().astype(np.int64)
    all_ids = ds.to_table(columns=[], with_row_id=True).column("_rowid").to_numpy()
    next_id = int(all_ids.max()) + 1 if stable and len(all_ids) else 0
    return ids, next_id
