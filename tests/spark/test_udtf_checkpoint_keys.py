"""A chunker view's checkpoints belong to one refresh: a later refresh of the same parents never takes them.

A part's checkpoint is named by its parents' ids; the ids alone would name the same part in every
refresh that expands those parents again (a parent updated twice, a parent the error policy skipped), so
the later refresh would take the earlier one's rows -- stale chunks, or a skip never retried.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

import geneva_provider as gp


@dataclass
class Piece:
    piece: str


@gp.chunker
def whole(text: str) -> Iterator[Piece]:
    yield Piece(text)


def test_a_parent_updated_twice_is_expanded_from_its_latest_text(db, spark):
    docs = db.create_table("docs", pa.table({"doc_id": list(range(5)), "text": ["a"] * 5}), stable_row_ids=True)
    view = db.create_udtf_view("pieces", docs.search(None).select(["doc_id"]), udtf=whole)
    view.refresh(spark=spark)
    for text in ("first", "second"):
        docs.dataset().update({"text": f"'{text}'"}, where="doc_id = 2")
        assert view.refresh(spark=spark).rows_computed == 1
        assert view.to_arrow(columns=["piece"], filter="doc_id = 2").to_pylist() == [{"piece": text}]


def test_a_skipped_parent_is_called_again_at_each_refresh(db, spark, tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()

    @gp.chunker(on_error=gp.skip_on_error())
    def flaky(text: str) -> Iterator[Piece]:
        (calls / str(len(list(calls.iterdir())))).touch()
        if text == "bad":
            raise ValueError("bad text")
        yield Piece(text)

    docs = db.create_table("docs", pa.table({"doc_id": [0, 1], "text": ["ok", "bad"]}), stable_row_ids=True)
    view = db.create_udtf_view("pieces", docs.search(None).select(["doc_id"]), udtf=flaky)
    view.refresh(spark=spark)
    for _ in range(3):  # the source never changes: each refresh retries the skipped parent once
        before = len(list(calls.iterdir()))
        view.refresh(spark=spark)
        assert len(list(calls.iterdir())) == before + 1
    assert view.to_arrow(columns=["doc_id"]).to_pylist() == [{"doc_id": 0}]
