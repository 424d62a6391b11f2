"""Facts about Lance fragments and field ids that the planner, writer and sensors agree on (core).

Which data files hold which fields decides whether a checkpoint is still valid, so it
lives in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def leaf_field_ids(lance_field: Any) -> list[int]:
    """Leaf field ids of a column: what ``DataFile.fields`` must list (file format 2.1+)."""
    kids = lance_field.children()
    if not kids:
        return [lance_field.id()]
    out: list[int] = []
    for k in kids:
        out.extend(leaf_field_ids(k))
    return out


def column_field_ids(ds: Any, column: str) -> list[int]:
    """Every field id of a column, itself and nested children."""
    def walk(f: Any) -> list[int]:
        ids = [f.id()]
        for k in f.children():
            ids.extend(walk(k))
        return ids

    return walk(ds.lance_schema.field(column))


def files_holding(fragment_meta: Any, field_ids: Iterable[int]) -> list[str]:
    """Paths of the fragment's data files that store any of ``field_ids``, sorted."""
    wanted = set(field_ids)
    return sorted(df.path for df in fragment_meta.files if wanted.intersection(df.fields))


def column_file(fragment_meta: Any, leaf_ids: list[int]) -> str | None:
    """The data file holding exactly this column's leaves, or None if the column is all NULL here."""
    for df in fragment_meta.files:
        if sorted(df.fields) == sorted(leaf_ids):
            return df.path
    return None


def deletion_marker(fragment: Any) -> str:
    """Identifies the fragment's set of live rows (its deletion file), '' when nothing is deleted."""
    return fragment.deletion_file() or ""
