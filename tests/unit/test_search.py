"""Search through the read seam on real Lance tables, with real indexes built by pylance in the test: a vector
search's ``where`` before or after it (``prefilter``), ``nprobes`` / ``refine_factor`` reaching Lance's IVF index,
``fast_search`` leaving out rows the index does not cover, a full-text search over an INVERTED index, and the
inputs a search cannot answer refused with the package's error before anything is read.  The same on a
materialized view and on a chunker view (a view is a table).  No JVM: a search computes nothing on Spark, and
the views here are refreshed in-process.

The indexes are built with pylance directly (``ds.create_index`` / ``ds.create_scalar_index``): what is tested is
that the search reads through them, not how they are built.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.search_query import SearchQuery, run_search
from geneva_provider.stages import InProcessRunner
from tests.helpers import Chunk

WORDS = ("apple", "banana", "cherry", "damson", "elder", "fig")


def exact_top(vs: np.ndarray, q: np.ndarray, k: int, ids: np.ndarray | None = None) -> list[int]:
    """The ``k`` nearest rows of ``vs`` to ``q`` by squared L2 in float64 (their ids, nearest first)."""
    d = ((vs.astype(np.float64) - q) ** 2).sum(axis=1)
    order = np.argsort(d, kind="stable")[:k]
    return [int(i) for i in (order if ids is None else ids[order])]


def vector_data(vs: np.ndarray, start: int = 0) -> pa.Table:
    n, dim = vs.shape
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "tag": [("a", "b", "c")[i % 3] for i in range(start, start + n)],
                     "text": [" ".join(WORDS[j] for j in range(len(WORDS)) if (i >> j) & 1) or "none"
                              for i in range(start, start + n)],
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(vs.ravel(), pa.float32()), dim)})


@pytest.fixture
def indexed(db):
    """4,000 random 32-d vectors over 4 fragments with an IVF_PQ index (32 partitions, 8 sub-vectors)."""
    vs = np.random.default_rng(11).normal(size=(4_000, 32)).astype(np.float32)
    tbl = db.create_table("indexed", vector_data(vs), max_rows_per_file=1_000)
    tbl.dataset().create_index("vec", "IVF_PQ", num_partitions=32, num_sub_vectors=8)
    return tbl, vs


def recall(tbl, vs: np.ndarray, queries: np.ndarray, build) -> float:
    hits = 0
    for q in queries:
        got = build(tbl.search(q)).select(["id"]).limit(10).to_arrow().column("id").to_pylist()
        hits += len(set(got) & set(exact_top(vs, q, 10)))
    return hits / (10 * len(queries))


def test_nprobes_and_refine_factor_reach_lances_index(indexed):
    tbl, vs = indexed
    queries = np.random.default_rng(12).normal(size=(20, 32))
    one = recall(tbl, vs, queries, lambda s: s.nprobes(1))
    every = recall(tbl, vs, queries, lambda s: s.nprobes(32).refine_factor(50))
    assert one < 0.6 < 0.95 <= every, (one, every)
    # refine_factor re-ranks by the exact distance: without it the distances are the index's (PQ) estimates
    q = queries[0]
    exact = ((vs.astype(np.float64) - q) ** 2).sum(axis=1)
    refined = tbl.search(q).nprobes(32).refine_factor(20).select(["id"]).to_arrow()
    estimated = tbl.search(q).nprobes(32).select(["id"]).to_arrow()
    assert np.allclose(refined.column("_distance").to_numpy(), exact[refined.column("id").to_numpy()], rtol=1e-4)
    assert not np.allclose(estimated.column("_distance").to_numpy(), exact[estimated.column("id").to_numpy()],
                           rtol=1e-2)


def test_bypass_vector_index_answers_exactly_where_the_column_has_an_index(indexed, db):
    tbl, vs = indexed
    queries = np.random.default_rng(13).normal(size=(10, 32))
    assert recall(tbl, vs, queries, lambda s: s) < 0.9  # the index's answer, approximate
    assert recall(tbl, vs, queries, lambda s: s.bypass_vector_index()) == 1.0
    q = queries[0]
    got = tbl.search(q).bypass_vector_index().select(["id"]).limit(5).to_arrow()
    exact = ((vs.astype(np.float64) - q) ** 2).sum(axis=1)
    assert got.column("id").to_pylist() == exact_top(vs, q, 5)
    assert np.allclose(got.column("_distance").to_numpy(), np.sort(exact)[:5], rtol=1e-5)
    # a float64 column with an index: bypassing it ranks in float64, as without one
    vs64 = np.random.default_rng(14).normal(size=(600, 4))
    t64 = db.create_table("t64", pa.table({"id": pa.array(range(600), pa.int64()), "vec": pa.FixedSizeListArray
                                           .from_arrays(pa.array(vs64.ravel(), pa.float64()), 4)}))
    t64.to_lance().create_index("vec", "IVF_FLAT", num_partitions=2)
    got64 = t64.search(vs64[3]).bypass_vector_index().select(["id"]).limit(4).to_arrow()
    assert got64.column("id").to_pylist() == exact_top(vs64, vs64[3], 4)
    assert got64.schema.field("_distance").type == pa.float64()
    with pytest.raises(gp.InvalidArgumentError, match="bypass_vector_index is for a vector search"):
        tbl.search(None).bypass_vector_index()


def test_fast_search_leaves_out_rows_the_index_does_not_cover_and_a_plain_search_finds_them(indexed):
    tbl, vs = indexed
    q = vs[7]
    tbl.add(vector_data(vs[7:8] + np.float32(1e-3), start=10_000))  # after the index: a near twin of row 7
    near = tbl.search(q).nprobes(32).refine_factor(10).select(["id"]).limit(3).to_arrow().column("id").to_pylist()
    assert near[:2] == [7, 10_000]
    fast = tbl.search(q).nprobes(32).refine_factor(10).fast_search().select(["id"]).limit(3).to_list()
    fast_ids = [r["id"] for r in fast]
    assert fast_ids[:1] == [7] and 10_000 not in fast_ids and len(fast_ids) == 3
    # without an index, fast_search has no indexed row to search (as LanceDB)
    flat = tbl.connection.create_table("flat", vector_data(vs[:50]))
    assert flat.search(vs[3]).fast_search().to_list() == []
    assert flat.search(vs[3]).select(["id"]).limit(1).to_list()[0]["id"] == 3


@pytest.mark.parametrize("index", [False, True], ids=["flat", "ivf_pq"])
def test_a_prefiltered_search_returns_only_matching_rows_and_k_of_them(db, index):
    vs = np.random.default_rng(3).normal(size=(3_000, 16)).astype(np.float32)
    tbl = db.create_table("t", vector_data(vs), max_rows_per_file=700)
    if index:
        tbl.dataset().create_index("vec", "IVF_PQ", num_partitions=8, num_sub_vectors=4)
    ids = np.arange(len(vs))
    for q in np.random.default_rng(4).normal(size=(5, 16)):
        for where, keep in (("tag = 'b'", ids % 3 == 1), ("id < 40", ids < 40)):
            search = tbl.search(q).where(where, prefilter=True).select(["id", "tag"]).limit(12)
            rows = (search.nprobes(8).refine_factor(50) if index else search).to_list()
            assert len(rows) == 12 and all(keep[r["id"]] for r in rows)
            assert [r["id"] for r in rows] == exact_top(vs[keep], q, 12, ids=ids[keep])
    default = tbl.search(vs[5]).where("id < 40").nprobes(8).refine_factor(50).limit(3)  # prefilter: the default
    assert [r["id"] for r in default.to_list()] == exact_top(vs[:40], vs[5], 3)


@pytest.mark.parametrize("value_type", [pa.float32(), pa.float64()])
def test_a_postfiltered_search_filters_the_k_nearest_after_the_search(db, value_type):
    vs = np.random.default_rng(8).normal(size=(1_000, 8))
    data = vector_data(vs.astype(np.float32))
    data = data.set_column(3, "vec", pa.FixedSizeListArray.from_arrays(pa.array(vs.ravel(), value_type), 8))
    tbl = db.create_table("t", data, max_rows_per_file=300)
    for q in np.random.default_rng(9).normal(size=(5, 8)):
        nearest = exact_top(vs, q, 10)
        got = tbl.search(q).where("tag = 'a'", prefilter=False).select(["id"]).limit(10).to_list()
        assert [r["id"] for r in got] == [i for i in nearest if i % 3 == 0]  # fewer than 10: LanceDB's postfilter
        pre = tbl.search(q).where("tag = 'a'").select(["id"]).limit(10).to_list()
        assert len(pre) == 10 and all(r["id"] % 3 == 0 for r in pre)
    far = tbl.search(vs[1]).where("id = 999", prefilter=False).limit(3).to_list()
    assert far == [] if 999 not in exact_top(vs, vs[1], 3) else len(far) == 1


def test_a_full_text_search_over_an_inverted_index_equals_a_scan_for_its_tokens(db):
    vs = np.random.default_rng(1).normal(size=(640, 4)).astype(np.float32)
    tbl = db.create_table("docs", vector_data(vs), max_rows_per_file=200)
    tbl.dataset().create_scalar_index("text", "INVERTED")
    texts = tbl.to_arrow().column("text").to_pylist()
    for word in WORDS:
        want = {i for i, t in enumerate(texts) if word in t.split()}
        got = tbl.search(word, query_type="fts").select(["id"]).limit(len(texts)).to_arrow()
        assert set(got.column("id").to_pylist()) == want and got.num_rows == len(want)
        assert got.column_names == ["id", "_score"]
        scores = got.column("_score").to_numpy()
        assert (scores > 0).all() and (np.diff(scores) <= 0).all()  # best first
        # "auto" reads a string as a full-text query; fts_columns names the indexed column
        assert len(tbl.search(word, fts_columns="text").to_list()) == min(10, len(want))  # LanceDB's default k
        pre = tbl.search(word).where("tag = 'b'").select(["id", "tag"]).limit(len(texts)).to_list()
        assert {r["id"] for r in pre} == {i for i in want if i % 3 == 1}
    assert tbl.search("zebra", query_type="fts").to_list() == []
    # rows added after the index: found, unless fast_search
    tbl.add(pa.table({"id": pa.array([5_000], pa.int64()), "tag": ["a"], "text": ["zebra apple"],
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(vs[0]), 4)}))
    assert [r["id"] for r in tbl.search("zebra").select(["id"]).to_list()] == [5_000]
    assert tbl.search("zebra").fast_search().to_list() == []


def test_a_search_query_is_data_it_round_trips_through_json_and_reads_the_same_rows(indexed):
    tbl, vs = indexed
    query = tbl.search(vs[1]).where("tag != 'c'", prefilter=False).nprobes(4).refine_factor(3).fast_search() \
        .distance_type("l2").select({"key": "id"}).offset(1).limit(5)
    spec = query.search_query
    again = SearchQuery.from_json(spec.to_json())
    assert again == spec and (again.nprobes, again.refine_factor, again.prefilter, again.fast_search) == (4, 3, False,
                                                                                                         True)
    assert run_search(tbl.dataset(), again, "table 'indexed'").equals(query.to_arrow())
    assert query.to_pandas()["key"].tolist() == [r["key"] for r in query.to_list()]


def test_search_inputs_that_cannot_run_are_refused_naming_the_column_and_value_and_change_nothing(indexed):
    tbl, vs = indexed
    before = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=r"search on table 'indexed': column 'vec' holds vectors of 32 "
                                                      r"values, the query has 3: \[1.0, 2.0, 3.0\]"):
        tbl.search([1.0, 2.0, 3.0])
    with pytest.raises(gp.InvalidArgumentError, match=r"search on table 'indexed': column 'vec': distance_type "
                                                      r"\(metric\) must be one of .*, got 'manhattan'"):
        tbl.search(vs[0]).metric("manhattan")
    with pytest.raises(gp.InvalidArgumentError, match=r"search on table 'indexed': a full-text search of 'apple' "
                                                      r"needs an FTS \(INVERTED\) index on one of the columns "
                                                      r"'tag', 'text'"):
        tbl.search("apple", query_type="fts")
    with pytest.raises(gp.InvalidArgumentError, match=r"query_type 'fts' takes a text"):
        tbl.search(vs[0], query_type="fts")
    with pytest.raises(gp.InvalidArgumentError, match=r"invalid where filter 'nope > 1' for table 'indexed'.*"
                                                      r"No field named nope.*The table's columns are"):
        tbl.search(vs[0]).where("nope > 1", prefilter=True).to_arrow()
    with pytest.raises(gp.InvalidArgumentError, match=r"invalid where filter 'nope > 1'"):
        tbl.search(vs[0]).where("nope > 1", prefilter=False).to_arrow()
    with pytest.raises(gp.InvalidArgumentError, match=r"vector query on table 'indexed': nprobes must be a positive "
                                                      r"integer, got 0"):
        tbl.search(vs[0]).nprobes(0)
    with pytest.raises(gp.InvalidArgumentError, match=r"refine_factor must be a positive integer, got 1.5"):
        tbl.search(vs[0]).refine_factor(1.5)
    with pytest.raises(gp.InvalidArgumentError, match=r"query on table 'indexed': nprobes is for a vector search"):
        tbl.search(None).nprobes(4)
    with pytest.raises(gp.InvalidArgumentError, match=r"fast_search is for a vector or full-text search"):
        tbl.search(None).fast_search()
    with pytest.raises(gp.InvalidArgumentError, match=r"prefilter must be True or False, got 'yes'"):
        tbl.search(vs[0]).where("id > 1", prefilter="yes")
    tbl.dataset().create_scalar_index("text", "INVERTED")
    with pytest.raises(gp.InvalidArgumentError, match=r"a full-text search of 'a' needs an FTS \(INVERTED\) index "
                                                      r"on column 'tag', which has none \(FTS-indexed columns: "
                                                      r"\['text'\]\)"):
        tbl.search("a", fts_columns=["tag"])
    with pytest.raises(gp.ColumnError, match=r"full-text column 'body' not found"):
        tbl.search("a", fts_columns="body")
    with pytest.raises(gp.InvalidArgumentError, match=r"full-text query on table 'indexed': distance_type is for a "
                                                      r"vector search"):
        tbl.search("apple").distance_type("cosine")
    after = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=r"create_materialized_view.*vector search"):
        tbl.connection.create_materialized_view("near", tbl.search(vs[0]))
    with pytest.raises(gp.InvalidArgumentError, match=r"create_materialized_view.*full-text search"):
        tbl.connection.create_materialized_view("matches", tbl.search("apple"))
    with pytest.raises(gp.InvalidArgumentError, match=r"create_udtf_view 'chunks'.*full-text search"):
        tbl.connection.create_udtf_view("chunks", tbl.search("apple"), udtf=split)
    assert tbl.version == after == before + 1 and tbl.connection.table_names() == ["indexed"]
    tbl.dataset().validate()


@gp.udf(data_type=pa.list_(pa.float32(), 4))
def embed(text: str) -> list[float]:
    """A toy embedding: how often each of the first four words appears."""
    words = text.split()
    return [float(words.count(w)) for w in WORDS[:4]]


@gp.udf(data_type=pa.list_(pa.float32(), 4))
def embed_chunk(chunk: str) -> list[float]:
    """The toy embedding of a chunk."""
    words = chunk.split()
    return [float(words.count(w)) for w in WORDS[:4]]


@gp.chunker
def split(text: str) -> Iterator[Chunk]:
    words = text.split()
    for i in range(0, len(words), 2):
        yield Chunk(" ".join(words[i:i + 2]), i)


def test_a_materialized_view_and_a_chunker_view_are_searched_as_tables(db):
    rows = 96
    docs = db.create_table("docs", vector_data(np.zeros((rows, 4), np.float32)), stable_row_ids=True)
    texts = docs.to_arrow().column("text").to_pylist()
    view = db.create_materialized_view("v", docs.search(None).where("tag = 'a'").select(["id", "text"]))
    view.add_columns({"emb": embed})
    view.refresh(spark=InProcessRunner(), progress=False)
    view.backfill("emb", spark=InProcessRunner(), progress=False)
    mine = [i for i in range(rows) if i % 3 == 0]
    emb = np.array([embed.func(texts[i]) for i in mine])
    q = np.array([1.0, 0.0, 1.0, 0.0])
    got = view.search(q).select(["id"]).limit(5).to_list()
    d = ((emb - q) ** 2).sum(axis=1)
    assert [r["_distance"] for r in got] == sorted(d)[:5] and {r["id"] for r in got} <= set(mine)
    assert [r["id"] for r in view.search(q).where("id > 48").limit(4).to_list()] == \
        [mine[i] for i in np.argsort(np.where(np.array(mine) > 48, d, np.inf), kind="stable")[:4]]

    chunks = db.create_udtf_view("chunks", docs.search(None).select(["id", "text"]), udtf=split)
    chunks.refresh(spark=InProcessRunner(), progress=False)
    chunks.dataset().create_scalar_index("chunk", "INVERTED")
    pieces = chunks.to_arrow(columns=["id", "chunk"]).to_pylist()
    want = sorted((r["id"], r["chunk"]) for r in pieces if "cherry" in r["chunk"].split())
    got = chunks.search("cherry").select(["id", "chunk"]).limit(len(pieces)).to_list()
    assert sorted((r["id"], r["chunk"]) for r in got) == want and want
    # chunk -> embed -> search: an embedding column on the chunker view, indexed, searched through its index
    chunks.add_columns({"emb": embed_chunk})
    chunks.backfill("emb", spark=InProcessRunner(), progress=False)
    chunks.to_lance().create_index("emb", "IVF_FLAT", num_partitions=2)
    rows = chunks.to_arrow(columns=["id", "chunk", "emb"]).to_pylist()
    q = np.array([0.0, 1.0, 1.0, 0.0])
    d = np.array([((np.array(r["emb"]) - q) ** 2).sum() for r in rows])
    got = chunks.search(q, vector_column_name="emb").where("id >= 10").nprobes(2).select(["id", "chunk"]) \
        .limit(6).to_list()
    keep = np.array([r["id"] >= 10 for r in rows])
    assert [r["_distance"] for r in got] == pytest.approx(sorted(d[keep])[:6]) and all(r["id"] >= 10 for r in got)


def test_the_cli_searches_through_the_same_seam_and_refuses_the_same_inputs(indexed, capsys):
    import json

    from geneva_provider.cli import main

    tbl, vs = indexed
    db = tbl.connection.uri
    q = vs[9].tolist()
    code = main(["--db", db, "--json", "table", "search", "indexed", "--vector", json.dumps(q), "--where", "id < 500",
                 "--nprobes", "32", "--refine-factor", "20", "--select", "id,tag", "--limit", "4"])
    out, _ = capsys.readouterr()
    want = tbl.search(q).where("id < 500").nprobes(32).refine_factor(20).select(["id", "tag"]).limit(4).to_list()
    assert code == 0 and json.loads(out) == want and want[0]["id"] == 9 and len(want) == 4
    assert main(["--db", db, "table", "search", "indexed", "--vector", json.dumps(q), "--select", "id",
                 "--limit", "2", "--nprobes", "32", "--refine-factor", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "_distance"] and lines[2].split()[0] == "9" and len(lines) == 4
    before = tbl.version
    assert main(["--db", db, "table", "search", "indexed", "--text", "apple"]) == 2
    assert "a full-text search of 'apple' needs an FTS (INVERTED) index on one of the columns 'tag', 'text'" in \
        capsys.readouterr().err
    assert main(["--db", db, "table", "search", "indexed", "--vector", "[1, 2]"]) == 2
    assert "column 'vec' holds vectors of 32 values, the query has 2: [1.0, 2.0]" in capsys.readouterr().err
    assert main(["--db", db, "table", "search", "indexed", "--vector", json.dumps(q), "--metric", "manhattan"]) == 2
    assert "column 'vec': distance_type (metric) must be one of" in capsys.readouterr().err
    tbl.dataset().create_scalar_index("text", "INVERTED")
    assert main(["--db", db, "--json", "table", "search", "indexed", "--text", "fig", "--where", "tag = 'c'",
                 "--select", "id,text", "--limit", "1000"]) == 0
    got = json.loads(capsys.readouterr().out)
    texts = tbl.to_arrow().column("text").to_pylist()
    assert {r["id"] for r in got} == {i for i, t in enumerate(texts) if "fig" in t.split() and i % 3 == 2}
    assert tbl.version == before + 1  # the index; no search wrote anything
