"""A table's primary key: the columns that identify its rows, as Lance records them (core, plain data).

``create_table(..., primary_key="id")`` (the reference passes it on to LanceDB) declares the columns whose
values name a row: what an upsert matches rows on.  Lance keeps the declaration in the schema, as its
*unenforced primary key* (field metadata ``lance-schema:unenforced-primary-key``, the fields not
nullable), and its own ``merge_insert`` then matches on those columns when no ``on`` is given.  Checked
at creation, before anything is written: each key column exists, holds plain values (no lists or
structs), and the rows given have no NULL and no duplicate key.  Later writes are not checked for
duplicates (Lance does not enforce the key: "unenforced"); a NULL key is refused by the schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    import pyarrow as pa

PRIMARY_KEY_META = "lance-schema:unenforced-primary-key"


def key_columns(primary_key: Any, what: str) -> list[str]:
    """``primary_key`` (a column name or a list of them) as a list; InvalidArgumentError naming the value."""
    keys = [primary_key] if isinstance(primary_key, str) else primary_key
    if not isinstance(keys, Sequence) or isinstance(keys, bytes) or not keys or not all(
            isinstance(k, str) and k.strip() for k in keys):
        raise InvalidArgumentError(f"{what}: primary_key must be a column name or a list of column names, got "
                                   f"{primary_key!r}")
    if len(set(keys)) != len(keys):
        raise InvalidArgumentError(f"{what}: primary_key names a column twice: {list(keys)}")
    return list(keys)


def keyed(rows: pa.Table, keys: list[str], what: str) -> pa.Table:
    """``rows`` with ``keys`` declared its primary key; InvalidArgumentError naming the column at fault."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for key in keys:
        if key not in rows.column_names:
            raise InvalidArgumentError(f"{what}: primary_key column '{key}' is not a column of the table "
                                       f"(columns: {rows.column_names})")
        kind = rows.schema.field(key).type
        if pa.types.is_nested(kind):
            raise InvalidArgumentError(f"{what}: primary_key column '{key}' is of type {kind}; a key holds plain "
                                       "values (integers, strings, ...), not lists or structs")
        nulls = rows.column(key).null_count
        if nulls:
            raise InvalidArgumentError(f"{what}: primary_key column '{key}' holds {nulls} NULL value(s); every row "
                                       "needs a key")
    if rows.num_rows:
        counts = rows.select(keys).group_by(keys).aggregate([([], "count_all")])
        repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
        if repeated.num_rows:
            first = {k: repeated.column(k)[0].as_py() for k in keys}
            raise InvalidArgumentError(f"{what}: primary_key {keys} repeats: {repeated.num_rows} key(s) name more "
                                       f"than one row, e.g. {first} ({repeated.column('count_all')[0].as_py()} rows)")
    fields = [f.with_nullable(False).with_metadata({**(f.metadata or {}), PRIMARY_KEY_META: "true"})
              if f.name in keys else f for f in rows.schema]
    return rows.cast(pa.schema(fields, metadata=rows.schema.metadata))


def primary_key(schema: pa.Schema) -> list[str]:
    """The primary key ``schema`` declares (its columns in schema order), ``[]`` for none."""
    marker = PRIMARY_KEY_META.encode()
    return [f.name for f in schema if (f.metadata or {}).get(marker, b"").lower() == b"true"]
