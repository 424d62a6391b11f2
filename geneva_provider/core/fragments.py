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


def output_files(fragment_meta: Any, leaf_ids: list[int]) -> str | None:
    """The data files holding a job's output fields in a fragment (None when they are all NULL there).

    What a writer merged its file from: when it changes before the commit, someone else wrote the
    outputs meanwhile, and committing would erase their values.
    """
    return ";".join(files_holding(fragment_meta, leaf_ids)) or None


def live_row_addresses(fragment: Any) -> Any:
    """Row addresses of the fragment's live rows, in scan order (no data read)."""
    import numpy as np

    if not fragment.deletion_file():
        base = np.uint64(fragment.fragment_id) << np.uint64(32)
        return base + np.arange(fragment.physical_rows, dtype=np.uint64)
    return fragment.to_table(columns=[], with_row_address=True).column("_rowaddr").to_numpy()
