"""The table query builder: ``tbl.search(None | vector).where(...).select(...).limit(n).offset(k)``.

Read it (``to_arrow / to_pandas / to_list``), or make it a materialized view: it builds a
:class:`~geneva_provider.core.views.meta.ViewQuery` (data: it round-trips through JSON in the view's
schema metadata; its UDF columns carry their pickled UDFs in the view's field metadata, like any UDF
column), checking names against the source table as it goes.  A plain query reads the very rows, in the
very order, that a materialized view of it holds; a vector query (``tbl.search([..])``) reads the
nearest rows as LanceDB does, with their ``_distance``, exactly (a flat search) unless the column has a
vector index -- a float64 or integer column in float64 (``core/vector_search.py``).  A query reads the version
of the table its handle was checked out at when it was built (the latest when it was not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import numpy as np

from geneva_provider.core.errors import ColumnError, InvalidArgumentError
from geneva_provider.core.filters import check_where
from geneva_provider.core.fingerprints import is_fingerprint_column
from geneva_provider.core.functions.udf import UDF
from geneva_provider.core.query_builder import GenevaQueryBuilder, UdfColumns, check_count
from geneva_provider.core.vector_search import (
    check_distance,
    exact_nearest,
    is_vector_type,
    lance_query,
    no_vector_column,
    not_vectors,
    query_vector,
    ranks_exactly,
)
from geneva_provider.core.views.meta import ViewQuery, query_order

if TYPE_CHECKING:
    import pyarrow as pa

    from geneva_provider.facade.connection import Connection
    from geneva_provider.facade.table import Table

DEFAULT_VECTOR_LIMIT = 10  # LanceDB's: a vector search without limit() reads the 10 nearest rows


class Query(GenevaQueryBuilder):
    """A fluent, immutable builder over a source table; each call returns a new Query."""

    _udf_columns: UdfColumns = {}  # noqa: RUF012 - replaced, never mutated
    _shuffle: bool = False
    _seed: int | None = None
    _distance_type: str = "l2"

    def __init__(self, table: Table, vector: np.ndarray | None = None, vector_column: str | None = None, *,
                 version: int | None = None) -> None:
        self._table = table
        self._vector, self._vector_column = vector, vector_column
        self._version = version  # the version of the table the query reads (its handle's checkout); None: latest

    def _source(self) -> str:
        return f"table '{self._table.name}'"

    def _subject(self) -> str:
        return f"{'vector ' if self._vector is not None else ''}query on {self._source()}"

    def _schema(self) -> pa.Schema:
        return self._dataset().schema

    def _dataset(self) -> Any:
        return self._table.dataset(self._version)

    def select(self, columns: list[str] | dict[str, str | UDF]) -> Self:  # type: ignore[override]
        """Columns: source column names, or ``{"out": "src" | udf}`` (a UDF column: for a materialized view)."""
        copied, udfs = self._parse_select(columns, allow_udfs=True)
        return self._with(columns=copied, udf_columns=udfs)

    def shuffle(self, seed: int | None = None) -> Query:
        """Rows in a random order, the same for the same ``seed`` (a non-negative integer)."""
        check_count(self._subject(), "seed", seed)
        if self._vector is not None:
            raise InvalidArgumentError(f"{self._subject()}: a vector search reads rows nearest first; it cannot "
                                       "be shuffled")
        return self._with(shuffle=True, seed=seed)

    def distance_type(self, distance_type: str) -> Query:
        """A vector search's distance: "l2" (the default: squared Euclidean, as Lance), "cosine", "dot" or
        "hamming"."""
        if self._vector is None:
            raise InvalidArgumentError(f"{self._subject()}: distance_type is for a vector search "
                                       "(table.search([...]))")
        assert self._vector_column is not None
        check_distance(f"search on table '{self._table.name}'", self._vector_column,
                       self._schema().field(self._vector_column).type.value_type, self._vector, distance_type)
        return self._with(distance_type=distance_type)

    metric = distance_type  # LanceDB's older name

    @property
    def spec(self) -> ViewQuery:
        """What a materialized view of this query selects."""
        return ViewQuery(base_table=self._table.name, base_table_db_uri=self._table.connection.uri,
                         where=self._where, columns=dict(self._columns), udf_columns=dict(self._udf_columns),
                         shuffle=self._shuffle, seed=self._seed, limit=self._limit, offset=self._offset)

    @property
    def table(self) -> Table:
        return self._table

    @property
    def version(self) -> int | None:
        """The version of the table the query reads: its handle's checkout when it was built; None: the latest."""
        return self._version

    def view_source(self, what: str) -> ViewQuery:
        """The query a view is made of; InvalidArgumentError naming ``what`` for a vector search, which a
        view cannot follow as its source changes."""
        if self._vector is not None:
            raise InvalidArgumentError(f"{what}: the source query is a vector search; a view selects rows with "
                                       "table.search(None).where(...) (read the nearest rows with to_arrow())")
        return self.spec

    def create_materialized_view(self, db: Connection, name: str) -> Table:
        return db.create_materialized_view(name, self)

    # ------------------------------------------------------------------ reading
    def to_arrow(self) -> pa.Table:
        """The rows: those a materialized view of this query holds, in its order; or, for a vector search, the
        ``limit`` (default 10) rows nearest the vector after ``offset``, nearest first, with ``_distance``."""
        subject = self._subject()
        if self._udf_columns:
            raise InvalidArgumentError(f"{subject}: it selects UDF column(s) {list(self._udf_columns)}, which are "
                                       "computed on Spark: make it a materialized view "
                                       "(db.create_materialized_view) and refresh it")
        ds = self._dataset()
        check_where(ds, self._where, self._source())
        names = [n for n in ds.schema.names if not is_fingerprint_column(n)]
        columns = dict(self._columns) or {n: n for n in names}
        read = list(dict.fromkeys(columns.values()))
        if self._vector is not None:
            rows = self._nearest(ds, read)
        else:
            ids = ds.to_table(columns=[], filter=self._where, with_row_id=True).column("_rowid").to_numpy()
            chosen = query_order(ids.astype(np.int64), self._shuffle, self._seed)[self._offset or 0:]
            chosen = chosen[:self._limit] if self._limit is not None else chosen
            import pyarrow as pa

            rows = ds._take_rows(pa.array(chosen, pa.uint64()), columns=read)
        return _renamed(rows, columns)

    def _nearest(self, ds: Any, read: list[str]) -> pa.Table:
        """The vector search: Lance's ``nearest`` (flat, exact, without an index), filtered before the search as
        LanceDB's default ``prefilter``; then ``offset`` rows skipped."""
        column = self._vector_column
        assert column is not None and self._vector is not None
        offset = self._offset or 0
        limit = self._limit if self._limit is not None else DEFAULT_VECTOR_LIMIT
        metric = self._distance_type
        if ranks_exactly(ds, column, metric):  # float64 / integer vectors, which Lance ranks in float32 or refuses
            rows = exact_nearest(ds, column, self._vector, metric, limit + offset, self._where, read)
        else:
            rows = ds.to_table(columns=[*read, "_distance"], filter=self._where, prefilter=True,
                               nearest={"column": column, "q": lance_query(self._vector, metric),
                                        "k": max(limit + offset, 1), "metric": metric})
        return rows.slice(offset, limit)

