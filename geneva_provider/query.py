"""The view query builder: ``tbl.search(None).where(...).select(...).shuffle(seed).limit(n).offset(k)``.

A query is data: it round-trips through JSON (stored in the view's schema metadata), and its
UDF columns carry their pickled UDFs in the view's field metadata, like any UDF column.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geneva_provider.errors import ColumnError, InvalidArgumentError
from geneva_provider.udf import UDF

if TYPE_CHECKING:
    from geneva_provider.db import Connection
    from geneva_provider.table import Table


@dataclass
class ViewQuery:
    """What a materialized view selects from its source table."""

    base_table: str
    base_table_db_uri: str
    where: str | None = None
    columns: dict[str, str] = field(default_factory=dict)   # output name -> source column
    udf_columns: dict[str, tuple[UDF, list[str]]] = field(default_factory=dict)  # output name -> (UDF, inputs)
    shuffle: bool = False
    seed: int | None = None
    limit: int | None = None
    offset: int | None = None

    def to_json(self) -> str:
        """The JSON stored as ``geneva::view::query`` (UDFs by name; their code lives in field metadata)."""
        return json.dumps({
            "base_table": self.base_table,
            "base_table_db_uri": self.base_table_db_uri,
            "where": self.where,
            "columns": self.columns,
            "udf_columns": {name: {"udf": fn.name, "version": fn.version, "input_columns": inputs}
                            for name, (fn, inputs) in self.udf_columns.items()},
            "shuffle": self.shuffle,
            "seed": self.seed,
            "limit": self.limit,
            "offset": self.offset,
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> dict[str, Any]:
        """The stored query as a dict (the UDFs themselves are read from the view's fields)."""
        return json.loads(text)

    def source_columns(self) -> list[str]:
        """Every source column the view reads: copied columns and UDF inputs."""
        cols = list(self.columns.values())
        for _, inputs in self.udf_columns.values():
            cols.extend(inputs)
        return list(dict.fromkeys(cols))


class Query:
    """A fluent, immutable builder over a source table; each call returns a new Query."""

    def __init__(self, table: Table) -> None:
        self._table = table
        self._q = ViewQuery(base_table=table.name, base_table_db_uri=table._conn.uri)

    def _with(self, **changes: Any) -> Query:
        other = copy.copy(self)
        other._q = copy.copy(self._q)
        for key, value in changes.items():
            setattr(other._q, key, value)
        return other

    def where(self, where: str | None) -> Query:
        return self._with(where=where or None)

    def select(self, columns: list[str] | dict[str, str | UDF]) -> Query:
        """Columns of the view: source column names, or ``{"out": "src" | udf}``."""
        if isinstance(columns, list):
            columns = {c: c for c in columns}
        copied, udfs = {}, {}
        names = set(self._table.schema.names)
        for out, spec in columns.items():
            if out.startswith("__"):
                raise InvalidArgumentError(f"view column '{out}': names starting with '__' are reserved")
            if isinstance(spec, UDF):
                inputs = spec.input_columns if spec.input_columns is not None else sorted(names)
                missing = [c for c in inputs if c not in names]
                if missing:
                    raise ColumnError(f"view column '{out}': UDF '{spec.name}' reads {missing}, not found in "
                                      f"table '{self._table.name}'")
                udfs[out] = (spec, list(inputs))
            elif isinstance(spec, str):
                if spec not in names:
                    raise ColumnError(f"view column '{out}': column '{spec}' not found in table "
                                      f"'{self._table.name}' (columns: {sorted(names)})")
                copied[out] = spec
            else:
                raise InvalidArgumentError(f"view column '{out}': expected a column name or a @udf, got {spec!r}")
        return self._with(columns=copied, udf_columns=udfs)

    def shuffle(self, seed: int | None = None) -> Query:
        return self._with(shuffle=True, seed=seed)

    def limit(self, n: int | None) -> Query:
        if n is not None and n < 0:
            raise InvalidArgumentError(f"limit must be >= 0, got {n}")
        return self._with(limit=n)

    def offset(self, n: int | None) -> Query:
        if n is not None and n < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {n}")
        return self._with(offset=n)

    @property
    def spec(self) -> ViewQuery:
        return self._q

    @property
    def table(self) -> Table:
        return self._table

    def create_materialized_view(self, db: Connection, name: str) -> Table:
        return db.create_materialized_view(name, self)
