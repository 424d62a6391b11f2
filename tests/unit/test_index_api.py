"""Index builds called the way LanceDB users call them (``create_index(num_bits=4)``, ``index_stats(...)
.distance_type`` / ``.num_indices``, an FTS search without an FTS index), on the in-process runner (no JVM), real
Lance tables: the parameters a user passes reach the index Lance writes, and LanceDB's names answer."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from geneva_provider.core.errors import ColumnError, InvalidArgumentError
from geneva_provider.stages import InProcessRunner
from tests.index_data import clustered, queries, recall

RUNNER = InProcessRunner(parallelism=2)


@pytest.fixture
def tbl(db):
    """4000 rows of clustered 64-d vectors in 8 fragments."""
    return db.create_table("t", clustered(4000), max_rows_per_file=500)


@pytest.mark.parametrize("index_type", ["IVF_PQ", "IVF_HNSW_PQ"])
def test_num_bits_4_builds_a_4_bit_codebook(tbl, index_type):
    result = tbl.create_index("vec", index_type=index_type, num_bits=4, num_partitions=8, num_sub_vectors=16,
                              spark=RUNNER)
    assert result.rows_indexed == 4000
    ds = tbl.dataset()
    ds.validate()
    [segment] = ds.stats.index_stats("vec_idx")["indices"]
    assert (segment["sub_index"]["nbits"], segment["sub_index"]["num_sub_vectors"]) == (4, 16)
    assert recall(ds, queries(ds.to_table())) >= 0.9


def test_index_stats_answers_lancedbs_index_statistics_names(tbl):
    tbl.create_index("vec", metric="cosine", index_type="IVF_SQ", num_partitions=8, spark=RUNNER, target_groups=2)
    tbl.create_scalar_index("id", spark=RUNNER)
    stats = tbl.index_stats("vec_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows, stats.index_type) == (4000, 0, "IVF_SQ")
    assert stats.distance_type == "cosine"
    assert stats.num_indices == stats.num_segments == 2  # SQ segments are never merged
    assert stats.loss is not None and stats.loss > 0
    scalar = tbl.index_stats("id_idx")
    assert (scalar.distance_type, scalar.num_indices, scalar.loss) == (None, 1, None)


def test_an_fts_search_without_an_fts_index_says_to_call_create_fts_index(db):
    tbl = db.create_table("docs", pa.table({"id": [0, 1, 2], "label": ["a", "b", "c"],
                                            "text": ["cats here", "dogs there", "cats and dogs"]}))
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"search on table 'docs': a full-text search of 'cats' needs an FTS "
                                                   r"\(INVERTED\) index on one of the columns 'label', 'text', none of "
                                                   r"which has one .*tbl\.create_fts_index\('label'\)"):
        tbl.search("cats", query_type="fts").limit(5).to_list()
    with pytest.raises(InvalidArgumentError, match=r"on column 'text', which has none .*create_fts_index\('text'\)"):
        tbl.search("cats", query_type="fts", fts_columns=["text"]).limit(5).to_list()
    assert tbl.version == version and tbl.list_indices() == []
    tbl.create_fts_index("text", spark=RUNNER)  # what the message says to do, and the search then answers
    assert sorted(r["id"] for r in tbl.search("cats", query_type="fts").limit(5).to_list()) == [0, 2]


def test_a_search_naming_no_distance_ranks_by_the_indexs_metric_through_the_index(tbl):
    tbl.create_index(vector_column_name="vec", metric="cosine", index_type="IVF_FLAT", num_partitions=8,
                     spark=RUNNER)
    q = queries(tbl.dataset().to_table(), count=1)[0]
    rows = tbl.search(q).nprobes(8).select(["id", "vec"]).limit(5).to_arrow()
    x = np.array(rows.column("vec").to_pylist(), np.float64)
    cosine = 1 - x @ q / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    assert np.allclose(rows.column("_distance").to_numpy(), cosine, atol=1e-4)  # cosine, not squared L2
    exact = tbl.search(q).distance_type("cosine").bypass_vector_index().select(["id"]).limit(5).to_list()
    assert [r["id"] for r in rows.select(["id"]).to_pylist()] == [r["id"] for r in exact]
    l2 = tbl.search(q).distance_type("l2").select(["id", "vec"]).limit(1).to_arrow()  # named: that distance
    assert l2.column("_distance")[0].as_py() == pytest.approx(float(((np.array(l2.column("vec")[0].as_py()) - q)
                                                                     ** 2).sum()), rel=1e-4)


@pytest.mark.parametrize(("build", "kind"), [
    (lambda t: t.create_index("vec"), "IVF_PQ"),
    (lambda t: t.create_scalar_index("id"), "BTREE"),
    (lambda t: t.create_scalar_index("tags", index_type="LABEL_LIST"), "LABEL_LIST"),
    (lambda t: t.create_fts_index("text"), "INVERTED"),
])
def test_an_index_on_an_empty_table_is_refused_before_spark_and_changes_nothing(db, build, kind):
    """Lance builds no segment of no rows: a BTREE build committed an empty version and no index, an FTS build
    failed inside the job with Lance's ValueError.  spark=None: a session would start only after the check."""
    empty = db.create_table("empty", pa.table({
        "id": pa.array([], pa.int64()), "vec": pa.array([], pa.list_(pa.float32(), 8)),
        "tags": pa.array([], pa.list_(pa.string())), "text": pa.array([], pa.string())}))
    version = empty.version
    with pytest.raises(InvalidArgumentError, match=rf"create_index on table 'empty': the table has no rows, nothing "
                                                   rf"to build a {kind} index on column '\w+' from; add rows first"):
        build(empty)
    assert empty.version == version and empty.list_indices() == [] and db.list_jobs("empty") == []


