"""LanceDB's upsert on a table of this package: ``table.merge_insert(on)``, by default on its primary key.

``create_table(..., primary_key="id")`` declares the columns that identify a row; an upsert is where that
key is used: ``tbl.merge_insert().when_matched_update_all().when_not_matched_insert_all().execute(rows)``
updates the rows whose key is in ``rows`` and adds the others, in one Lance commit (LanceDB's builder,
whose ``on`` defaults here to the declared key).  The rows may carry only some columns: the others keep
their values on updated rows (a UDF column's value is then *stale* if its inputs changed, and the next
backfill recomputes exactly those rows) and are NULL on inserted ones.  Bad input -- no key to match on,
a column the table lacks, the package's own columns, a type that does not convert -- is
:class:`InvalidArgumentError` naming the table and the column, before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from geneva_provider.core.column_names import is_internal_column, user_columns
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.filters import lance_reason

if TYPE_CHECKING:
    import pyarrow as pa

    from geneva_provider.facade.table import Table


@dataclass(frozen=True)
class MergeResult:
    """What one merge_insert did, as LanceDB reports it, and the table version it made."""

    version: int
    num_inserted_rows: int
    num_updated_rows: int
    num_deleted_rows: int


class MergeInsert:
    """The builder ``table.merge_insert(on)`` returns: say what happens to matched and unmatched rows, then
    ``execute(data)``."""

    def __init__(self, table: Table, on: list[str], as_arrow: Callable[[Any, str], pa.Table]) -> None:
        self._table, self._on, self._as_arrow = table, on, as_arrow  # the data as Arrow, as ``Table.add`` takes it
        self._update: tuple[bool, str | None] = (False, None)
        self._insert = False
        self._delete: tuple[bool, str | None] = (False, None)

    @property
    def _what(self) -> str:
        return f"merge_insert into table '{self._table.name}'"

    def when_matched_update_all(self, where: str | None = None) -> MergeInsert:
        """Rows whose key is in the data take the data's values (only where ``where`` holds, if given)."""
        self._update = (True, _condition(where, "where", self._what))
        return self

    def when_not_matched_insert_all(self) -> MergeInsert:
        """Rows of the data whose key the table lacks are added."""
        self._insert = True
        return self

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> MergeInsert:
        """Rows of the table whose key is not in the data are deleted (only those matching ``condition``)."""
        self._delete = (True, _condition(condition, "condition", self._what))
        return self

    def execute(self, data: Any) -> MergeResult:
        """Runs the merge in one Lance commit; the result counts the rows inserted, updated and deleted."""
        self._table._writable("merge_insert")
        if not (self._update[0] or self._insert or self._delete[0]):
            raise InvalidArgumentError(f"{self._what}: say what to do first (when_matched_update_all(), "
                                       "when_not_matched_insert_all(), when_not_matched_by_source_delete())")
        ds = self._table.dataset()
        rows = _fitted(self._as_arrow(data, self._what), ds.schema, self._on, self._what)
        builder = ds.merge_insert(self._on)
        if self._update[0]:
            builder = builder.when_matched_update_all(self._update[1])
        if self._insert:
            builder = builder.when_not_matched_insert_all()
        if self._delete[0]:
            builder = builder.when_not_matched_by_source_delete(self._delete[1])
        try:
            counts = builder.execute(rows)
        except (OSError, ValueError, RuntimeError) as exc:
            raise InvalidArgumentError(f"{self._what} on {self._on}: {lance_reason(exc)}") from None
        return MergeResult(version=self._table.dataset().version, num_inserted_rows=counts["num_inserted_rows"],
                           num_updated_rows=counts["num_updated_rows"], num_deleted_rows=counts["num_deleted_rows"])


def merge_keys(on: str | Sequence[str] | None, primary_key: list[str], schema: pa.Schema, what: str) -> list[str]:
    """The columns a merge matches rows on: ``on``, else the table's primary key; InvalidArgumentError naming
    what is wrong."""
    if on is None:
        if not primary_key:
            raise InvalidArgumentError(f"{what}: the table declares no primary key (create_table(..., primary_key=))"
                                       ": pass on=, the column(s) to match rows on")
        return primary_key
    keys = [on] if isinstance(on, str) else list(on) if isinstance(on, Sequence) else None
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidArgumentError(f"{what}: on must be a column name or a list of them, got {on!r}")
    missing = [k for k in keys if k not in schema.names or is_internal_column(k)]
    if missing:
        raise InvalidArgumentError(f"{what}: on names column(s) {missing} the table lacks (columns: "
                                   f"{user_columns(schema.names)})")
    return keys


def _fitted(rows: pa.Table, schema: pa.Schema, keys: list[str], what: str) -> pa.Table:
    """The data's columns, each cast to the table's type of it; InvalidArgumentError naming a misfit."""
    import pyarrow as pa

    unknown = [c for c in rows.column_names if c not in schema.names or is_internal_column(c)]
    if unknown:
        raise InvalidArgumentError(f"{what}: column(s) {unknown} are not columns of the table you can write "
                                   f"(columns: {user_columns(schema.names)})")
    lacking = [k for k in keys if k not in rows.column_names]
    if lacking:
        raise InvalidArgumentError(f"{what}: the data lacks the key column(s) {lacking} it is matched on")
    fields = [schema.field(c) for c in rows.column_names]
    columns = []
    for field in fields:
        try:
            columns.append(rows.column(field.name).cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidArgumentError(f"{what}: column '{field.name}' holds {rows.column(field.name).type}, which "
                                       f"does not convert to the table's {field.type}: {exc}") from None
    for key in keys:
        if rows.column(key).null_count:
            raise InvalidArgumentError(f"{what}: key column '{key}' holds NULL values: every row needs a key")
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _condition(value: Any, arg: str, what: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidArgumentError(f"{what}: {arg} must be a SQL condition, got {value!r}")
    return value
