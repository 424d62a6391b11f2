"""Cheap facts about a table that the probes of sensors and triggers read (core).

What a poll may read: the manifest (versions, fragments, data files) and, for a computed column,
its fingerprint column -- one uint64 per row, and only in the fragments that hold the column.
Never the UDF's inputs: telling whether a computed value is stale (its inputs were updated since)
takes fingerprinting every input row, which is the next backfill's plan, not a poll.  That read is
``Table.status()`` (a :class:`TableReport`), asked for by a person or the command line, never by a poll.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, computed_field

from geneva_provider.core.column_names import user_columns
from geneva_provider.core.contracts.index_models import IndexStats
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


class ColumnState(BaseModel):
    """A UDF column's rows by the state of their values: valid, stale (inputs updated since) or missing."""

    column: str
    rows_valid: int    # the stored fingerprint equals that of the row's current inputs
    rows_stale: int    # a stored fingerprint that differs: the value is old until the next backfill
    rows_missing: int  # never computed (no fingerprint: a new row, a ``where`` left it out, a skipped error)
    expression: str | None = None  # a computed column's SQL expression (``computed("a * 2")``)


class ViewLag(BaseModel):
    """How far a view is behind its source: the version it was refreshed from against the source's latest.

    The rows counts are of the whole source (a view's filter is not applied); None when the source cannot say
    (no stable row ids, or the refreshed version was cleaned up, for deleted rows).
    """

    source: str
    source_version: int | None  # None: never refreshed
    source_latest: int
    rows_created: int | None
    rows_updated: int | None
    rows_deleted: int | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rows_behind(self) -> int | None:
        """Source rows created, updated or deleted since the view's source version."""
        parts = (self.rows_created, self.rows_updated, self.rows_deleted)
        return None if None in parts else sum(p or 0 for p in parts)


class TableReport(BaseModel):
    """What ``Table.status()`` says of a table: its version and rows, its UDF columns' states, a view's lag, and
    each index's rows indexed and unindexed."""

    table: str
    version: int
    rows: int
    columns: list[ColumnState] = []
    view: ViewLag | None = None
    indexes: list[IndexStats] = []

    def __str__(self) -> str:
        lines = [f"table {self.table}: version {self.version}, {self.rows:,} rows"]
        if self.columns:
            lines.append(format_rows(["column", "valid", "stale", "missing"],
                                     [[c.column, c.rows_valid, c.rows_stale, c.rows_missing] for c in self.columns]))
        if self.view is not None:
            v = self.view
            at = "never refreshed" if v.source_version is None else f"at source version {v.source_version}"
            lines.append(f"view of {v.source}: {at}, source latest {v.source_latest}; rows behind: "
                         f"{_count(v.rows_behind)} ({_count(v.rows_created)} created, {_count(v.rows_updated)} "
                         f"updated, {_count(v.rows_deleted)} deleted)")
        if self.indexes:
            lines.append(format_rows(["index", "type", "columns", "indexed", "unindexed", "segments", "partitions"],
                                     [[i.name, i.index_type, ",".join(i.columns), i.num_indexed_rows,
                                       i.num_unindexed_rows, i.num_segments, i.num_partitions]
                                      for i in self.indexes]))
        return "\n".join(lines)


def _count(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


def format_rows(header: list[str], rows: list[list[object]]) -> str:
    """Rows as a plain text table: columns padded to their widest cell, numbers right-aligned."""
    cells = [header, *[["" if v is None else f"{v:,}" if isinstance(v, int) else str(v) for v in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [bool(rows) and all(isinstance(r[i], int) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric, strict=True))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


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

