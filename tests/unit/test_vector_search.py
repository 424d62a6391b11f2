"""Exact vector search at its edges, on real Lance tables: float64 and integer vector columns ranked as numpy ranks
them in float64, and the queries or columns a search cannot answer refused with the package's error before
anything is read.  No JVM: a search computes nothing on Spark.

Lance's flat search compares a float64 column in float32 (its ``_distance`` is a float32): points 1e-5 apart, as
latitudes and longitudes are, come back in the wrong order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.stages import InProcessRunner

PARIS = np.array([48.8566, 2.3522])


def numpy_distances(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """Distances as Lance defines them, computed here in float64: squared L2, 1 - cosine similarity, 1 - dot."""
    x, q = x.astype(np.float64), q.astype(np.float64)
    if metric == "l2":
        return ((x - q) ** 2).sum(axis=1)
    if metric == "cosine":
        return 1 - (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    return 1 - x @ q


def numpy_top(x: np.ndarray, q: np.ndarray, k: int, metric: str = "l2", ids: np.ndarray | None = None
              ) -> tuple[list[int], np.ndarray]:
    d = numpy_distances(x, q, metric)
    order = np.argsort(d, kind="stable")[:k]
    return [int(i) for i in (order if ids is None else ids[order])], d[order]


def vector_table(db, name: str, vs: np.ndarray, value_type: pa.DataType, **kwargs):
    dim = vs.shape[1]
    data = pa.table({"id": pa.array(range(len(vs)), pa.int64()),
                     "v": pa.FixedSizeListArray.from_arrays(pa.array(vs.ravel(), value_type), dim)})
    return db.create_table(name, data, **kwargs)


def lat_lon(rng: np.random.Generator, n: int) -> np.ndarray:
    """Points of a city, on a 1e-5 degree grid (about a metre) with sub-grid jitter: float32 cannot tell them apart."""
    return PARIS + rng.integers(-40, 40, size=(n, 2)) * 1e-5 + rng.normal(0, 1e-7, size=(n, 2))


def test_a_float64_vector_column_is_ranked_exactly_as_numpy_ranks_it_in_float64(db):
    rng = np.random.default_rng(42)
    points = lat_lon(rng, 3_000)
    tbl = vector_table(db, "places", points, pa.float64(), max_rows_per_file=700)
    queries = lat_lon(rng, 50)
    for q in queries:
        want, dist = numpy_top(points, q, 5)
        got = tbl.search(q).select(["id"]).limit(5).to_arrow()
        assert got.column("id").to_pylist() == want
        assert got.schema.field("_distance").type == pa.float64()
        assert np.allclose(got.column("_distance").to_numpy(), dist, rtol=1e-9, atol=0)
    # a list of Python floats is the same query (not rounded to float32 on the way)
    q = queries[0]
    assert tbl.search(q.tolist()).limit(5).to_pandas()["id"].tolist() == numpy_top(points, q, 5)[0]
    # where filters before the search, offset pages through the ranking
    evens = np.arange(0, len(points), 2)
    want, _ = numpy_top(points[evens], q, 8, ids=evens)
    assert tbl.search(q).where("id % 2 = 0").select(["id"]).offset(3).limit(5).to_list() and \
        [r["id"] for r in tbl.search(q).where("id % 2 = 0").offset(3).limit(5).to_list()] == want[3:8]


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_float64_cosine_and_dot_searches_rank_as_numpy_in_float64(db, metric):
    rng = np.random.default_rng(5)
    if metric == "cosine":  # directions 1e-4 radians apart: 1 - cos differs by ~1e-8, below float32's resolution
        angles = rng.permutation(2_000) * 1e-4 + 0.3
        vs = np.stack([np.cos(angles), np.sin(angles)], axis=1) * rng.uniform(1, 50, size=(2_000, 1))
        queries = [np.array([np.cos(a), np.sin(a)]) * 3 for a in (0.3, 0.35, 0.41)]
    else:  # dot products ~1e6 that differ by ~1e-2, below float32's resolution at 1e6
        vs = np.stack([1e3 + rng.permutation(2_000) * 1e-5, np.full(2_000, 1e3)], axis=1)
        queries = [np.array([1e3, 0.0]), np.array([-1e3, 1.0])]
    tbl = vector_table(db, "dirs", vs, pa.float64(), max_rows_per_file=500)
    for q in queries:
        want, dist = numpy_top(vs, q, 10, metric)
        got = tbl.search(q).distance_type(metric).select(["id"]).to_arrow()  # the default limit: 10
        assert got.column("id").to_pylist() == want
        assert np.allclose(got.column("_distance").to_numpy(), dist, rtol=1e-9, atol=1e-15)


def test_rows_a_distance_cannot_rank_are_left_out_as_lance_leaves_them_out(db):
    """NULL vectors and vectors holding NaN have no distance (Lance leaves them out of a flat search too)."""
    vs = pa.array([[1.0, 0.0], None, [0.0, 2.0], [float("nan"), 1.0], [3.0, 4.0]], pa.list_(pa.float64(), 2))
    tbl = db.create_table("sparse", pa.table({"id": pa.array(range(5), pa.int64()), "v": vs}))
    assert tbl.search([0.0, 0.0]).select(["id"]).to_list() == [
        {"id": 0, "_distance": 1.0}, {"id": 2, "_distance": 4.0}, {"id": 4, "_distance": 25.0}]


def test_an_integer_vector_column_is_searched_as_its_float64_values(db):
    rng = np.random.default_rng(3)
    vs = rng.integers(-100, 100, size=(500, 3))
    for value_type in (pa.int32(), pa.int64(), pa.int8(), pa.uint16()):
        name = f"ints_{value_type}"
        tbl = vector_table(db, name, np.abs(vs) if pa.types.is_unsigned_integer(value_type) else vs, value_type)
        x = np.abs(vs) if pa.types.is_unsigned_integer(value_type) else vs
        q = np.array([3.5, -1.0, 20.0])
        for metric in ("l2", "cosine", "dot"):
            want, dist = numpy_top(x, q, 7, metric)
            got = tbl.search(q).distance_type(metric).select(["id"]).limit(7).to_arrow()
            assert got.column("id").to_pylist() == want, (value_type, metric)
            assert np.allclose(got.column("_distance").to_numpy(), dist, rtol=1e-9)
    assert db.open_table("ints_int32").search([1, 2, 3]).limit(1).to_list()[0]["id"] == \
        numpy_top(vs, np.array([1, 2, 3]), 1)[0][0]


def test_a_nan_or_infinite_query_vector_is_refused_naming_the_argument_and_value(db):
    tbl = vector_table(db, "items", np.eye(3), pa.float32())
    for bad in ([1.0, float("nan"), 0.0], np.array([np.inf, 0.0, 0.0]), [0.0, 0.0, -float("inf")]):
        with pytest.raises(gp.InvalidArgumentError, match=r"search on table 'items': the query vector holds a "
                                                          r"non-finite value \((nan|inf|-inf)\) at index \d"):
            tbl.search(bad)


def test_a_zero_query_vector_is_refused_for_cosine_and_allowed_for_l2_and_dot(db):
    tbl = vector_table(db, "items", np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]]), pa.float32())
    zero = tbl.search([0.0, 0.0])
    with pytest.raises(gp.InvalidArgumentError, match=r"search on table 'items': the query vector is all zeros "
                                                      r"\[0.0, 0.0\]; a cosine distance is undefined for it"):
        zero.distance_type("cosine")
    with pytest.raises(gp.InvalidArgumentError, match="cosine distance is undefined"):
        zero.metric("cosine")
    assert [r["id"] for r in zero.select(["id"]).to_list()] == [0, 1, 2]  # l2: by the rows' norms
    assert [r["_distance"] for r in zero.distance_type("dot").to_list()] == [1.0, 1.0, 1.0]
    f64 = vector_table(db, "items64", np.array([[1.0, 0.0], [0.0, 2.0]]), pa.float64())
    with pytest.raises(gp.InvalidArgumentError, match="all zeros"):
        f64.search(np.zeros(2)).distance_type("cosine")


def test_a_variable_length_list_column_is_refused_saying_how_to_declare_a_fixed_size_one(db, call_dir):
    @gp.udf
    def embed(x: int) -> list[float]:
        return [float(x), 1.0]

    data = pa.table({"id": pa.array(range(4), pa.int64()), "x": pa.array(range(4), pa.int64()),
                     "emb": pa.array([[1.0, 2.0]] * 4, pa.list_(pa.float32()))})
    tbl = db.create_table("docs", data)
    tbl.add_columns({"e2": embed})
    before = tbl.version
    hint = (r"declare it as a fixed-size list: pa.list_\(pa.float32\(\), N\) \(N the vectors' length\), e.g. "
            r"@udf\(data_type=pa.list_\(pa.float32\(\), N\)\) or the annotation -> pa.list_\(pa.float32\(\), N\); "
            r"-> list\[float\] declares a variable-length list")
    for column, holds in (("emb", "list<item: float>"), ("e2", "list<item: double>")):
        with pytest.raises(gp.InvalidArgumentError, match=rf"search on table 'docs': column '{column}' holds "
                                                          rf"{holds}, a variable-length list, not vectors; {hint}"):
            tbl.search([1.0, 2.0], vector_column_name=column)
    with pytest.raises(gp.InvalidArgumentError, match=r"search on table 'docs': the table has no vector column .*"
                                                      r"variable-length list column\(s\) \['emb', 'e2'\].*"
                                                      r"pa.list_\(pa.float32\(\), N\)"):
        tbl.search([1.0, 2.0])
    assert tbl.version == before

    # the spellings the hint shows declare vector columns a search reads
    @gp.udf
    def embed_fixed(x: int) -> pa.list_(pa.float32(), 2):  # type: ignore[valid-type]
        return [float(x), 1.0]

    @gp.udf(data_type=pa.list_(pa.float32(), 2))
    def embed_typed(x: int) -> list[float]:
        return [1.0, float(x)]

    tbl.add_columns({"e3": embed_fixed, "e4": embed_typed})
    for column in ("e3", "e4"):
        tbl.backfill(column, spark=InProcessRunner(parallelism=1))
    assert tbl.search([3.0, 1.0], vector_column_name="e3").select(["x"]).limit(1).to_list() == [
        {"x": 3, "_distance": 0.0}]
    assert tbl.search([1.0, 2.0], vector_column_name="e4").select(["x"]).limit(1).to_list() == [
        {"x": 2, "_distance": 0.0}]


def test_hamming_is_for_uint8_vectors_only_refused_naming_the_column_and_type(db):
    tbl = vector_table(db, "items", np.array([[1.0, 0.0], [0.0, 2.0]]), pa.float64())
    with pytest.raises(gp.InvalidArgumentError, match=r"search on table 'items': distance_type 'hamming' compares "
                                                      r"uint8 vectors; column 'v' holds double"):
        tbl.search([1.0, 0.0]).distance_type("hamming")
    bits = vector_table(db, "bits", np.array([[1, 2], [3, 4], [1, 3]]), pa.uint8())
    got = bits.search([1, 2]).distance_type("hamming").select(["id"]).to_list()
    assert [r["id"] for r in got] == [0, 2, 1] and [r["_distance"] for r in got] == [0.0, 1.0, 3.0]
