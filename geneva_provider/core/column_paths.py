"""Input columns by dot path: ``input_columns=["info.vals"]`` reads field ``vals`` of struct column ``info`` (core).

The reference reads a struct's field as a UDF input by its dotted path.  A path is resolved the same way
everywhere -- when a UDF column is added (does it exist?), when a column is dropped or renamed (who reads
it?), when rows are read (Lance's scans name the column ``info.vals``, its takes return ``info`` pruned
to the field) and when inputs are fingerprinted -- so this is the one place that knows it.  A top-level
column whose own name holds a dot is that column: an exact name wins over a path.

A row whose struct is NULL has a NULL field, as Spark and the reference read it.  The fingerprint of a
path's input is that of the field's values alone, so updating another field of the struct leaves the
values computed from this one valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc


def path_root(names: Iterable[str], path: str) -> str:
    """The top-level column ``path`` reads: itself when a column has that name, else its first segment."""
    return path if path in set(names) else path.split(".", 1)[0]


def path_type(schema: pa.Schema, path: str) -> pa.DataType | None:
    """The Arrow type of the column or struct field ``path`` names in ``schema``; None when it names none."""
    if path in schema.names:
        return schema.field(path).type
    head, *rest = path.split(".")
    if not rest or head not in schema.names:
        return None
    t = schema.field(head).type
    for name in rest:
        if not pa.types.is_struct(t) or t.get_field_index(name) < 0:
            return None
        t = t.field(name).type
    return t


def missing_paths(schema: pa.Schema, paths: Sequence[str]) -> list[str]:
    """The paths of ``paths`` that name no column or struct field of ``schema``, in order."""
    return [p for p in paths if path_type(schema, p) is None]


def reads_column(paths: Iterable[str], names: Iterable[str], columns: Iterable[str]) -> list[str]:
    """The paths of ``paths`` that read any of ``columns`` (the column itself or a field of it)."""
    wanted, names = set(columns), list(names)
    return [p for p in paths if path_root(names, p) in wanted]


def path_column(rows: pa.Table | pa.RecordBatch, path: str) -> pa.Array | pa.ChunkedArray:
    """The values of ``path`` in ``rows``: the column of that name, else the struct field reached through its
    root column (NULL where a struct on the way is NULL); KeyError naming the path when there is none."""
    if path in rows.column_names:
        return rows.column(path)
    head, *rest = path.split(".")
    if not rest or head not in rows.column_names:
        raise KeyError(f"no column or struct field '{path}' among {rows.column_names}")
    values: pa.Array | pa.ChunkedArray = rows.column(head)
    for name in rest:
        values = pc.struct_field(values, name)
    return values


def select_paths(rows: pa.Table, paths: Sequence[str]) -> pa.Table:
    """A table of one column per path, named by the path: the shape every reader of UDF inputs gets, whether
    Lance returned ``info.vals`` flattened (a scan) or ``info`` pruned to the field (a take)."""
    if list(rows.column_names) == list(paths):
        return rows
    return pa.table({p: path_column(rows, p) for p in paths}) if paths else rows.select([])