def test_create_index_async_refuses_what_the_table_rules_out_before_it_returns(tbl, db):
    """The checks against the table ran in the background thread: a handle came back for a build bound to fail."""
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"create_index on table 't': num_sub_vectors=7 does not divide "
                                                   r"the dimension 64 of column 'vec'"):
        tbl.create_index_async("vec", num_sub_vectors=7, spark=RUNNER)
    with pytest.raises(ColumnError, match=r"create_index on table 't': no column 'nope'"):
        tbl.create_index_async("nope", spark=RUNNER)
    assert tbl.version == version and db.list_jobs("t") == []
    tbl.create_index_async("vec", index_type="IVF_FLAT", num_partitions=8, spark=RUNNER).result()
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"an index named 'vec_idx' exists on column 'vec'; pass "
                                                   r"replace=True"):
        tbl.create_index_async("vec", index_type="IVF_FLAT", replace=False, spark=RUNNER)
    assert tbl.version == version and [j.status.value for j in db.list_jobs("t")] == ["DONE"]


def test_list_indices_names_each_type_as_it_was_asked_for(db):
    """Lance calls them BTree / Bitmap / LabelList / Inverted; the user asked for BTREE / BITMAP / LABEL_LIST and
    an FTS index, and LanceDB's IndexStatistics says so."""
    tbl = db.create_table("s", pa.table({"id": list(range(40)), "label": [f"l{i % 3}" for i in range(40)],
                                         "tags": [[f"t{i % 4}"] for i in range(40)],
                                         "text": [f"word{i % 5} text" for i in range(40)]}))
    tbl.create_scalar_index("id", spark=RUNNER)
    tbl.create_scalar_index("label", index_type="BITMAP", spark=RUNNER)
    tbl.create_scalar_index("tags", index_type="LABEL_LIST", spark=RUNNER)
    tbl.create_fts_index("text", spark=RUNNER)
    assert [(i.name, i.index_type, i.num_indexed_rows) for i in tbl.list_indices()] == [
        ("id_idx", "BTREE", 40), ("label_idx", "BITMAP", 40), ("tags_idx", "LABEL_LIST", 40), ("text_idx", "FTS", 40)]
    assert "LABEL_LIST" in str(tbl.status())
    hits = tbl.search("word3", query_type="fts").select(["id"]).limit(40).to_list()
    assert sorted(r["id"] for r in hits) == list(range(3, 40, 5))


