"""Index requests through GenevaNamespace honour every parameter the spec's ``CreateTableIndexRequest`` carries, read
back from Lance: ``target_partition_size`` (partitions = rows / size) with ``max_iterations``, and a full-text
index's tokenizer (positions kept, so a phrase query works; the base tokenizer, case and stemming as asked)."""

from __future__ import annotations

import lance_namespace as ln
import pyarrow as pa
import pytest
from lance.query import PhraseQuery

import geneva_provider as gp
from geneva_provider.namespace import GenevaNamespace
from tests.index_data import clustered
from tests.spark.test_namespace import done


@pytest.fixture
def ns(tmp_path, spark) -> GenevaNamespace:
    namespace = ln.connect("geneva", {"root": str(tmp_path / "lake")})
    assert isinstance(namespace, GenevaNamespace)
    return namespace


def test_target_partition_size_and_max_iterations_size_the_ivf(ns):
    gp.connect(ns.config.root).create_table("vecs", clustered(2000))
    made = ns.create_table_index(ln.CreateTableIndexRequest(
        id=["vecs"], column="vec", index_type="IVF_FLAT", target_partition_size=400, max_iterations=5))
    assert done(ns, made.context["job_id"]).status == "DONE"
    ds = ns.catalog.ref("vecs").dataset()
    assert ds.stats.index_stats("vec_idx")["indices"][0]["num_partitions"] == 5  # 2000 rows / 400
    query = clustered(1, seed=9).column("vec").to_pylist()[0]
    hits = ds.to_table(nearest={"column": "vec", "q": query, "k": 5}, columns=["id"]).column("id").to_pylist()
    assert len(hits) == 5
    ds.validate()


def test_a_full_text_index_keeps_the_tokenizer_the_request_asked_for(ns):
    texts = ["The quick brown fox", "quick fox brown", "Brown Fox jumps", "a lazy dog", "the fox was quick brown"]
    gp.connect(ns.config.root).create_table("docs", pa.table({"id": pa.array(range(5), pa.int64()), "text": texts}))
    made = ns.create_table_index(ln.CreateTableIndexRequest(
        id=["docs"], column="text", index_type="FTS", with_position=True, base_tokenizer="whitespace",
        lower_case=False, stem=False, remove_stop_words=False))
    assert done(ns, made.context["job_id"]).status == "DONE"
    ds = ns.catalog.ref("docs").dataset()
    params = [seg["params"] for seg in ds.stats.index_stats("text_idx")["segments"]]
    assert params and all((p["with_position"], p["base_tokenizer"], p["lower_case"], p["stem"]) ==
                          (True, "whitespace", False, False) for p in params)

    def ids(query):
        return sorted(ds.to_table(full_text_query=query, columns=["id"]).column("id").to_pylist())
    assert ids(PhraseQuery("quick brown", "text")) == [0, 4]  # positions kept: the words next to each other
    assert ids("Brown") == [2]  # case kept: "brown" is another token
    listed = ns.list_table_indices(ln.ListTableIndicesRequest(id=["docs"])).indexes
    assert [(i.index_name, i.index_type, i.num_indexed_rows) for i in listed] == [("text_idx", "FTS", 5)]
