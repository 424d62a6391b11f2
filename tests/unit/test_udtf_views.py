"""Chunker (1:N) and batch-UDTF (N:M) views on real Spark: contents, and which parents each refresh expands.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/spark/test_udtf_views.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from tests.helpers import (
    Chunk,
    counting_split,
)


def doc_text(doc_id: int, salt: str = "") -> str:
    """0..200 characters, so 0..20 chunks (some documents have none)."""
    n = (doc_id * 7919) % 201
    return ((salt + f"{doc_id:05d}" + "abcdefghij" * 21)[:n])


def docs_table(ids: range | list[int]) -> pa.Table:
    ids = list(ids)
    return pa.table({"doc_id": pa.array(ids, pa.int64()), "text": [doc_text(i) for i in ids],
                     "lang": [("en", "de", "fr", "es")[i % 4] for i in ids]})


def test_a_chunker_needs_rows_it_can_describe():
    with pytest.raises(UDFDefinitionError, match=r"chunker 'count'.*not a generator"):
        @gp.chunker(output_schema=pa.schema([("n", pa.int64())]))
        def count(text: str) -> int:
            return len(text)

    with pytest.raises(UDFDefinitionError, match=r"chunker 'untyped'.*Iterator"):
        @gp.chunker
        def untyped(text: str):
            yield {"n": 1}

    with pytest.raises(UDFDefinitionError, match="reserved"):
        gp.chunker(output_schema=pa.schema([("__x", pa.int64())]))(lambda text: iter([]))

    @gp.scalar_udtf
    def fine(text: str) -> Iterator[Chunk]:
        yield Chunk(text, 0)

    assert fine.output_schema == pa.schema([("chunk", pa.string()), ("start", pa.int64())])
    assert list(fine("ab")) == [Chunk("ab", 0)]


def test_bad_views_are_refused_before_anything_is_written(db, tmp_path):
    docs = db.create_table("docs", docs_table(range(10)), stable_row_ids=True)
    plain = db.create_table("plain", docs_table(range(10)), stable_row_ids=False)
    split = counting_split(str(tmp_path))

    @gp.udtf(output_schema=pa.schema([("n", pa.int64())]), partition_by="country")
    def by_country(batches):
        yield pa.RecordBatch.from_pylist([{"n": 1}])

    with pytest.raises(ColumnError, match=r"UDTF 'by_country'.*partition_by column 'country'.*'docs'"):
        db.create_udtf_view("by_country", source=docs, udtf=by_country)
    with pytest.raises(InvalidArgumentError, match="table 'plain' already exists"):
        db.create_udtf_view("plain", source=docs, udtf=split)
    with pytest.raises(InvalidArgumentError, match="no stable row ids"):
        db.create_udtf_view("c1", source=plain, udtf=split)
    with pytest.raises(InvalidArgumentError, match="clash"):
        db.create_udtf_view("c2", source=docs.search(None).select({"chunk": "text", "doc_id": "doc_id",
                                                                    "text": "text"}), udtf=split)
    with pytest.raises(InvalidArgumentError, match="limit"):
        db.create_udtf_view("c3", source=docs.search(None).limit(3), udtf=split)
    with pytest.raises(UDFDefinitionError, match="@chunker or @udtf"):
        db.create_udtf_view("c4", source=docs, udtf=lambda text: [])

    @gp.chunker
    def reads_missing(title: str) -> Iterator[Chunk]:
        yield Chunk(title, 0)

    with pytest.raises(ColumnError, match=r"chunker 'reads_missing'.*input column 'title'"):
        db.create_udtf_view("c5", source=docs, udtf=reads_missing)
    assert sorted(db.table_names()) == ["docs", "plain"]


def test_a_udtf_version_follows_what_it_computes_like_a_udf():
    def made(width: int) -> gp.UDTF:
        @gp.chunker
        def split(text: str) -> Iterator[Chunk]:
            for i in range(0, len(text), width):
                yield Chunk(text[i:i + width], i)

        return split

    assert made(10).version == made(10).version  # the same code and closure
    assert made(10).version != made(20).version  # another closure value: another UDTF
    resourced = gp.chunker(num_gpus=1, on_error=gp.skip_on_error())(made(10).func)
    assert resourced.version == made(10).version  # resources and policies do not change what it computes
    assert gp.chunker(version="v2")(made(10).func).version == "v2"


def test_parent_fingerprints_tell_values_apart_and_are_stable():
    from geneva_provider.core.fingerprints import digest_fingerprints

    text = pa.array(["a", "", None, "a" * 5000, "ab"])
    ids = pa.array([1, 1, 1, 1, 2], pa.int64())
    fp = digest_fingerprints([text, ids], "seed", 5).to_pylist()
    assert len(set(fp)) == 5  # "" and NULL differ; so does a long text
    assert digest_fingerprints([text, ids], "seed", 5).to_pylist() == fp
    assert digest_fingerprints([text, ids], "other", 5).to_pylist() != fp
    # Column boundaries count: ("a", "b") is not ("ab", "").
    assert digest_fingerprints([pa.array(["a"]), pa.array(["b"])], "s", 1) != digest_fingerprints(
        [pa.array(["ab"]), pa.array([""])], "s", 1)
