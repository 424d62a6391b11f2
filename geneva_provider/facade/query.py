"""The table query builder: ``tbl.search(None | vector | "text").where(...).select(...).limit(n).offset(k)``.

Read it (``to_arrow / to_pandas / to_list``), or make it a materialized view: it builds a
:class:`~geneva_provider.core.views.meta.ViewQuery` (data: it round-trips through JSON in the view's
schema metadata; its UDF columns carry their pickled UDFs in the view's field metadata, like any UDF
column), checking names against the source table as it goes.  A plain query reads the very rows, in the
very order, that a materialized view of it holds; a vector query (``tbl.search([..])``) reads the
nearest rows as LanceDB does, with their ``_distance``, exactly (a flat search) unless the column has a
vector index -- a float64 or integer column in float64 (``core/vector_search.py``) -- and through the index
where there is one (``.nprobes() .refine_factor() .fast_search()``); a text query (``tbl.search("text",
query_type="fts")``) reads the best matches of a full-text index with their ``_score``.  The builder only
collects and checks: it reads through the read seam, a :class:`~geneva_provider.core.search_query.SearchQuery`
run by ``run_search`` (``core/search_query.py``), as the CLI does.  A query reads the version of the table its
handle was checked out at when it was built (the latest when it was not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import numpy as np

from geneva_provider.core.errors import ColumnError, InvalidArgumentError
from geneva_provider.core.functions.udf import UDF
from geneva_provider.core.query_builder import GenevaQueryBuilder, UdfColumns, check_count
from geneva_provider.core.search_query import QueryType, SearchQuery, run_search, wrong_dimension
from geneva_provider.core.vector_search import (
    check_distance,
    default_vector_column,
    is_vector_type,
    not_vectors,
    query_vector,
)
from geneva_provider.core.views.meta import ViewQuery

if TYPE_CHECKING:
    import pyarrow as pa

    from geneva_provider.facade.connection import Connection
    from geneva_provider.facade.table import Table


class Query(GenevaQueryBuilder):
    """A fluent, immutable builder over a source table; each call returns a new Query."""

    _udf_columns: UdfColumns = {}  # noqa: RUF012 - replaced, never mutated
    _shuffle: bool = False
    _seed: int | None = None
    _distance_type: str | None = None  # None: the index's distance, l2 without one
    _text: str | None = None
    _fts_columns: list[str] | None = None
    _nprobes: int | None = None
    _refine_factor: int | None = None
    _prefilter: bool = True
    _fast_search: bool = False
    _bypass_vector_index: bool = False

    def __init__(self, table: Table, vector: np.ndarray | None = None, vector_column: str | None = None, *,
                 version: int | None = None, text: str | None = None, fts_columns: list[str] | None = None) -> None:
        self._table = table
        self._vector, self._vector_column = vector, vector_column
        self._text, self._fts_columns = text, fts_columns
        self._version = version  # the version of the table the query reads (its handle's checkout); None: latest

    def _source(self) -> str:
        return f"table '{self._table.name}'"

    def _subject(self) -> str:
        kind = {"vector": "vector ", "fts": "full-text ", "plain": ""}[self._query_type()]
        return f"{kind}query on {self._source()}"

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
        if self._query_type() != "plain":
            raise InvalidArgumentError(f"{self._subject()}: a search reads rows best first; it cannot be shuffled")
        return self._with(shuffle=True, seed=seed)

    def where(self, where: str | None, prefilter: bool = True) -> Query:  # type: ignore[override]
        """The rows: a SQL filter (Lance's dialect), checked against the table when read.  For a vector or
        full-text search, ``prefilter=True`` (LanceDB's default) filters before the search, so the ``limit``
        best matching rows come back; ``prefilter=False`` filters the ``limit`` best rows after it (fewer,
        maybe none, may come back)."""
        if not isinstance(prefilter, bool):
            raise InvalidArgumentError(f"{self._subject()}: prefilter must be True or False, got {prefilter!r}")
        return super().where(where)._with(prefilter=prefilter)

    def nprobes(self, n: int) -> Query:
        """How many IVF partitions a vector search through an index probes (more: better recall, slower)."""
        return self._index_knob("nprobes", n)

    def refine_factor(self, r: int) -> Query:
        """A vector search through an index re-ranks ``r * limit`` candidates by their exact distance."""
        return self._index_knob("refine_factor", r)

    def _index_knob(self, name: str, value: Any) -> Query:
        if self._vector is None:
            raise InvalidArgumentError(f"{self._subject()}: {name} is for a vector search (table.search([...]))")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"{self._subject()}: {name} must be a positive integer, got {value!r}")
        return self._with(**{name: value})

    def fast_search(self, flag: bool = True) -> Query:
        """Search only the rows an index covers: rows added since the index was built are left out (fast, as
        LanceDB's); without it they are searched flat, beside the index."""
        if self._query_type() == "plain":
            raise InvalidArgumentError(f"{self._subject()}: fast_search is for a vector or full-text search")
        return self._with(fast_search=bool(flag))

    def bypass_vector_index(self) -> Query:
        """An exact (flat) vector search even where the column has an index, as LanceDB's: every row is
        compared with the query (slower; the answer an index approximates)."""
        if self._vector is None:
            raise InvalidArgumentError(f"{self._subject()}: bypass_vector_index is for a vector search "
                                       "(table.search([...]))")
        return self._with(bypass_vector_index=True)

    def distance_type(self, distance_type: str) -> Query:
        """A vector search's distance: "l2" (squared Euclidean, as Lance), "cosine", "dot" or "hamming".  Not
        called: the distance the column's vector index was trained with (so the index answers), else "l2"."""
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
        if self._query_type() != "plain":
            kind = "a vector" if self._vector is not None else "a full-text"
            raise InvalidArgumentError(f"{what}: the source query is {kind} search; a view selects rows with "
                                       "table.search(None).where(...) (read the best rows with to_arrow())")
        return self.spec

    def create_materialized_view(self, db: Connection, name: str) -> Table:
        return db.create_materialized_view(name, self)

    # ------------------------------------------------------------------ reading
    @property
    def search_query(self) -> SearchQuery:
        """What this query reads, as the read seam runs it (``core/search_query.py``); plain data."""
        vector = None if self._vector is None else [float(v) for v in self._vector]
        return SearchQuery(query_type=self._query_type(), vector=vector, column=self._vector_column,
                           text=self._text, fts_columns=self._fts_columns, metric=self._distance_type,
                           limit=self._limit, offset=self._offset, nprobes=self._nprobes,
                           refine_factor=self._refine_factor, where=self._where, prefilter=self._prefilter,
                           select=dict(self._columns), fast_search=self._fast_search,
                           bypass_vector_index=self._bypass_vector_index, shuffle=self._shuffle, seed=self._seed)

    def _query_type(self) -> QueryType:
        return "vector" if self._vector is not None else "fts" if self._text is not None else "plain"

    def to_arrow(self) -> pa.Table:
        """The rows: those a materialized view of this query holds, in its order; or, for a vector search, the
        ``limit`` (default 10) rows nearest the vector after ``offset``, nearest first, with ``_distance``; or,
        for a full-text search, the ``limit`` (default 10) best matches, best first, with ``_score``."""
        if self._udf_columns:
            raise InvalidArgumentError(f"{self._subject()}: it selects UDF column(s) {list(self._udf_columns)}, "
                                       "which are computed on Spark: make it a materialized view "
                                       "(db.create_materialized_view) and refresh it")
        return run_search(self._dataset(), self.search_query, self._source())


def vector_query(table: Table, query: Any, vector_column_name: str | None, dataset: Any) -> Query:
    """A vector search of ``query`` (a list or array of numbers) over ``vector_column_name``, or over the table's
    one vector column (a fixed-size list of floats; "vector" among several).  InvalidArgumentError /
    ColumnError naming the table, the column and the vector's length when they do not fit."""
    subject = f"search on table '{table.name}'"
    schema = dataset.schema
    vectors = [f.name for f in schema if is_vector_type(f.type)]
    if vector_column_name is None:
        vector_column_name = default_vector_column(subject, schema)
    if not isinstance(vector_column_name, str) or vector_column_name not in schema.names:
        from geneva_provider.core.column_names import user_columns

        raise ColumnError(f"{subject}: vector column {vector_column_name!r} not found (columns: "
                          f"{user_columns(schema.names)})")
    if vector_column_name not in vectors:
        raise not_vectors(subject, vector_column_name, schema.field(vector_column_name).type)
    vector = query_vector(query, subject)
    dim = schema.field(vector_column_name).type.list_size
    if vector.size != dim:
        raise wrong_dimension(subject, vector_column_name, dim, vector)
    return Query(table, vector, vector_column_name, version=table.checked_out_version)
