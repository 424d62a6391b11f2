"""Chunker (1:N) and batch-UDTF (N:M) views on real Spark: contents, and which parents each refresh expands.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/spark/test_udtf_views.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.kinds import DigestScheme
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.fingerprints import digest_fingerprints
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


def test_a_where_naming_a_missing_column_of_a_chunker_view_lists_only_its_users_columns(db, tmp_path):
    from tests.unit.test_plan import INTERNAL

    docs = db.create_table("docs", docs_table(range(10)), stable_row_ids=True)
    chunks = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                                 udtf=counting_split(str(tmp_path)))
    assert {"__source_row_id", "__chunk_index", "__source_fp"} <= set(chunks.schema.names)
    attempts = {"count_rows": lambda: chunks.count_rows("nosuch > 1"),
                "to_arrow": lambda: chunks.to_arrow(["chunk"], filter="nosuch > 1"),
                "delete": lambda: chunks.delete("nosuch > 1"),
                "chunker view of it": lambda: db.create_udtf_view(
                    "again", source=chunks.search(None).where("nosuch > 1"), udtf=counting_split(str(tmp_path))),
                "view of it": lambda: db.create_materialized_view(
                    "v", chunks.search(None).where("nosuch > 1").select(["chunk"]))}
    for what, attempt in attempts.items():
        with pytest.raises(InvalidArgumentError) as exc:
            attempt()
        msg = str(exc.value)
        assert "nosuch" in msg and "'chunks'" in msg and "['doc_id', 'text', 'chunk', 'start']" in msg, (what, msg)
        assert not [name for name in INTERNAL if name in msg], (what, msg)

    @gp.chunker
    def reads_missing(title: str) -> Iterator[Chunk]:
        yield Chunk(title, 0)

    with pytest.raises(ColumnError, match=r"input column 'title'") as missing:  # not a where: the same list
        db.create_udtf_view("c", source=chunks, udtf=reads_missing)
    assert "['doc_id', 'text', 'chunk', 'start']" in str(missing.value)
    assert not [name for name in INTERNAL if name in str(missing.value)]
    assert sorted(db.table_names()) == ["chunks", "docs"]


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


@pytest.mark.parametrize("scheme", list(DigestScheme))
def test_parent_fingerprints_tell_values_apart_and_are_stable(scheme):
    text = pa.array(["a", "", None, "a" * 5000, "ab"])
    ids = pa.array([1, 1, 1, 1, 2], pa.int64())
    fp = digest_fingerprints([text, ids], "seed", 5, scheme=scheme).to_pylist()
    assert len(set(fp)) == 5  # "" and NULL differ; so does a long text
    assert digest_fingerprints([text, ids], "seed", 5, scheme=scheme).to_pylist() == fp
    assert digest_fingerprints([text, ids], "other", 5, scheme=scheme).to_pylist() != fp
    # Column boundaries count: ("a", "b") is not ("ab", "").
    assert digest_fingerprints([pa.array(["a"]), pa.array(["b"])], "s", 1, scheme=scheme) != digest_fingerprints(
        [pa.array(["ab"]), pa.array([""])], "s", 1, scheme=scheme)
    # The schemes are two hashes: a view's fingerprints are compared only with its own scheme's.
    other = next(s for s in DigestScheme if s is not scheme)
    assert digest_fingerprints([text, ids], "seed", 5, scheme=other).to_pylist() != fp


# The values views store: a view's fingerprints must keep matching its parents across releases.
STORED = {DigestScheme.BLAKE2B: [811748178298031929, 13352229164891907890, 2218770991562882830, 8790777879540735782],
          DigestScheme.XXH3: [17149180794702456833, 9703169212677449560, 1734905455435788999, 3959878929900149198]}


@pytest.mark.parametrize("scheme", list(DigestScheme))
def test_parent_fingerprints_keep_the_values_views_store(scheme):
    columns = [pa.array(["a", None, "", "long text " * 300]), pa.array([1, 2, None, 4], pa.int64()),
               pa.array([b"x", b"y", None, b""], pa.binary())]
    fps = partial(digest_fingerprints, scheme=scheme)
    assert fps(columns, "seed", 4).to_pylist() == STORED[scheme]
    chunked = [pa.chunked_array([c[:2], c[2:]]) for c in columns]
    assert fps(chunked, "seed", 4).equals(fps(columns, "seed", 4))
    assert fps([pa.array(["q", "r", "s"]).slice(1)], "seed", 2).equals(fps([pa.array(["r", "s"])], "seed", 2))
    assert fps([pa.array([], pa.string())], "seed", 0).to_pylist() == []


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_parent_chunk_pair_held_twice_is_found_whether_the_rows_come_in_order_or_not(shuffled):
    import numpy as np

    from geneva_provider.pipeline.udtf.check import doubled_pairs

    parents = np.asarray([1, 1, 1, 2, 5, 5, 5, 9], np.int64)
    index = np.asarray([0, 1, 2, 0, 0, 1, 1, 0], np.int64)  # (5, 1) twice
    perm = np.random.default_rng(3).permutation(len(parents)) if shuffled else np.arange(len(parents))
    assert doubled_pairs(parents[perm], index[perm]).tolist() == [[5, 1]]
    once = perm[perm != 6]  # without the second (5, 1)
    assert doubled_pairs(parents[once], index[once]).tolist() == []
