"""Chunks and embeddings on change: a watched documents table -> refresh its chunk view -> embed the new chunks.

``geneva_on_change_chunks_embeddings`` (an Airflow DAG) is scheduled on ``lance_table_asset("articles")``:
after each write to the documents table made outside Airflow (the package's own commits are left out), it
refreshes the chunker view ``article_chunks`` -- only the documents added or changed since the last refresh are
chunked, and the chunks of deleted documents leave the view -- then backfills the view's ``embedding`` column,
which computes exactly the chunks that lack it.  Each step runs after the one before; a refresh with nothing to
do skips its Spark tasks, and the embedding step still looks for chunks left without an embedding.

``table_change_dag("articles")`` builds the same DAG when ``embed_chunk`` is declared
``@udf(auto_backfill=True)``: it refreshes the view (made with ``refresh_on_change=True``), then backfills the
view's own ``auto_backfill`` columns.  This file wires the task groups by hand to show how.

Set up (once; running it again changes nothing): ``python dags_examples/on_change_chunks_embeddings.py``
makes, if missing, the documents table ``articles`` (``doc_id``, ``text``; stable row ids), its chunk view
``article_chunks`` of ``geneva_provider.examples:chunk_text`` and the view's UDF column ``embedding`` of
``geneva_provider.examples:embed_chunk`` (``geneva_provider.examples.setup_articles``).  Then, with a scheduler
and a triggerer running, append documents from anywhere::

    import geneva_provider as gp
    from geneva_provider.examples import documents

    db = gp.connect("/path/to/lake")  # the lance_default connection's database
    db.open_table("articles").add(documents(100, start=0))

The file opens no table when parsed: the DAG parses before the tables exist (the watcher waits for them).
Connections: ``lance_default`` (host = database directory or URI) and ``spark_default``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from geneva_provider.assets import lance_table_asset
from geneva_provider.task_groups import backfill_task_group, refresh_task_group

DOCS, CHUNKS = "articles", "article_chunks"

with DAG(
    dag_id="geneva_on_change_chunks_embeddings",
    schedule=[lance_table_asset(DOCS, poll_interval=10.0)],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # runs queue behind one another; each one's plans pick up what the one before left
    tags=["geneva", "example", "on-change", "rag"],
):
    # The refresh group skips its verify when it had nothing to chunk; the join lets the embedding run all the
    # same (chunks a failed run left without an embedding), and stops it when the refresh failed.
    chunked = EmptyOperator(task_id="chunks_refreshed", trigger_rule="none_failed")
    refresh_task_group("refresh_chunks", CHUNKS) >> chunked >> backfill_task_group("embed_chunks", CHUNKS, "embedding")


if __name__ == "__main__":
    from geneva_provider.examples import setup_articles
    from geneva_provider.hooks.lance import LanceHook

    print(setup_articles(LanceHook().database).schema)