@pytest.mark.parametrize(("build", "message"), [
    (lambda t: t.create_index("vec", metric="hamming"), r"column 'vec': metric must be one of \['l2', 'cosine', "
                                                        r"'dot'\], got 'hamming'"),
    (lambda t: t.create_index(column="vec", index_type="IVF_XYZ"), r"column 'vec': unknown index_type 'IVF_XYZ'"),
    (lambda t: t.create_index(index_type="HNSW"), r"unknown index_type 'HNSW'"),
    (lambda t: t.create_index("vec", num_bits=3), r"column 'vec': num_bits must be one of \[4, 8\], got 3"),
    (lambda t: t.create_index("vec", num_partitions=0), r"column 'vec': num_partitions must be a positive whole "
                                                        r"number, got 0"),
    (lambda t: t.create_scalar_index("id", index_type="HASH"), r"column 'id': unknown index_type 'HASH'"),
])
def test_a_bad_argument_names_the_table_as_well_as_the_column_and_value(tbl, build, message):
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"^create_index on table 't'[ :].*" + message):
        build(tbl)
    assert tbl.version == version and tbl.list_indices() == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": ""}, r"name must be a non-empty string \(or None: '<column>_idx'\), got ''"),
    ({"name": "  "}, r"name must be a non-empty string .*got '  '"),
    ({"replace": "no"}, r"replace must be True or False, got 'no'"),
])
def test_an_empty_index_name_or_a_replace_that_is_not_a_bool_is_refused(tbl, kwargs, message):
    """name='' built 'vec_idx' silently; replace='no' was read by pydantic as False."""
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"create_index on table 't' column 'vec': " + message):
        tbl.create_index("vec", index_type="IVF_FLAT", num_partitions=4, spark=RUNNER, **kwargs)
    assert tbl.version == version and tbl.list_indices() == []


def test_hnsw_m_and_ef_construction_and_sample_rate_reach_the_index_lance_builds(tbl):
    """LanceDB's create_index takes m / ef_construction / sample_rate; they were refused as unknown options."""
    tbl.create_index(column="vec", index_type="IVF_HNSW_SQ", num_partitions=4, m=8, ef_construction=60,
                     sample_rate=64, spark=RUNNER)
    ds = tbl.dataset()
    ds.validate()
    params = {(s["sub_index"]["params"]["m"], s["sub_index"]["params"]["ef_construction"])
              for s in ds.stats.index_stats("vec_idx")["indices"]}
    assert params == {(8, 60)}
    assert recall(ds, queries(ds.to_table())) >= 0.9
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"create_index on table 't' column 'vec': m=8 is for an HNSW "
                                                   r"index \(IVF_HNSW_SQ, IVF_HNSW_PQ\), not IVF_PQ"):
        tbl.create_index("vec", m=8, spark=RUNNER)
    with pytest.raises(InvalidArgumentError, match=r"ef_construction must be a positive whole number, got 0"):
        tbl.create_index("vec", index_type="IVF_HNSW_PQ", ef_construction=0, spark=RUNNER)
    assert tbl.version == version


def test_create_fts_index_takes_lancedbs_field_names_and_use_tantivy_false(db):
    tbl = db.create_table("d", pa.table({"id": [0, 1, 2], "text": ["cats here", "dogs there", "cats and dogs"]}))
    tbl.create_fts_index(field_names=["text"], use_tantivy=False, spark=RUNNER)
    assert [(i.name, i.index_type, i.columns) for i in tbl.list_indices()] == [("text_idx", "FTS", ["text"])]
    assert sorted(r["id"] for r in tbl.search("cats", query_type="fts").to_list()) == [0, 2]
    version = tbl.version
    for call, message in ((lambda: tbl.create_fts_index("text", use_tantivy=True), r"use_tantivy=True: the index "
                           r"is Lance's native full-text index"),
                          (lambda: tbl.create_fts_index(field_names=["id", "text"]), r"name the one text column "
                           r"to index .*field_names=\['id', 'text'\]"),
                          (lambda: tbl.create_fts_index("text", field_names="id"), r"column='text' and "
                           r"field_names='id' name the same argument"),
                          (lambda: tbl.create_fts_index(), r"name the text column to index")):
        with pytest.raises(InvalidArgumentError, match=r"create_fts_index on table 'd'.*" + message):
            call()
    assert tbl.version == version


def test_create_index_takes_lancedbs_accelerator_none_and_refuses_a_gpu(tbl):
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"create_index on table 't': accelerator='cuda': segments are "
                                                   r"built on CPU by Spark tasks"):
        tbl.create_index("vec", accelerator="cuda", spark=RUNNER)
    assert tbl.version == version and tbl.list_indices() == []
    tbl.create_index("vec", index_type="IVF_FLAT", num_partitions=4, accelerator=None, spark=RUNNER)
    assert tbl.index_stats("vec_idx").num_indexed_rows == 4000
