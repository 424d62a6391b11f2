"""A vector search's query vector, distance and exact ranking where Lance's flat search is not exact (core).

Lance's flat search compares a float64 column in float32 (its ``_distance`` is a float32), so points 1e-5 apart --
latitudes and longitudes -- come back out of order; it refuses integer columns (but uint8, for hamming), and it
answers a NaN query or a zero query under cosine with no rows at all.  So a query vector is checked here before
anything is read, and a float64 or integer column without a vector index is ranked here in float64 with numpy,
batch by batch, keeping only the nearest rows: the distances Lance defines (squared L2, 1 - cosine similarity,
1 - dot product), rows without a distance (a NULL vector, a NaN in it) left out as Lance leaves them, ties in the
order the table is scanned.  Float32 and float16 columns, and uint8 ones under hamming, stay Lance's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

METRICS = ("l2", "cosine", "dot", "hamming")
_SCAN_BATCH = 8_192
_FIXED_SIZE_HINT = ("declare it as a fixed-size list: pa.list_(pa.float32(), N) (N the vectors' length), e.g. "
                    "@udf(data_type=pa.list_(pa.float32(), N)) or the annotation -> pa.list_(pa.float32(), N); "
                    "-> list[float] declares a variable-length list")


def is_vector_type(t: pa.DataType) -> bool:
    """A column a vector search reads: a fixed-size list of floats or integers."""
    return pa.types.is_fixed_size_list(t) and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type))


def is_variable_length_vectors(t: pa.DataType) -> bool:
    """A list of numbers of any length per row (what ``-> list[float]`` declares): no vectors a search can read."""
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type))


def not_vectors(subject: str, column: str, t: pa.DataType) -> InvalidArgumentError:
    """The error for a search over a column that holds no vectors, saying how to declare one that does."""
    if is_variable_length_vectors(t):
        return InvalidArgumentError(f"{subject}: column '{column}' holds {t}, a variable-length list, not vectors; "
                                    f"{_FIXED_SIZE_HINT}")
    return InvalidArgumentError(f"{subject}: column '{column}' holds {t}, not vectors (a fixed-size list of floats)")


def no_vector_column(subject: str, schema: pa.Schema) -> InvalidArgumentError:
    """The error for a search of a table without a vector column; naming its variable-length lists, if any."""
    lists = [f.name for f in schema if is_variable_length_vectors(f.type)]
    hint = f"; variable-length list column(s) {lists} hold no vectors: {_FIXED_SIZE_HINT}" if lists else ""
    return InvalidArgumentError(f"{subject}: the table has no vector column (a fixed-size list of floats){hint}")


def default_vector_column(subject: str, schema: pa.Schema) -> str:
    """The column a search or an index build takes when none is named: the table's one vector column ("vector"
    among several); InvalidArgumentError listing the vector columns otherwise."""
    vectors = [f.name for f in schema if is_vector_type(f.type)]
    if len(vectors) == 1 or "vector" in vectors:
        return vectors[0] if len(vectors) == 1 else "vector"
    if vectors:
        raise InvalidArgumentError(f"{subject}: several vector columns {vectors}: name one with vector_column_name=")
    raise no_vector_column(subject, schema)


def query_vector(query: Any, subject: str) -> np.ndarray:
    """``query`` as a float64 vector (the user's values, unrounded); InvalidArgumentError naming the value when it
    is no vector of numbers or holds NaN or an infinity (no row has a distance from it)."""
    try:
        vector = np.asarray(query, dtype=np.float64)
    except (TypeError, ValueError):
        vector = None
    if vector is None or vector.ndim != 1 or not vector.size:
        raise InvalidArgumentError(f"{subject}: the query must be None or a vector (a list or array of numbers), "
                                   f"got {query!r}")
    bad = np.flatnonzero(~np.isfinite(vector))
    if len(bad):
        raise InvalidArgumentError(f"{subject}: the query vector holds a non-finite value ({vector[bad[0]]}) at "
                                   f"index {bad[0]}; every value of a query vector must be a finite number")
    return vector


def check_distance(subject: str, column: str, value_type: pa.DataType, vector: np.ndarray, metric: str) -> None:
    """InvalidArgumentError when ``metric`` cannot rank ``column``'s vectors against ``vector``: cosine of a zero
    vector (undefined), hamming of anything but uint8 vectors and a query of byte values."""
    if metric not in METRICS:
        raise InvalidArgumentError(f"{subject}: column '{column}': distance_type (metric) must be one of "
                                   f"{list(METRICS)}, got {metric!r}")
    if metric == "cosine" and not vector.any():
        raise InvalidArgumentError(f"{subject}: the query vector is all zeros {vector.tolist()}; a cosine distance is "
                                   "undefined for it (it has no direction): use l2 or dot, or another query")
    if metric == "hamming":
        if value_type != pa.uint8():
            raise InvalidArgumentError(f"{subject}: distance_type 'hamming' compares uint8 vectors; column "
                                       f"'{column}' holds {value_type} (use l2, cosine or dot)")
        if not np.all((vector >= 0) & (vector <= 255) & (vector == np.round(vector))):
            raise InvalidArgumentError(f"{subject}: distance_type 'hamming' compares bytes; the query vector "
                                       f"{vector.tolist()} holds values that are not integers from 0 to 255")


def index_metric(ds: Dataset, column: str) -> str | None:
    """The distance the vector index on ``column`` was trained with (``l2``, ``cosine``, ``dot``), None without
    one: what a search naming no ``distance_type`` ranks by, as Lance's own search does -- under another distance
    the index cannot answer and Lance compares every row instead."""
    for index in ds.describe_indices():
        metric = (index.details or {}).get("metric_type") if column in index.field_names else None
        if metric:
            return str(metric).lower()
    return None


def lance_query(vector: np.ndarray, metric: str) -> np.ndarray:
    """The query vector as Lance's flat search takes it: bytes for hamming, float32 otherwise."""
    return vector.astype(np.uint8 if metric == "hamming" else np.float32)


def ranks_exactly(ds: Dataset, column: str, metric: str, *, use_index: bool = True) -> bool:
    """Whether this module ranks the search (a float64 or integer column Lance would round or refuse, with no
    vector index of its own, or with one the search bypasses) rather than Lance."""
    value_type = ds.schema.field(column).type.value_type
    if metric == "hamming" or not (pa.types.is_float64(value_type) or pa.types.is_integer(value_type)):
        return False
    return not use_index or not any(column in index.field_names for index in ds.describe_indices())


def distances(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """Lance's distances of the rows of ``x`` from ``q``, in float64: squared L2, 1 - cosine similarity, 1 - dot."""
    if metric == "l2":
        d: np.ndarray = ((x - q) ** 2).sum(axis=1)
        return d
    if metric == "dot":
        return 1 - x @ q
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero row: NaN, left out
        return 1 - (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))


def exact_nearest(ds: Dataset, column: str, vector: np.ndarray, metric: str, k: int, where: str | None,
                  columns: list[str], *, prefilter: bool = True) -> pa.Table:
    """The ``k`` rows of ``ds`` matching ``where`` nearest ``vector`` in ``column``, nearest first: ``columns``
    and ``_distance`` (float64).  ``prefilter=False``: the ``k`` nearest of all rows, then those matching
    ``where`` (fewer than ``k``, maybe none), as Lance's post-filter."""
    dim = len(vector)
    post, where = (where, None) if not prefilter else (None, where)
    best_d = np.empty(0, np.float64)
    best_ids = np.empty(0, np.uint64)
    best_pos = np.empty(0, np.int64)
    seen = 0
    scanner = ds.scanner(columns=[column], filter=where, with_row_id=True, batch_size=_SCAN_BATCH)
    for batch in scanner.to_batches():
        vectors = batch.column(column)
        n = len(vectors)
        values = vectors.values.slice(vectors.offset * dim, n * dim)
        x = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False).reshape(n, dim)
        d = distances(x, vector, metric)
        keep = np.flatnonzero(vectors.is_valid().to_numpy(zero_copy_only=False) & ~np.isnan(d))
        best_d = np.concatenate([best_d, d[keep]])
        best_ids = np.concatenate([best_ids, batch.column("_rowid").to_numpy()[keep]])
        best_pos = np.concatenate([best_pos, keep + seen])
        seen += n
        order = np.lexsort((best_pos, best_d))[:k]
        best_d, best_ids, best_pos = best_d[order], best_ids[order], best_pos[order]
    if post is not None and len(best_ids):
        matching = ds.to_table(columns=[], filter=post, with_row_id=True).column("_rowid").to_numpy()
        matches = np.isin(best_ids, matching)
        best_d, best_ids = best_d[matches], best_ids[matches]
    rows = ds._take_rows(pa.array(best_ids, pa.uint64()), columns=columns) if len(best_ids) else \
        pa.schema([ds.schema.field(c) for c in columns]).empty_table()
    return rows.append_column(pa.field("_distance", pa.float64()), pa.array(best_d, pa.float64()))
