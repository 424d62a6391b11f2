"""``table_change_dag`` follows a documents table through its chunk view to the view's own ``auto_backfill``
column: each run refreshes the view, then embeds exactly the chunks that lack an embedding (dag.test(), real
Spark, real Lance; the watcher itself runs under a real triggerer in tests/system/test_watchers.py)."""

from __future__ import annotations

import pytest

from tests.airflow.test_example_dags import rag_chunks_got, rag_chunks_wanted, run
from tests.helpers import chunk_key, clear_calls, counting_embed_chunk, dag_bag, read_calls

pytestmark = pytest.mark.slow

DAG_FILE = """
\"\"\"A DAG (airflow) following table articles.\"\"\"
from geneva_provider.task_groups import table_change_dag

dag = table_change_dag("articles", retries=0)
"""


def test_a_chunk_views_auto_backfill_column_is_embedded_after_each_refresh(airflow_db, lance_db, tmp_path):
    from geneva_provider.examples import documents, hashed_embedding, setup_articles
    from geneva_provider.pipeline.followers import BackfillColumn, RefreshView, TableChange, followers_of

    calls = tmp_path / "calls"
    calls.mkdir()
    view = setup_articles(lance_db, embedding=counting_embed_chunk(str(calls), auto_backfill=True))
    docs = lance_db.open_table("articles")
    schemas = {name: lance_db.open_table(name).schema for name in lance_db.table_names()}
    followers = followers_of(TableChange(table="articles"), schemas)
    assert followers.steps() == [RefreshView(view="article_chunks", source="articles"),
                                 BackfillColumn(table="article_chunks", column="embedding")]

    with dag_bag("geneva_test_on_change_articles.py", DAG_FILE) as bag:
        dag = bag.get_dag("geneva_on_change_articles")
        assert dag.task_group_dict["backfill_article_chunks_embedding"].upstream_task_ids == {
            "after_refresh_article_chunks"}
        for start, n in ((0, 30), (30, 8)):
            docs.add(documents(n, start=start))
            clear_calls(calls)
            dr, states, _, _ = run(dag)
            assert dr.state == "success" and "failed" not in states.values(), states
            chunks, embeddings = rag_chunks_got(view)
            assert chunks == rag_chunks_wanted(docs)
            new = sorted(chunk_key(d, s) for d, s, _ in chunks if d >= start)
            assert new and sorted(read_calls(calls)) == new  # exactly the new documents' chunks were embedded
            for doc_id, begin, chunk in chunks:
                assert embeddings[doc_id, begin] == pytest.approx(hashed_embedding(chunk))

        docs.delete("doc_id < 3")  # the chunks leave the view; nothing is embedded
        clear_calls(calls)
        dr, states, _, _ = run(dag)
        assert dr.state == "success", states
        chunks, _ = rag_chunks_got(view)
        assert chunks == rag_chunks_wanted(docs) and min(d for d, _, _ in chunks) == 3
        assert read_calls(calls) == []
    view.dataset().validate()


def test_a_chunk_views_index_is_refreshed_add_only_after_its_embedding_column_is_backfilled(airflow_db, lance_db,
                                                                                           tmp_path):
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    from geneva_provider.examples import documents, setup_articles
    from geneva_provider.facade.followers import table_facts
    from geneva_provider.pipeline.followers import BackfillColumn, RefreshIndex, RefreshView, TableChange, followers_of
    from geneva_provider.pipeline.indexes.stats import index_segments
    from geneva_provider.pipeline.spark.in_process import InProcessRunner

    calls = tmp_path / "calls"
    calls.mkdir()
    view = setup_articles(lance_db, embedding=counting_embed_chunk(str(calls), auto_backfill=True))
    docs = lance_db.open_table("articles")
    docs.add(documents(40))
    lance_db.follow("articles", spark=InProcessRunner(), progress=False)  # chunked and embedded in this process
    view.create_index(vector_column_name="embedding", index_type="IVF_FLAT", num_partitions=4,
                      spark=InProcessRunner())
    assert followers_of(TableChange(table="articles"), table_facts(lance_db)).steps() == [
        RefreshView(view="article_chunks", source="articles"),
        BackfillColumn(table="article_chunks", column="embedding"),
        RefreshIndex(table="article_chunks", index="embedding_idx")]
    indexed = view.count_rows()
    segments = {s["uuid"] for s in index_segments(view.dataset(), "embedding_idx")}

    with dag_bag("geneva_test_on_change_articles.py", DAG_FILE) as bag:
        dag = bag.get_dag("geneva_on_change_articles")
        group = "index_article_chunks_embedding_idx"
        assert {t.task_id for t in dag.task_group_dict[group].children.values()} == {f"{group}.plan",
                                                                                     f"{group}.index"}
        # after the embedding backfill and the view's refresh (both write the view); the graph's index step
        # replaces the groups' own index stage
        assert dag.task_group_dict[group].upstream_task_ids == {"after_backfill_article_chunks_embedding"}
        assert dag.task_dict["after_backfill_article_chunks_embedding"].upstream_task_ids == {
            "refresh_article_chunks.verify", "backfill_article_chunks_embedding.verify"}
        assert not [t for t in dag.task_dict if t.endswith(".plan_indexes")]
        assert [o.uri for o in dag.task_dict[f"{group}.index"].outlets] == [
            "lance://lance_default/article_chunks/index/embedding_idx"]

        docs.add(documents(8, start=40))
        dr, states, tis, _ = run(dag)
        assert dr.state == "success" and set(states.values()) == {"success"}, states
        new = view.count_rows() - indexed
        assert new > 8  # the new documents' chunks: embedded, then indexed add-only
        stats = view.index_stats("embedding_idx")
        assert (stats.num_indexed_rows, stats.num_unindexed_rows) == (indexed + new, 0)
        after = {s["uuid"] for s in index_segments(view.dataset(), "embedding_idx")}
        assert segments < after  # the first segments kept, new ones beside them
        done = tis[f"{group}.index"].xcom_pull(task_ids=f"{group}.index")
        assert done["refresh"] and not done["trained"] and done["rows_indexed"] == new
        with create_session() as session:
            events = [(e.source_task_id, e.extra) for e in session.query(AssetEvent)
                      if e.source_run_id == dr.run_id and e.asset.uri.endswith("/index/embedding_idx")]
        assert events == [(f"{group}.index", {"table": "article_chunks", "index": "embedding_idx",
                                              "version": view.version, "rows_indexed": new, "refresh": True,
                                              "job_id": done["job_id"]})]

        # Nothing new: the index covers every fragment, its Spark task is skipped and no index event is emitted.
        dr, states, _, _ = run(dag)
        assert dr.state == "success" and states[f"{group}.index"] == "skipped", states
        with create_session() as session:
            assert not [e for e in session.query(AssetEvent) if e.source_run_id == dr.run_id
                        and e.asset.uri.endswith("/index/embedding_idx")]
    view.dataset().validate()
