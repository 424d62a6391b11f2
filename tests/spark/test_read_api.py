"""The read API where it computes, on real Spark: a batch UDTF reading its partition through
``source: GenevaQueryBuilder`` (``to_pandas()`` / ``to_arrow()``), a chunker view whose rows leave out the
chunker's inputs (``inherit_input_columns=False``), refreshed with ``db.refresh(name)``, and a checked-out
view reading the version before its refresh.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

import geneva_provider as gp
from tests.helpers import WIDTH, Chunk
from tests.unit.test_udtf_views import docs_table

STATS = pa.schema([("lang", pa.string()), ("docs", pa.int64()), ("chars", pa.int64())])


def expected_stats(docs: gp.Table) -> list[dict]:
    out: dict[str, dict] = {}
    for r in docs.to_arrow(["lang", "text"]).to_pylist():
        row = out.setdefault(r["lang"], {"lang": r["lang"], "docs": 0, "chars": 0})
        row["docs"] += 1
        row["chars"] += len(r["text"])
    return sorted(out.values(), key=lambda r: r["lang"])


def test_a_batch_udtf_reads_its_partition_through_a_query_builder_as_the_reference_does(db, spark):
    @gp.udtf(output_schema=STATS, partition_by="lang", input_columns=["lang", "text"])
    def by_pandas(source: gp.GenevaQueryBuilder) -> Iterator[pa.RecordBatch]:
        df = source.to_pandas()
        assert source.select(["text"]).to_arrow().column_names == ["text"]
        yield pa.RecordBatch.from_pylist([{"lang": df["lang"].iloc[0], "docs": len(df),
                                           "chars": int(df["text"].str.len().sum())}], schema=STATS)

    @gp.udtf(output_schema=STATS, partition_by="lang", input_columns=["lang", "text"])
    def unannotated(source):  # the reference's `def f(source)`: to_arrow() on it
        t = source.to_arrow()
        yield pa.RecordBatch.from_pylist([{"lang": t.column("lang")[0].as_py(), "docs": t.num_rows,
                                           "chars": sum(len(x) for x in t.column("text").to_pylist())}],
                                         schema=STATS)

    @gp.udtf(output_schema=STATS, partition_by="lang", input_columns=["lang", "text"])
    def iterated(source):  # iterating the batches, as before, still works
        rows = [r for batch in source for r in batch.to_pylist()]
        yield pa.RecordBatch.from_pylist([{"lang": rows[0]["lang"], "docs": len(rows),
                                           "chars": sum(len(r["text"]) for r in rows)}], schema=STATS)

    docs = db.create_table("docs", docs_table(range(1_000)), stable_row_ids=True, max_rows_per_file=300)
    for fn in (by_pandas, unannotated, iterated):
        view = db.create_udtf_view(f"stats_{fn.name}", source=docs, udtf=fn)
        db.refresh(view.name, spark=spark)
        got = view.search(None).select(["lang", "docs", "chars"]).to_list()
        assert sorted(got, key=lambda r: r["lang"]) == expected_stats(docs), fn.name
        view.to_lance().validate()


def test_a_chunker_view_without_its_inputs_refreshed_by_name_and_read_at_an_older_version(db, spark):
    @gp.chunker(inherit_input_columns=False)
    def split(text: str) -> Iterator[Chunk]:
        for i in range(0, len(text), WIDTH):
            yield Chunk(text[i:i + WIDTH], i)

    docs = db.create_table("docs", docs_table(range(300)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", docs.search(None).where("lang != 'fr'").select(["doc_id", "lang", "text"]),
                               udtf=split)
    before = view.version
    result = db.refresh("chunks", spark=spark)
    want = sorted((r["doc_id"], r["lang"], r["text"][i:i + WIDTH], i) for r in docs.to_arrow().to_pylist()
                  if r["lang"] != "fr" for i in range(0, len(r["text"]), WIDTH))
    assert result.rows_computed == 225
    assert [n for n in view.schema.names if not n.startswith("__")] == ["doc_id", "lang", "chunk", "start"]
    rows = view.search(None).select(["doc_id", "lang", "chunk", "start"]).to_list()
    assert sorted((r["doc_id"], r["lang"], r["chunk"], r["start"]) for r in rows) == want
    view.to_lance().validate()
    view.checkout(before)  # the empty view, as created
    assert view.count_rows() == 0 and view.search(None).to_list() == []
    view.checkout_latest()
    assert view.count_rows() == len(want)
