"""Sample data and UDFs used by the demo and the example DAGs (importable as ``geneva_provider.examples:<name>``)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

import geneva_provider as gp

WORDS = ["lance", "spark", "airflow", "column", "vector", "table", "fragment", "backfill"]


@gp.udf(data_type=pa.int32())
def word_count(text: str) -> int:
    """A scalar UDF: called once per row."""
    return len(text.split())


@gp.udf(data_type=pa.list_(pa.float32(), 4), input_columns=["x"])
def embed(x: pa.Array) -> pa.Array:
    """An array UDF: a toy 4-d 'embedding' of x, computed a batch at a time."""
    xs = pc.cast(x, pa.float32())
    cols = [pc.sin(pc.multiply(xs, k)) for k in (0.1, 0.2, 0.3, 0.4)]
    flat = pa.concat_arrays([pa.array([c[i].as_py() for c in cols], pa.float32()) for i in range(len(x))]) \
        if len(x) else pa.array([], pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, 4)


def sample(n: int, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    text = [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + i % 5)) for i in range(start, start + n)]
    return pa.table({"id": ids, "x": ids, "text": pa.array(text, pa.string())})  # string even when empty


# ---------------------------------------------------------------------- the RAG ingest example
CHUNK_CHARS = 120   # a chunk is at most this many characters ...
CHUNK_STRIDE = 100  # ... and starts this many after the previous one (20 characters of overlap)
EMBEDDING_DIM = 8


def documents(n: int, start: int = 0) -> pa.Table:
    """``n`` deterministic documents ``doc_id`` = start .. start+n-1, of 1 to about 400 characters."""
    ids = range(start, start + n)
    text = [" ".join(f"{WORDS[(i * 7 + k) % len(WORDS)]}{(i + k) % 13}" for k in range(1 + (i * 37) % 50))
            for i in ids]
    return pa.table({"doc_id": pa.array(ids, pa.int64()), "text": pa.array(text, pa.string())})


@dataclass
class Chunk:
    chunk: str
    start: int


def split_text(text: str) -> list[Chunk]:
    """Overlapping windows of ``text``: the chunker's logic, callable in plain Python."""
    if not text:
        return []
    overlap = CHUNK_CHARS - CHUNK_STRIDE
    return [Chunk(text[i:i + CHUNK_CHARS], i) for i in range(0, max(len(text) - overlap, 1), CHUNK_STRIDE)]


@gp.chunker
def chunk_text(text: str) -> Iterator[Chunk]:
    """A chunker: one document in, its overlapping chunks out (a view row each)."""
    yield from split_text(text)


def hashed_embedding(text: str) -> list[float]:
    """A deterministic stand-in for an embedding model: EMBEDDING_DIM floats in [-1, 1) from a hash of text."""
    digest = hashlib.sha256(text.encode()).digest()
    return [v / 32768.0 for v in struct.unpack(f"<{EMBEDDING_DIM}h", digest[:2 * EMBEDDING_DIM])]


@gp.udf(data_type=pa.list_(pa.float32(), EMBEDDING_DIM))
def embed_chunk(chunk: str) -> list[float]:
    """A scalar UDF on the chunk view: the chunk's 'embedding' (no model download)."""
    return hashed_embedding(chunk)


# ---------------------------------------------------------------------- the watcher-driven examples
COMMENTS = "comments"
ARTICLES, ARTICLE_CHUNKS = "articles", "article_chunks"


def setup_comments(db: gp.Connection, words: gp.UDF = word_count) -> gp.Table:
    """The table ``comments`` (``id``, ``x``, ``text``) with the UDF column ``words``, made if missing.

    Run again, it changes nothing: a table that exists is opened, and a column that already holds the
    identical UDF is left as it is (values included).  ``words`` is the column's UDF (a test passes one that
    counts its calls).
    """
    if COMMENTS in db.table_names():
        tbl = db.open_table(COMMENTS)
    else:
        tbl = db.create_table(COMMENTS, schema=sample(0).schema)
    tbl.add_columns({"words": words})
    return tbl


def setup_articles(db: gp.Connection, embedding: gp.UDF = embed_chunk) -> gp.Table:
    """The documents table ``articles`` and its chunk view ``article_chunks`` with the UDF column ``embedding``,
    each made if missing; returns the view.

    ``articles`` keeps stable row ids, so the view follows each document across updates and compaction; the
    view is made with ``refresh_on_change=True`` (what ``table_change_dag("articles")`` reads).  Run again, it
    changes nothing, as :func:`setup_comments`.
    """
    if ARTICLES in db.table_names():
        docs = db.open_table(ARTICLES)
    else:
        docs = db.create_table(ARTICLES, schema=documents(0).schema, stable_row_ids=True)
    if ARTICLE_CHUNKS in db.table_names():
        view = db.open_table(ARTICLE_CHUNKS)
    else:
        view = db.create_udtf_view(ARTICLE_CHUNKS, source=docs.search(None).select(["doc_id", "text"]),
                                   udtf=chunk_text, refresh_on_change=True)
    view.add_columns({"embedding": embedding})
    return view
