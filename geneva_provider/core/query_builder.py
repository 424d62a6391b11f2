"""The query builder's common half: ``where / select / limit / offset``, read as Arrow, pandas or row dicts (core).

``GenevaQueryBuilder`` is the reference system's name for what ``table.search(...)`` returns and for what a
batch UDTF annotated ``source: GenevaQueryBuilder`` is given.  Every builder is immutable (each call returns
a new one) and checks what it is given as it goes; a subclass says which columns there are
(:meth:`GenevaQueryBuilder._names`) and where the rows come from (:meth:`GenevaQueryBuilder.to_arrow`): a
Lance table (:class:`geneva_provider.facade.query.Query`) or one partition's rows inside a batch UDTF
(:class:`PartitionRows`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Self

import pyarrow as pa

from geneva_provider.core.errors import ColumnError, InvalidArgumentError

if TYPE_CHECKING:
    from geneva_provider.core.functions.udf import UDF

UdfColumns = dict[str, tuple["UDF", list[str]]]


class GenevaQueryBuilder:
    """Which rows (``where``, ``offset``, ``limit``) and columns (``select``) of a source to read."""

    _where: str | None = None
    _columns: dict[str, str] = {}  # noqa: RUF012 - replaced, never mutated: output name -> source column
    _limit: int | None = None
    _offset: int | None = None

    # ------------------------------------------------------------------ what a subclass says
    def _source(self) -> str:
        """What is queried, for errors: "table 'docs'"."""
        raise NotImplementedError

    def _subject(self) -> str:
        """Who is asking, for errors: "query on table 'docs'"."""
        return f"query on {self._source()}"

    def _names(self) -> list[str]:
        """The source's columns, in order."""
        return list(self._schema().names)

    def _schema(self) -> pa.Schema:
        """The source's schema (struct fields a UDF reads by dot path are found in it)."""
        raise NotImplementedError

    def to_arrow(self) -> pa.Table:
        """The rows and columns the query selects, as an Arrow table."""
        raise NotImplementedError

    # ------------------------------------------------------------------ building
    def _with(self, **changes: Any) -> Self:
        other = copy.copy(self)
        for key, value in changes.items():
            setattr(other, f"_{key}", value)
        return other

    def where(self, where: str | None) -> Self:
        """The rows: a SQL filter (Lance's dialect), checked against the source when read."""
        if where is not None and not isinstance(where, str):
            raise InvalidArgumentError(f"{self._subject()}: where must be a SQL filter string or None, got {where!r}")
        return self._with(where=where or None)

    def select(self, columns: list[str] | dict[str, str]) -> Self:
        """The columns: source column names, or ``{"out": "source column"}`` to rename."""
        copied, _ = self._parse_select(columns, allow_udfs=False)
        return self._with(columns=copied)

    def limit(self, n: int | None) -> Self:
        check_count(self._subject(), "limit", n)
        return self._with(limit=n)

    def offset(self, n: int | None) -> Self:
        check_count(self._subject(), "offset", n)
        return self._with(offset=n)

    def _parse_select(self, columns: Any, *, allow_udfs: bool) -> tuple[dict[str, str], UdfColumns]:
        """``select``'s argument as (output name -> source column, output name -> (UDF, its inputs)), checked
        against the source's columns: ColumnError / InvalidArgumentError naming the column."""
        from geneva_provider.core.column_names import check_column_name, user_columns
        from geneva_provider.core.column_paths import missing_paths, path_type
        from geneva_provider.core.functions.udf import UDF

        subject = self._subject()
        if isinstance(columns, list):
            columns = {c: c for c in columns} if all(isinstance(c, str) for c in columns) else columns
        if not isinstance(columns, dict):
            udfs = " or @udf" if allow_udfs else ""
            raise InvalidArgumentError(f"{subject}: select takes a list of column names or a dict of output column "
                                       f"-> source column{udfs}, got {columns!r}")
        copied: dict[str, str] = {}
        udf_columns: UdfColumns = {}
        all_names = self._names()
        names, listed = set(all_names), user_columns(all_names)  # listed: what an error names
        for out, spec in columns.items():
            check_column_name(out, subject)
            if out.startswith("__"):
                raise InvalidArgumentError(f"{subject}: column '{out}': names starting with '__' are reserved")
            if isinstance(spec, UDF) and allow_udfs:
                if spec.multi_output:
                    raise InvalidArgumentError(
                        f"view column '{out}': UDF '{spec.name}' computes several columns (it returns Columns[...]); "
                        f"create the view, then add them to it with view.add_columns({spec.name}) and view.backfill")
                inputs = spec.input_columns if spec.input_columns is not None else sorted(names)
                missing = missing_paths(self._schema(), inputs)
                if missing:
                    raise ColumnError(f"view column '{out}': UDF '{spec.name}' reads {missing}, not found in "
                                      f"{self._source()} (columns: {listed})")
                spec.check_input_types([path_type(self._schema(), c) for c in inputs], inputs,
                                       f"view column '{out}'")
                udf_columns[out] = (spec, list(inputs))
            elif isinstance(spec, str):
                if spec not in names:
                    raise ColumnError(f"{subject}: column '{out}': column '{spec}' not found in {self._source()} "
                                      f"(columns: {listed})")
                copied[out] = spec
            else:
                wanted = "a column name or a @udf" if allow_udfs else "a column name"
                raise InvalidArgumentError(f"{subject}: column '{out}': expected {wanted}, got {spec!r}")
        return copied, udf_columns

    # ------------------------------------------------------------------ reading
    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame (pandas has no type stubs here)."""
        return self.to_arrow().to_pandas()

    def to_list(self) -> list[dict[str, Any]]:
        """The rows as a list of dicts, one per row (column -> value; NULL is None)."""
        rows: list[dict[str, Any]] = self.to_arrow().to_pylist()
        return rows

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as record batches."""
        return iter(self.to_arrow().to_batches())


