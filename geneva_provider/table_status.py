"""Cheap, metadata-only facts about a table that sensors and triggers poll."""

from __future__ import annotations

from typing import Any

from geneva_provider.fragments import leaf_field_ids


def table_status(ds: Any) -> dict[str, int]:
    """Version, live rows and fragments of a dataset (no data is read)."""
    fragments = ds.get_fragments()
    return {"version": ds.version, "rows": sum(f.count_rows() for f in fragments), "fragments": len(fragments)}


def column_backlog(ds: Any, column: str) -> dict[str, int]:
    """Fragments (and their live rows) in which ``column`` has never been written.

    A fragment counts as done once it holds a data file for the column, which is what a
    backfill commits; rows a filtered backfill left out are not counted.
    """
    if column not in ds.schema.names:
        raise KeyError(f"column '{column}' not found (columns: {ds.schema.names})")
    leaves = leaf_field_ids(ds.lance_schema.field(column))
    pending = [f for f in ds.get_fragments()
               if not any(set(leaves) <= set(df.fields) for df in f.metadata.files)]
    return {"version": ds.version, "fragments_pending": len(pending),
            "rows_pending": sum(f.count_rows() for f in pending)}
