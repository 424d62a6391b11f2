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
