"""Cheap, metadata-only facts about a table that sensors and triggers poll (core)."""

from __future__ import annotations

from typing import Any

from geneva_provider.core.errors import ColumnError
from geneva_provider.core.fragments import leaf_field_ids


def table_status(ds: Any) -> dict[str, int]:
    """Version, live rows and fragments of a dataset (no data is read)."""
    fragments = ds.get_fragments()
    return {"version": ds.version, "rows": sum(f.count_rows() for f in fragments), "fragments": len(fragments)}


def column_backlog(ds: Any, column: str, table: str = "") -> dict[str, int]:
    """Fragments (and their live rows) in which ``column`` has never been written.

    A fragment counts as done once it holds a data file for the column, which is what a
    backfill commits; rows a filtered backfill left out are not counted.
    """
    if column not in ds.schema.names:
        raise ColumnError(f"column '{column}' not found in table '{table or ds.uri}' (columns: {ds.schema.names})")
    leaves = leaf_field_ids(ds.lance_schema.field(column))
    pending = [f for f in ds.get_fragments()
               if not any(set(leaves) <= set(df.fields) for df in f.metadata.files)]
    return {"version": ds.version, "fragments_pending": len(pending),
            "rows_pending": sum(f.count_rows() for f in pending)}


def table_changed(ds: Any, min_version: int | None, min_rows: int | None, column: str | None,
                  table: str = "") -> dict[str, Any] | None:
    """The table's status once it moved past the watermark, else None.

    Watermarks: a version above ``min_version``, more than ``min_rows`` rows, or rows whose
    ``column`` was never computed (new data since the last backfill).
    """
    status: dict[str, Any] = table_status(ds)
    changed = ((min_version is not None and status["version"] > min_version)
               or (min_rows is not None and status["rows"] > min_rows))
    if column is not None:
        backlog = column_backlog(ds, column, table)
        status.update(column=column, rows_pending=backlog["rows_pending"],
                      fragments_pending=backlog["fragments_pending"])
        changed = changed or backlog["fragments_pending"] > 0
    return status if changed else None
