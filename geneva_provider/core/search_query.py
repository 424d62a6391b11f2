"""The read seam: one :class:`SearchQuery` (plain data) and the one function that runs it on a Lance dataset (core).

Every read a user makes -- ``tbl.search(...)`` (plain, vector or full-text), a search of a view or a chunker
view (a view is a table), the CLI's ``table search`` -- builds a ``SearchQuery`` and hands it to
:func:`run_search`, so what a knob means (``nprobes``, ``refine_factor``, ``prefilter``, ``fast_search``) is
decided here once.  The model round-trips through JSON, so a query can be stored (a view's metadata, a task's
argument) and run elsewhere.

A vector search is answered by Lance's index where the column has one (rows appended after the index are
flat-searched too, unless ``fast_search``), exactly where it has none (a float64 or integer column ranked in
float64 by ``core/vector_search.py``).  A full-text search needs an FTS (INVERTED) index, as Lance's does.
``where`` filters before the search by default (LanceDB's ``prefilter=True``); with ``prefilter=False`` it
filters the ``k`` nearest after the search, so fewer than ``k`` rows may come back, as in LanceDB.
Everything is checked against the dataset before a row is read: the package's error naming the table,
the column and the value.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from geneva_provider.core.errors import ColumnError, InvalidArgumentError
from geneva_provider.core.filters import check_where
from geneva_provider.core.fingerprints import is_fingerprint_column
from geneva_provider.core.vector_search import (
    check_distance,
    exact_nearest,
    index_metric,
    is_vector_type,
    lance_query,
    not_vectors,
    ranks_exactly,
)
from geneva_provider.core.views.meta import query_order

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

DEFAULT_SEARCH_LIMIT = 10  # LanceDB's: a vector or full-text search without limit() reads the 10 best rows
FTS_INDEX_TYPE = "Inverted"  # how Lance's describe_indices() names a full-text index
DISTANCE = "_distance"
SCORE = "_score"

QueryType = Literal["plain", "vector", "fts"]


class SearchQuery(BaseModel):
    """What to read: which rows (a filter, a vector or a text query), how many, which columns, and how."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query_type: QueryType = "plain"
    vector: list[float] | None = None        # a vector search's query, the user's values (float64)
    column: str | None = None                # a vector search's column
    text: str | None = None                  # a full-text search's query
    fts_columns: list[str] | None = None     # a full-text search's columns; None: every FTS-indexed column
    metric: str | None = None                # None: the column's vector index's distance, else l2
    limit: int | None = None                 # None: every row (plain), 10 (vector, full-text)
    offset: int | None = None
    nprobes: int | None = None               # IVF partitions searched (None: Lance's default)
    refine_factor: int | None = None         # re-rank refine_factor * k candidates by their exact distance
    where: str | None = None
    prefilter: bool = True
    select: dict[str, str] = {}              # output name -> source column; empty: every user column
    fast_search: bool = False                # only rows an index covers (rows added since are left out)
    bypass_vector_index: bool = False        # an exact (flat) search even where the column has an index
    shuffle: bool = False                    # a plain read in a seeded random order
    seed: int | None = None

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_defaults=True), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SearchQuery:
        return cls.model_validate_json(text)

    @property
    def k(self) -> int | None:
        """How many rows a search reads (its ``limit``, 10 by default); None for a plain read (all)."""
        if self.query_type == "plain":
            return self.limit
        return self.limit if self.limit is not None else DEFAULT_SEARCH_LIMIT