def _renamed(rows: pa.Table, columns: dict[str, str]) -> pa.Table:
    """``rows`` with the query's output columns (``out -> source column``), then any search column
    (``_distance``)."""
    import pyarrow as pa

    extra = [n for n in rows.column_names if n not in columns.values() and n.startswith("_")]
    fields = [rows.schema.field(src).with_name(out) for out, src in columns.items()]
    fields += [rows.schema.field(n) for n in extra]
    arrays = [rows.column(src) for src in columns.values()] + [rows.column(n) for n in extra]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def vector_query(table: Table, query: Any, vector_column_name: str | None, dataset: Any) -> Query:
    """A vector search of ``query`` (a list or array of numbers) over ``vector_column_name``, or over the table's
    one vector column (a fixed-size list of floats; "vector" among several).  InvalidArgumentError /
    ColumnError naming the table, the column and the vector's length when they do not fit."""
    subject = f"search on table '{table.name}'"
    schema = dataset.schema
    vectors = [f.name for f in schema if is_vector_type(f.type)]
    if vector_column_name is None:
        if len(vectors) == 1 or "vector" in vectors:
            vector_column_name = vectors[0] if len(vectors) == 1 else "vector"
        elif vectors:
            raise InvalidArgumentError(f"{subject}: several vector columns {vectors}: name one with "
                                       "vector_column_name=")
        else:
            raise no_vector_column(subject, schema)
    if not isinstance(vector_column_name, str) or vector_column_name not in schema.names:
        from geneva_provider.core.column_names import user_columns

        raise ColumnError(f"{subject}: vector column {vector_column_name!r} not found (columns: "
                          f"{user_columns(schema.names)})")
    if vector_column_name not in vectors:
        raise not_vectors(subject, vector_column_name, schema.field(vector_column_name).type)
    vector = query_vector(query, subject)
    dim = schema.field(vector_column_name).type.list_size
    if vector.size != dim:
        raise InvalidArgumentError(f"{subject}: column '{vector_column_name}' holds vectors of {dim} values, the "
                                   f"query has {vector.size}")
    return Query(table, vector, vector_column_name, version=table.checked_out_version)
