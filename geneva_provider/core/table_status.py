"""Cheap facts about a table that the probes of sensors and triggers read (core).

What a poll may read: the manifest (versions, fragments, data files) and, for a computed column,
its fingerprint column -- one uint64 per row, and only in the fragments that hold the column.
Never the UDF's inputs: telling whether a computed value is stale (its inputs were updated since)
takes fingerprinting every input row, which is the next backfill's plan, not a poll.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from geneva_provider.core.column_names import user_columns
from geneva_provider.core.errors import ColumnError
from geneva_provider.core.fingerprints import fingerprint_column
from geneva_provider.core.fragments import column_leaf_ids, files_holding
from geneva_provider.core.views.meta import META_QUERY

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


class TableStatus(BaseModel):
    """A table's version, live rows and fragments."""

    version: int
    rows: int
    fragments: int


class ColumnBacklog(BaseModel):
    """Rows of a table (and the fragments holding them) whose column was never computed, at a version."""

    version: int
    fragments_pending: int
    rows_pending: int


def table_status(ds: Dataset) -> TableStatus:
    """Version, live rows and fragments of a dataset (no data is read)."""
    fragments = ds.get_fragments()
    return TableStatus(version=ds.version, rows=sum(f.count_rows() for f in fragments), fragments=len(fragments))


def column_backlog(ds: Dataset, column: str, table: str = "") -> ColumnBacklog:
    """Rows (and the fragments holding them) whose ``column`` has never been computed.

    A row is pending when its fragment holds no data file for the column (rows added since the
    last backfill), or when its fingerprint is NULL: every computed row has one, so a NULL marks a
    row a ``where`` left out or an error policy skipped -- the rows a backfill's plan computes,
    except those whose inputs changed after they were computed (see the module docstring).
    Tables made before fingerprints existed have none until their next backfill: there, only
    fragments without the column count.
    """
    if column not in ds.schema.names:
        raise ColumnError(f"column '{column}' not found in table '{table or ds.uri}' "
                          f"(columns: {user_columns(ds.schema.names)})")
    leaves = column_leaf_ids(ds, column)
    fp = _fingerprint_of(ds, column)
    fp_leaves = column_leaf_ids(ds, fp) if fp else []
    fragments = rows = 0
    for frag in ds.get_fragments():
        if not any(set(leaves) <= set(df.fields) for df in frag.metadata.files):
            pending = frag.count_rows()
        elif fp is None:
            continue
        elif not files_holding(frag.metadata, fp_leaves):  # the values were written without fingerprints
            pending = frag.count_rows()
        else:
            pending = frag.count_rows(filter=f"`{fp}` IS NULL")
        fragments += pending > 0
        rows += pending
    return ColumnBacklog(version=ds.version, fragments_pending=fragments, rows_pending=rows)


def _fingerprint_of(ds: Dataset, column: str) -> str | None:
    """The fingerprint column of ``column``: a view's row fingerprint (NULL until the row is refreshed), else
    the column's own (None on older tables)."""
    names = ds.schema.names
    if META_QUERY.encode() in (ds.schema.metadata or {}) and fingerprint_column(None) in names:
        return fingerprint_column(None)
    if fingerprint_column(column) in names:
        return fingerprint_column(column)
    return None