class PartitionRows(GenevaQueryBuilder):
    """What a batch UDTF annotated ``source: GenevaQueryBuilder`` (or not annotated) is given: its partition's
    rows, read with ``to_arrow()`` / ``to_pandas()`` / ``to_list()``, narrowed by ``select``, ``offset`` and
    ``limit``, or iterated as record batches (``for batch in source`` / ``next(source)``, as before).

    The rows are already those the view's query selects: ``where`` is refused (filter them in the function).
    """

    def __init__(self, rows: pa.Table, label: str) -> None:
        self._rows, self._label = rows, label
        self._batches: Iterator[pa.RecordBatch] | None = None

    def _source(self) -> str:
        return f"the partition given to {self._label}"

    def _schema(self) -> pa.Schema:
        return self._rows.schema

    def where(self, where: str | None) -> Self:
        raise InvalidArgumentError(f"{self._subject()}: its rows are the partition's, as the view's query selects "
                                   f"them; where({where!r}) is not supported inside a UDTF: filter the rows in the "
                                   "function, or put the filter in the view's query")

    def to_arrow(self) -> pa.Table:
        rows = self._rows
        if self._columns:
            fields = [rows.schema.field(src).with_name(out) for out, src in self._columns.items()]
            rows = pa.Table.from_arrays([rows.column(src) for src in self._columns.values()],
                                        schema=pa.schema(fields))
        rows = rows.slice(self._offset or 0)
        return rows.slice(0, self._limit) if self._limit is not None else rows

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self

    def __next__(self) -> pa.RecordBatch:
        if self._batches is None:  # a partition of no rows still gives one (empty) batch of its columns
            table = self.to_arrow()
            self._batches = iter(table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)])
        return next(self._batches)


def check_count(subject: str, name: str, n: Any) -> None:
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise InvalidArgumentError(f"{subject}: {name} must be a non-negative integer, got {n!r}")