def check_search(ds: Dataset, query: SearchQuery, subject: str) -> None:
    """InvalidArgumentError / ColumnError naming ``subject``, the column and the value unless ``query`` can run on
    ``ds``: the filter, the vector column and the vector's length, the metric, the index knobs, the FTS index."""
    from geneva_provider.core.column_names import user_columns

    check_where(ds, query.where, subject)
    schema = ds.schema
    for out, src in query.select.items():
        if src not in schema.names:
            raise ColumnError(f"{subject}: column '{out}': column '{src}' not found (columns: "
                              f"{user_columns(schema.names)})")
    for name in ("nprobes", "refine_factor"):
        value = getattr(query, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidArgumentError(f"{subject}: {name} must be a positive integer, got {value!r}")
    if query.query_type != "vector" and (query.nprobes is not None or query.refine_factor is not None):
        raise InvalidArgumentError(f"{subject}: nprobes and refine_factor tune a vector search "
                                   "(table.search([...]))")
    if query.query_type == "plain" and query.fast_search:
        raise InvalidArgumentError(f"{subject}: fast_search is for a vector or full-text search")
    if query.query_type != "vector" and query.bypass_vector_index:
        raise InvalidArgumentError(f"{subject}: bypass_vector_index is for a vector search")
    if query.query_type == "vector":
        _check_vector(ds, query, subject)
    elif query.query_type == "fts":
        fts_index_columns(ds, query, subject)


def _check_vector(ds: Dataset, query: SearchQuery, subject: str) -> None:
    from geneva_provider.core.column_names import user_columns

    column, schema = query.column, ds.schema
    if query.vector is None or column is None:
        raise InvalidArgumentError(f"{subject}: a vector search needs a query vector and its column")
    if column not in schema.names:
        raise ColumnError(f"{subject}: vector column {column!r} not found (columns: {user_columns(schema.names)})")
    field_type = schema.field(column).type
    if not is_vector_type(field_type):
        raise not_vectors(subject, column, field_type)
    vector = np.asarray(query.vector, dtype=np.float64)
    if vector.size != field_type.list_size:
        raise wrong_dimension(subject, column, field_type.list_size, vector)
    check_distance(subject, column, field_type.value_type, vector, search_metric(ds, query))


def search_metric(ds: Dataset, query: SearchQuery) -> str:
    """The distance a vector search ranks by: its ``distance_type``, else the one the column's vector index was
    trained with (so the index answers, as in Lance and LanceDB), else ``l2``."""
    assert query.column is not None
    return query.metric or index_metric(ds, query.column) or "l2"


def wrong_dimension(subject: str, column: str, dim: int, vector: np.ndarray) -> InvalidArgumentError:
    """The error for a query vector whose length is not the column's, naming both and showing the vector."""
    shown = vector[:8].tolist()
    more = f" ... ({vector.size} values)" if vector.size > 8 else ""
    return InvalidArgumentError(f"{subject}: column '{column}' holds vectors of {dim} values, the query has "
                                f"{vector.size}: {shown}{more}")


def fts_index_columns(ds: Dataset, query: SearchQuery, subject: str) -> list[str]:
    """The columns a full-text search reads: ``query.fts_columns`` or every column with an FTS index.
    InvalidArgumentError naming the query text and the column(s) when one has no FTS (INVERTED) index."""
    from geneva_provider.core.column_names import user_columns

    if not isinstance(query.text, str) or not query.text.strip():
        raise InvalidArgumentError(f"{subject}: a full-text search needs a non-empty text query, got {query.text!r}")
    indexed = [c for index in ds.describe_indices() if index.index_type == FTS_INDEX_TYPE
               for c in index.field_names]
    wanted = query.fts_columns
    for column in wanted or []:
        if column not in ds.schema.names:
            raise ColumnError(f"{subject}: full-text column {column!r} not found (columns: "
                              f"{user_columns(ds.schema.names)})")
    missing = [c for c in wanted or [] if c not in indexed]
    if missing or not indexed:
        texts = wanted or [f.name for f in ds.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        if not texts:
            raise InvalidArgumentError(f"{subject}: {query.text!r} asks for a full-text search, but the table has no "
                                       "text column; pass a vector for a vector search, or None for a plain read")
        unindexed = missing or texts
        named = f"column '{unindexed[0]}', which has none" if len(unindexed) == 1 else \
            "one of the columns " + ", ".join(f"'{c}'" for c in unindexed) + ", none of which has one"
        raise InvalidArgumentError(f"{subject}: a full-text search of {query.text!r} needs an FTS (INVERTED) index on "
                                   f"{named} (FTS-indexed columns: {indexed}); build one with "
                                   f"tbl.create_fts_index('{unindexed[0]}')")
    return list(wanted or indexed)


def run_search(ds: Dataset, query: SearchQuery, subject: str) -> pa.Table:
    """The rows ``query`` selects from ``ds``, checked first (:func:`check_search`): its ``select`` columns
    (every user column by default), then ``_distance`` (vector) or ``_score`` (full-text)."""
    check_search(ds, query, subject)
    names = [n for n in ds.schema.names if not is_fingerprint_column(n)]
    columns = dict(query.select) or {n: n for n in names}
    read = list(dict.fromkeys(columns.values()))
    if query.query_type == "vector":
        rows = _nearest(ds, query, read)
    elif query.query_type == "fts":
        rows = _full_text(ds, query, read, fts_index_columns(ds, query, subject))
    else:
        ids = ds.to_table(columns=[], filter=query.where, with_row_id=True).column("_rowid").to_numpy()
        chosen = query_order(ids.astype(np.int64), query.shuffle, query.seed)[query.offset or 0:]
        chosen = chosen[:query.limit] if query.limit is not None else chosen
        rows = ds._take_rows(pa.array(chosen, pa.uint64()), columns=read)
    return renamed(rows, columns)


def _nearest(ds: Dataset, query: SearchQuery, read: list[str]) -> pa.Table:
    """The vector search: Lance's ``nearest`` (through the column's index if any), or the exact float64 ranking;
    ``offset`` rows skipped after it."""
    assert query.vector is not None and query.column is not None and query.k is not None
    offset, limit, metric = query.offset or 0, query.k, search_metric(ds, query)
    vector = np.asarray(query.vector, dtype=np.float64)
    use_index = not query.bypass_vector_index
    if ranks_exactly(ds, query.column, metric, use_index=use_index):  # float64 / integer vectors, no index: here
        if query.fast_search:  # only indexed rows, and none is
            rows = pa.schema([*(ds.schema.field(c) for c in read), pa.field(DISTANCE, pa.float64())]).empty_table()
        else:
            rows = exact_nearest(ds, query.column, vector, metric, limit + offset, query.where, read,
                                 prefilter=query.prefilter)
    else:
        nearest: dict[str, object] = {"column": query.column, "q": lance_query(vector, metric),
                                      "k": max(limit + offset, 1), "metric": metric, "use_index": use_index}
        if query.nprobes is not None:
            nearest["nprobes"] = query.nprobes
        if query.refine_factor is not None:
            nearest["refine_factor"] = query.refine_factor
        rows = ds.to_table(columns=[*read, DISTANCE], filter=query.where, prefilter=query.prefilter,
                           nearest=nearest, fast_search=query.fast_search)
    return rows.slice(offset, limit)


def _full_text(ds: Dataset, query: SearchQuery, read: list[str], fts_columns: list[str]) -> pa.Table:
    """The full-text search over ``fts_columns``' FTS index, best ``_score`` first; ``offset`` rows skipped after
    it (Lance ignores a scan's offset under a full-text query)."""
    assert query.k is not None
    offset, limit = query.offset or 0, query.k
    rows = ds.to_table(columns=[*read, SCORE], full_text_query={"query": query.text, "columns": fts_columns},
                       filter=query.where, prefilter=query.prefilter, limit=max(limit + offset, 1),
                       fast_search=query.fast_search)
    return rows.slice(offset, limit)


def renamed(rows: pa.Table, columns: dict[str, str]) -> pa.Table:
    """``rows`` with the query's output columns (``out -> source column``), then any search column
    (``_distance``, ``_score``)."""
    extra = [n for n in rows.column_names if n not in columns.values() and n.startswith("_")]
    fields = [rows.schema.field(src).with_name(out) for out, src in columns.items()]
    fields += [rows.schema.field(n) for n in extra]
    arrays = [rows.column(src) for src in columns.values()] + [rows.column(n) for n in extra]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
