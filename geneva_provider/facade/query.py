"""The view query builder: ``tbl.search(None).where(...).select(...).shuffle(seed).limit(n).offset(k)``.

It builds a :class:`~geneva_provider.core.views.meta.ViewQuery` (data: it round-trips through
JSON in the view's schema metadata; its UDF columns carry their pickled UDFs in the view's field
metadata, like any UDF column), checking names against the source table as it goes.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from geneva_provider.core.column_names import check_column_name, user_columns
from geneva_provider.core.errors import ColumnError, InvalidArgumentError
from geneva_provider.core.functions.udf import UDF
from geneva_provider.core.views.meta import ViewQuery

if TYPE_CHECKING:
    from geneva_provider.facade.connection import Connection
    from geneva_provider.facade.table import Table


class Query:
    """A fluent, immutable builder over a source table; each call returns a new Query."""

    def __init__(self, table: Table) -> None:
        self._table = table
        self._q = ViewQuery(base_table=table.name, base_table_db_uri=table.connection.uri)

    def _with(self, **changes: Any) -> Query:
        other = copy.copy(self)
        other._q = copy.copy(self._q)
        for key, value in changes.items():
            setattr(other._q, key, value)
        return other

    def where(self, where: str | None) -> Query:
        """Rows of the view: a SQL filter on the source table (checked by Lance when the view is created)."""
        if where is not None and not isinstance(where, str):
            raise InvalidArgumentError(f"view query on table '{self._table.name}': where must be a SQL filter "
                                       f"string or None, got {where!r}")
        return self._with(where=where or None)

    def select(self, columns: list[str] | dict[str, str | UDF]) -> Query:
        """Columns of the view: source column names, or ``{"out": "src" | udf}``."""
        subject = f"view query on table '{self._table.name}'"
        if isinstance(columns, list):
            columns = {c: c for c in columns} if all(isinstance(c, str) for c in columns) else columns
        if not isinstance(columns, dict):
            raise InvalidArgumentError(f"{subject}: select takes a list of column names or a dict of view column "
                                       f"-> source column or @udf, got {columns!r}")
        copied, udfs = {}, {}
        all_names = self._table.schema.names
        names, listed = set(all_names), user_columns(all_names)  # listed: what an error names
        for out, spec in columns.items():
            check_column_name(out, subject)
            if out.startswith("__"):
                raise InvalidArgumentError(f"view column '{out}': names starting with '__' are reserved")
            if isinstance(spec, UDF) and spec.multi_output:
                raise InvalidArgumentError(
                    f"view column '{out}': UDF '{spec.name}' computes several columns (it returns Columns[...]); "
                    f"create the view, then add them to it with view.add_columns({spec.name}) and view.backfill")
            if isinstance(spec, UDF):
                inputs = spec.input_columns if spec.input_columns is not None else sorted(names)
                missing = [c for c in inputs if c not in names]
                if missing:
                    raise ColumnError(f"view column '{out}': UDF '{spec.name}' reads {missing}, not found in "
                                      f"table '{self._table.name}' (columns: {listed})")
                udfs[out] = (spec, list(inputs))
            elif isinstance(spec, str):
                if spec not in names:
                    raise ColumnError(f"view column '{out}': column '{spec}' not found in table "
                                      f"'{self._table.name}' (columns: {listed})")
                copied[out] = spec
            else:
                raise InvalidArgumentError(f"view column '{out}': expected a column name or a @udf, got {spec!r}")
        return self._with(columns=copied, udf_columns=udfs)

    def shuffle(self, seed: int | None = None) -> Query:
        """Rows in a random order, the same for the same ``seed`` (a non-negative integer)."""
        _check_count("seed", seed)
        return self._with(shuffle=True, seed=seed)

    def limit(self, n: int | None) -> Query:
        _check_count("limit", n)
        return self._with(limit=n)

    def offset(self, n: int | None) -> Query:
        _check_count("offset", n)
        return self._with(offset=n)

    @property
    def spec(self) -> ViewQuery:
        return self._q

    @property
    def table(self) -> Table:
        return self._table

    def create_materialized_view(self, db: Connection, name: str) -> Table:
        return db.create_materialized_view(name, self)


def _check_count(name: str, n: Any) -> None:
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise InvalidArgumentError(f"view query: {name} must be a non-negative integer, got {n!r}")
