"""Facts about Lance fragments and field ids that the planner, writer and sensors agree on (core).

Which data files hold which fields decides whether a checkpoint is still valid, so it
lives in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, Field, Fragment, FragmentMeta, RowAddresses


def leaf_field_ids(lance_field: Field) -> list[int]:
    """Leaf field ids of a column: what ``DataFile.fields`` must list (file format 2.1+)."""
    kids = lance_field.children()
    if not kids:
        return [lance_field.id()]
    out: list[int] = []
    for k in kids:
        out.extend(leaf_field_ids(k))
    return out


def column_field(ds: Dataset, column: str) -> Field:
    """The Lance field of ``column``; LookupError naming it when the dataset has no such column."""
    found = ds.lance_schema.field(column)
    if found is None:
        raise LookupError(f"column '{column}' not found in {ds.uri} at version {ds.version}")
    return found


def column_leaf_ids(ds: Dataset, column: str) -> list[int]:
    """Leaf field ids of ``column`` in ``ds`` (see :func:`leaf_field_ids`)."""
    return leaf_field_ids(column_field(ds, column))


def column_field_ids(ds: Dataset, column: str) -> list[int]:
    """Every field id of a column, itself and nested children."""
    def walk(f: Field) -> list[int]:
        ids = [f.id()]
        for k in f.children():
            ids.extend(walk(k))
        return ids

    return walk(column_field(ds, column))


def fragment_of(ds: Dataset, fragment_id: int) -> Fragment:
    """Fragment ``fragment_id`` of ``ds``; LookupError when the dataset (at its version) has no such fragment."""
    found = ds.get_fragment(fragment_id)
    if found is None:
        raise LookupError(f"fragment {fragment_id} not found in {ds.uri} at version {ds.version}")
    return found


def data_file_path(data_file: Any) -> str:
    """A Lance ``DataFile``'s path.

    pylance 14's ``DataFile.path`` property defines a class on every call (a ``str`` subclass kept callable for
    backwards compatibility), ~0.1 ms each: the plan, the commit and verify of a job over thousands of fragments
    read it thousands of times.  The plain string it wraps is read when it is there.
    """
    path = getattr(data_file, "_path", None)
    return path if isinstance(path, str) else str(data_file.path)


def files_holding(fragment_meta: FragmentMeta, field_ids: Iterable[int]) -> list[str]:
    """Paths of the fragment's data files that store any of ``field_ids``, sorted."""
    wanted = set(field_ids)
    return sorted(data_file_path(df) for df in fragment_meta.files if not wanted.isdisjoint(df.fields))


def output_files(fragment_meta: FragmentMeta, leaf_ids: list[int]) -> str | None:
    """The data files holding a job's output fields in a fragment (None when they are all NULL there).

    What a writer merged its file from: when it changes before the commit, someone else wrote the
    outputs meanwhile, and committing would erase their values.
    """
    return ";".join(files_holding(fragment_meta, leaf_ids)) or None


def live_row_addresses(fragment: Fragment) -> RowAddresses:
    """Row addresses of the fragment's live rows, in scan order (no data read)."""
    import numpy as np

    if not fragment.deletion_file():
        base = np.uint64(fragment.fragment_id) << np.uint64(32)
        return base + np.arange(fragment.physical_rows, dtype=np.uint64)
    return fragment.to_table(columns=[], with_row_address=True).column("_rowaddr").to_numpy()
