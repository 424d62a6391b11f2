"""RAG ingest: append documents, chunk them in a chunker view, embed the new chunks, index them, search.

``geneva_rag_ingest`` appends a batch of documents to ``docs`` (created with stable row ids on the
first run, together with the chunk view ``doc_chunks`` of ``geneva_provider.examples:chunk_text``),
refreshes the view -- only the documents added since the last refresh are chunked -- and
backfills the ``embedding`` column of ``geneva_provider.examples:embed_chunk`` on the view, which
computes exactly the chunks that lack it; the backfill group's index stage then indexes add-only, with the
index's saved training, the fragments the embedding index does not cover yet (nothing on the first run: no
index yet).  On the first run ``create_index`` plans the ``embedding_idx`` index (IVF_FLAT, 4 partitions: it
trains on a few hundred rows) and ``build_index`` builds it on Spark; on the next runs the index exists
(``exist_ok=True``) and both are skipped.  Last, ``search`` embeds the newest document's first chunk with the
same embedding function, searches ``doc_chunks`` through the index and fails unless that chunk comes first.

The ingest emits the ``docs`` Asset, the refresh the ``doc_chunks`` Asset, the backfill the
``doc_chunks/embedding`` Asset, and an index build or refresh that committed the
``doc_chunks/index/embedding_idx`` Asset (a DAG serving searches would be scheduled on the last).

Run: ``airflow dags test geneva_rag_ingest`` (``-c '{"docs": 500}'`` for a bigger batch).
Connections: ``lance_default`` (host = database directory or URI) and ``spark_default``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from geneva_provider.assets import table_asset
from geneva_provider.operators.backfill import GenevaAddColumnsOperator
from geneva_provider.operators.indexes import GenevaCreateIndexOperator, GenevaSparkIndexOperator
from geneva_provider.task_groups import backfill_task_group, refresh_task_group

DOCS, CHUNKS, INDEX = "docs", "doc_chunks", "embedding_idx"
NPROBES = 2  # of the index's 4 partitions

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

    @task(trigger_rule="none_failed")  # after build_index, also when it was skipped (the index existed)
    def search() -> dict:
        """Embeds the newest document's first chunk as the backfill did and searches ``doc_chunks`` through the
        index: that chunk must come first (distance 0), else the task fails."""
        import pyarrow.compute as pc

        from geneva_provider.examples import embed_chunk, split_text
        from geneva_provider.hooks.lance import LanceHook

        db = LanceHook().get_conn()
        docs = db.open_table(DOCS)
        doc_id = pc.max(docs.to_arrow(["doc_id"]).column("doc_id")).as_py()
        (text,) = docs.search(None).where(f"doc_id = {doc_id}").select(["text"]).to_arrow().column("text").to_pylist()
        known = split_text(text)[0]
        hits = (db.open_table(CHUNKS).search(embed_chunk(known.chunk), vector_column_name="embedding")
                .nprobes(NPROBES).select(["doc_id", "start", "chunk"]).limit(5).to_list())
        if not hits or (hits[0]["doc_id"], hits[0]["start"]) != (doc_id, known.start):
            raise ValueError(f"search of {CHUNKS}: the chunk of document {doc_id} at {known.start} was not found "
                             f"first; got {[(h['doc_id'], h['start'], h['_distance']) for h in hits]}")
        return {"doc_id": doc_id, "start": known.start, "distance": hits[0]["_distance"],
                "found": [(h["doc_id"], h["start"]) for h in hits]}

    add_embedding = GenevaAddColumnsOperator(
        task_id="add_embedding", table=CHUNKS, columns={"embedding": "geneva_provider.examples:embed_chunk"})
    create_index = GenevaCreateIndexOperator(
        task_id="create_index", table=CHUNKS, vector_column_name="embedding", index_type="IVF_FLAT",
        num_partitions=4, name=INDEX, exist_ok=True,
        trigger_rule="none_failed")  # after the backfill's index stage, skipped while there is no index
    build_index = GenevaSparkIndexOperator(task_id="build_index", plan=create_index.output, table=CHUNKS)
    # The view's new chunks have no embedding yet: the embedding backfill's index stage indexes them (the refresh's
    # own stage would find nothing to do -- the index is on a UDF column added to the view -- so it is left out).
    (ingest() >> refresh_task_group("refresh_chunks", CHUNKS, refresh_indexes=False) >> add_embedding
     >> backfill_task_group("embed_chunks", CHUNKS, "embedding") >> create_index >> build_index >> search())
