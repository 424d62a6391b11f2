"""RAG ingest: append documents, chunk them in a chunker view, embed the new chunks.

``geneva_rag_ingest`` appends a batch of documents to ``docs`` (created with stable row ids on the
first run, together with the chunk view ``doc_chunks`` of ``geneva_provider.examples:chunk_text``),
refreshes the view -- only the documents added since the last refresh are chunked -- and
backfills the ``embedding`` column of ``geneva_provider.examples:embed_chunk`` on the view, which
computes exactly the chunks that lack it.  The ingest emits the ``docs`` Asset, the refresh the
``doc_chunks`` Asset and the backfill the ``doc_chunks/embedding`` Asset (a search-index DAG would
be scheduled on the last).

Run: ``airflow dags test geneva_rag_ingest`` (``-c '{"docs": 500}'`` for a bigger batch).
Connections: ``lance_default`` (host = database directory or URI) and ``spark_default``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from geneva_provider.assets import table_asset
from geneva_provider.operators.backfill import GenevaAddColumnsOperator
from geneva_provider.task_groups import backfill_task_group, refresh_task_group

DOCS, CHUNKS = "docs", "doc_chunks"

with DAG(
    dag_id="geneva_rag_ingest",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"docs": Param(200, type="integer", minimum=1)},
    tags=["geneva", "example", "rag"],
):

    @task(outlets=[table_asset(DOCS)])
    def ingest(params: dict | None = None, outlet_events=None) -> dict:
        """Appends sample documents (creating ``docs`` and its chunk view on the first run)."""
        import pyarrow.compute as pc

        from geneva_provider.examples import chunk_text, documents
        from geneva_provider.hooks.lance import LanceHook

        db = LanceHook().get_conn()
        n = int(params["docs"])
        if DOCS in db.table_names():
            docs = db.open_table(DOCS)
            start = (pc.max(docs.to_arrow(["doc_id"]).column("doc_id")).as_py() or -1) + 1
            version = docs.add(documents(n, start=start))
        else:  # stable row ids: the chunk view follows each document across updates and compaction
            docs = db.create_table(DOCS, documents(n), stable_row_ids=True)
            version = docs.version
        if CHUNKS not in db.table_names():
            db.create_udtf_view(CHUNKS, source=docs.search(None).select(["doc_id", "text"]), udtf=chunk_text)
        outlet_events[table_asset(DOCS)].extra = {"table": DOCS, "rows_added": n, "version": version}
        return {"table": DOCS, "rows_added": n, "version": version}

    add_embedding = GenevaAddColumnsOperator(
        task_id="add_embedding", table=CHUNKS, columns={"embedding": "geneva_provider.examples:embed_chunk"})
    (ingest() >> refresh_task_group("refresh_chunks", CHUNKS) >> add_embedding
     >> backfill_task_group("embed_chunks", CHUNKS, "embedding"))
