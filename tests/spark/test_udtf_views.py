"""Chunker (1:N) and batch-UDTF (N:M) views on real Spark: contents, and which parents each refresh expands.

UDTF calls are counted across Spark's Python workers: each call appends its parent's ``doc_id`` (or its
partition's key) to a per-process file in a directory the function's closure captures.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import UDFExecutionError
from geneva_provider.core.store.layout import JobStore
from geneva_provider.core.views.udtf_meta import udtf_view_state
from tests.helpers import (
    WIDTH,
    Chunk,
    _log_calls,
    clear_calls,
    counting_split,
    read_calls,
    run_and_kill_after_checkpoints,
)
from tests.unit.test_udtf_views import doc_text, docs_table

DOCS = 10_000


def chunks_of(text: str) -> list[tuple[str, int]]:
    return [(text[i:i + WIDTH], i) for i in range(0, len(text), WIDTH)]


def counting_embed(log_dir: str) -> gp.UDF:
    @gp.udf(data_type=pa.int64(), name="embed")
    def embed(doc_id: int, start: int) -> int:
        _log_calls(log_dir, [doc_id * 1000 + start])
        return doc_id * 1000 + start

    return embed


def view_rows(view: gp.Table) -> list[tuple]:
    t = view.to_arrow(["doc_id", "chunk", "start", "__source_row_id", "__chunk_index"])
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def expected_rows(docs: gp.Table) -> list[tuple]:
    t = docs.dataset().to_table(columns=["doc_id", "text"], with_row_id=True).to_pylist()
    return sorted((r["doc_id"], c, s, r["_rowid"], k) for r in t for k, (c, s) in enumerate(chunks_of(r["text"])))


def _spark_jobs(spark) -> int:
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


def test_a_chunker_view_expands_only_new_and_changed_documents(db, spark, tmp_path):
    split_calls, embed_calls = tmp_path / "split", tmp_path / "embed"
    split_calls.mkdir()
    embed_calls.mkdir()
    docs = db.create_table("docs", docs_table(range(DOCS)), stable_row_ids=True, max_rows_per_file=1_000)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(split_calls)))
    assert view.count_rows() == 0

    # First refresh: every document expanded exactly once; documents without text give no chunk.
    first = view.refresh(spark=spark, checkpoint_size=500)
    calls = read_calls(split_calls)
    assert sorted(calls) == list(range(DOCS))
    assert first.rows_computed == DOCS
    assert view_rows(view) == expected_rows(docs)
    assert sum(1 for i in range(DOCS) if not doc_text(i)) > 0  # some documents have no chunk at all
    assert max(len(chunks_of(doc_text(i))) for i in range(DOCS)) == 20
    view.add_columns({"embedding": counting_embed(str(embed_calls))})
    view.backfill("embedding", spark=spark)
    assert len(read_calls(embed_calls)) == view.count_rows()

    def step() -> tuple[list[int], list[int]]:
        clear_calls(split_calls)
        clear_calls(embed_calls)
        view.refresh(spark=spark, checkpoint_size=500)
        view.backfill("embedding", spark=spark)
        return sorted(read_calls(split_calls)), sorted(read_calls(embed_calls))

    # +10 % documents: only those are expanded, only their chunks embedded.
    docs.add(docs_table(range(DOCS, DOCS + DOCS // 10)))
    split_, embedded = step()
    assert split_ == list(range(DOCS, DOCS + DOCS // 10))
    assert embedded == sorted(d * 1000 + s for d in split_ for _, s in chunks_of(doc_text(d)))
    assert view_rows(view) == expected_rows(docs)

    # Delete 5 %: their chunks are gone, nothing is computed.
    gone = [i for i in range(DOCS + DOCS // 10) if i % 20 == 0]
    docs.delete("doc_id % 20 = 0")
    assert step() == ([], [])
    assert view.count_rows(f"doc_id IN ({','.join(map(str, gone))})") == 0
    assert view_rows(view) == expected_rows(docs)

    # Update 1 % of the texts: exactly those re-expanded, only their new chunks embedded.
    changed = [i for i in range(DOCS + DOCS // 10) if i % 100 == 1]
    docs.dataset().update({"text": "concat(text, 'UPDATED!')"}, where="doc_id % 100 = 1")
    split_, embedded = step()
    assert split_ == changed
    assert embedded == sorted(d * 1000 + s for d in changed for _, s in chunks_of(doc_text(d) + "UPDATED!"))
    assert view_rows(view) == expected_rows(docs)
    emb = view.to_arrow(["doc_id", "start", "embedding"]).to_pylist()
    assert all(r["embedding"] == r["doc_id"] * 1000 + r["start"] for r in emb)

    # An update of a column the view does not read re-expands nothing.
    docs.dataset().update({"lang": "'xx'"}, where="doc_id % 100 = 2")
    assert step() == ([], [])

    # A UDF column backfilled on the source (Lance counts it as an update of every row): nothing is expanded.
    docs.add_columns({"text_len": gp.udf(lambda text: len(text), data_type=pa.int64(), name="text_len")})
    docs.backfill("text_len", spark=spark)
    assert step() == ([], [])

    # Compaction of the source and of the view: nothing is computed.
    docs.compact(spark=spark, target_rows_per_fragment=100_000)
    view.compact(spark=spark, target_rows_per_fragment=100_000)
    assert step() == ([], [])
    assert view_rows(view) == expected_rows(docs)

    # A refresh with nothing new starts no Spark job.
    before = _spark_jobs(spark)
    clear_calls(split_calls)
    result = view.refresh(spark=spark)
    assert result.rows_computed == 0 and read_calls(split_calls) == []
    assert _spark_jobs(spark) == before
    view.dataset().validate()
    docs.dataset().validate()
    # Every row traces back to its parent.
    src = {r["_rowid"]: r["doc_id"] for r in docs.dataset().to_table(columns=["doc_id"], with_row_id=True).to_pylist()}
    assert all(src[r["__source_row_id"]] == r["doc_id"]
               for r in view.to_arrow(["doc_id", "__source_row_id"]).to_pylist())


def test_a_chunker_view_is_a_table_like_any_other(db, spark, tmp_path):
    """A materialized view over a chunk view, pinned source versions, the Lance table itself."""
    docs = db.create_table("docs", docs_table(range(300)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).where("lang = 'en'").select({"id": "doc_id",
                                                                                              "text": "text"}),
                               udtf=counting_split(str(tmp_path)))
    v1 = docs.version
    docs.add(docs_table(range(300, 400)))
    view.refresh(spark=spark, src_version=v1)  # pinned: the rows appended later are not there
    ids = set(view.to_arrow(["id"]).column("id").to_pylist())
    assert ids == {i for i in range(300) if i % 4 == 0 and doc_text(i)}
    view.refresh(spark=spark)
    ids = set(view.to_arrow(["id"]).column("id").to_pylist())
    assert ids == {i for i in range(400) if i % 4 == 0 and doc_text(i)}
    long_chunks = db.create_materialized_view("long_chunks", view.search(None).where("start >= 100").select(
        ["id", "chunk"]))
    long_chunks.refresh(spark=spark)
    assert long_chunks.count_rows() == view.count_rows("start >= 100")
    assert isinstance(view.dataset().to_table(), pa.Table)


def test_a_batch_udtf_reruns_only_the_partitions_whose_rows_changed(db, spark, tmp_path):
    log_dir = str(tmp_path)
    langs = ("en", "de", "fr", "es")

    @gp.udtf(output_schema=pa.schema([("lang", pa.string()), ("docs", pa.int64()), ("chars", pa.int64())]),
             partition_by="lang", input_columns=["lang", "text"])
    def stats(batches):
        t = pa.Table.from_batches(list(batches))
        lang = t.column("lang")[0].as_py()
        _log_calls(log_dir, [langs.index(lang)])
        yield pa.RecordBatch.from_pylist([{"lang": lang, "docs": t.num_rows,
                                           "chars": sum(len(x) for x in t.column("text").to_pylist())}])

    docs = db.create_table("docs", docs_table(range(2_000)), stable_row_ids=True, max_rows_per_file=300)
    view = db.create_udtf_view("lang_stats", source=docs, udtf=stats)

    def expected() -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for r in docs.to_arrow(["lang", "text"]).to_pylist():
            n, c = out.get(r["lang"], (0, 0))
            out[r["lang"]] = (n + 1, c + len(r["text"]))
        return out

    def contents() -> dict[str, tuple[int, int]]:
        rows = view.to_arrow(["lang", "docs", "chars"]).to_pylist()
        assert len(rows) == len({r["lang"] for r in rows})
        return {r["lang"]: (r["docs"], r["chars"]) for r in rows}

    def refresh() -> list[str]:
        clear_calls(log_dir)
        view.refresh(spark=spark)
        return sorted(langs[i] for i in read_calls(log_dir))

    assert refresh() == sorted(langs)
    assert contents() == expected()
    docs.dataset().update({"text": "'changed'"}, where="doc_id = 5")  # 5 % 4 == 1: "de"
    assert refresh() == ["de"]
    assert contents() == expected()
    docs.add(docs_table([2_002]))  # "fr"
    assert refresh() == ["fr"]
    assert contents() == expected()
    docs.delete("lang = 'es'")
    assert refresh() == []
    assert contents() == expected() and "es" not in contents()
    docs.compact(spark=spark, target_rows_per_fragment=100_000)
    assert refresh() == []
    before = _spark_jobs(spark)
    assert refresh() == [] and _spark_jobs(spark) == before
    view.dataset().validate()


def test_an_unpartitioned_batch_udtf_runs_once_over_the_selection_and_is_skipped_while_its_source_is_unchanged(
        db, spark, tmp_path):
    log_dir = str(tmp_path)

    @gp.udtf(output_schema=pa.schema([("doc_id", pa.int64()), ("words", pa.int64())]))
    def pairs(table: pa.Table):
        _log_calls(log_dir, [table.num_rows])
        ids = table.column("doc_id").to_pylist()
        return pa.table({"doc_id": [i for i in ids if i % 2], "words": [len(str(i)) for i in ids if i % 2]})

    docs = db.create_table("docs", docs_table(range(100)), stable_row_ids=True)
    view = db.create_udtf_view("odd", source=docs.search(None).where("doc_id < 50").select(["doc_id"]), udtf=pairs)
    view.refresh(spark=spark)
    assert read_calls(log_dir) == [50]
    assert sorted(view.to_arrow(["doc_id"]).column("doc_id").to_pylist()) == list(range(1, 50, 2))
    clear_calls(log_dir)
    view.refresh(spark=spark)
    assert read_calls(log_dir) == []
    docs.delete("doc_id = 3")
    view.refresh(spark=spark)
    assert read_calls(log_dir) == [49]
    assert sorted(view.to_arrow(["doc_id"]).column("doc_id").to_pylist()) == [i for i in range(1, 50, 2) if i != 3]


def test_an_unpartitioned_aggregate_is_called_once_over_an_emptied_selection_as_the_reference_does(
        db, spark, tmp_path):
    log_dir = str(tmp_path)

    @gp.udtf(output_schema=pa.schema([("docs", pa.int64()), ("chars", pa.int64())]))
    def totals(table: pa.Table):
        _log_calls(log_dir, [table.num_rows])
        return pa.table({"docs": [table.num_rows], "chars": [sum(len(t) for t in table.column("text").to_pylist())]})

    docs = db.create_table("docs", docs_table(range(20)), stable_row_ids=True)
    view = db.create_udtf_view("totals", source=docs.search(None).where("lang = 'en'").select(["text"]), udtf=totals)
    view.refresh(spark=spark)
    assert view.to_arrow(["docs"]).column("docs").to_pylist() == [5]
    docs.delete("lang = 'en'")
    clear_calls(log_dir)
    view.refresh(spark=spark)
    assert read_calls(log_dir) == [0]  # one call over no rows: the aggregate says so
    assert view.to_arrow(["docs", "chars"]).to_pylist() == [{"docs": 0, "chars": 0}]
    assert view.check().exact
    clear_calls(log_dir)
    view.refresh(spark=spark)
    assert read_calls(log_dir) == []  # nothing changed since: not called again
    docs.add(docs_table(range(20, 24)))
    view.refresh(spark=spark)
    assert view.to_arrow(["docs"]).column("docs").to_pylist() == [1]


def test_a_killed_chunker_refresh_resumes_with_the_parents_in_flight_and_lands_the_same_view(tmp_path, spark):
    db = gp.connect(str(tmp_path / "db"))
    calls = tmp_path / "calls"
    calls.mkdir()
    n = 3_000
    docs = db.create_table("docs", docs_table(range(n)), stable_row_ids=True, max_rows_per_file=500)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(calls), sleep=0.001))
    script = textwrap.dedent(f"""
        import geneva_provider as gp
        from geneva_provider.stages import InProcessRunner
        spark = InProcessRunner(parallelism=1)
        gp.connect({db.uri!r}).open_table("chunks").refresh(spark=spark, checkpoint_size=100)
        print("FINISHED")
    """)
    run_and_kill_after_checkpoints(script, view.checkpoint_store, 8)
    assert view.count_rows() == 0  # nothing committed
    held = set()
    for bk in JobStore(view.checkpoint_store).batches(""):
        held.update(range(bk.start, bk.end))  # the parents' row ids (= doc_id: one fresh table)
    clear_calls(calls)

    result = view.refresh(spark=spark, checkpoint_size=100)

    rerun = read_calls(calls)
    assert len(rerun) == len(set(rerun)), "a parent was expanded twice in the rerun"
    assert set(rerun) == set(range(n)) - held  # only what was in flight (or not started) is computed
    assert result.rows_computed == n - len(held)
    assert view_rows(view) == expected_rows(docs)
    other = db.create_udtf_view("chunks_again", source=docs.search(None).select(["doc_id", "text"]),
                                udtf=counting_split(str(calls)))
    other.refresh(spark=spark)
    assert view_rows(other) == view_rows(view)  # the same as an uninterrupted run
    view.dataset().validate()


# ---------------------------------------------------------------------- bad input
def test_a_chunker_yielding_rows_off_its_schema_fails_naming_the_column_and_the_row(db, spark):
    @gp.chunker
    def bad(doc_id: int, text: str) -> Iterator[Chunk]:
        yield Chunk(text, "not a number" if doc_id == 7 else 0)

    docs = db.create_table("docs", docs_table(range(20)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id"]), udtf=bad)
    version = view.version
    with pytest.raises(UDFExecutionError, match=r"chunker 'bad'.*source row 7.*'start'"):
        view.refresh(spark=spark)
    assert view.version == version and view.count_rows() == 0
    view.dataset().validate()

    @gp.chunker
    def single(text: str) -> list[Chunk]:
        return "just a string"  # type: ignore[return-value]

    other = db.create_udtf_view("single", source=docs.search(None).select(["doc_id"]), udtf=single)
    with pytest.raises(UDFExecutionError, match=r"chunker 'single'.*source row 0.*must yield its rows"):
        other.refresh(spark=spark)


def test_a_stateful_batch_chunker_is_built_once_per_worker(db, spark, tmp_path):
    log_dir = str(tmp_path)

    @gp.chunker(batch=True, output_schema=pa.schema([("piece", pa.string())]))
    class Halves:
        def __init__(self):
            _log_calls(log_dir, [-1])

        def __call__(self, text: pa.Array) -> pa.RecordBatch:
            pieces, parents = [], []
            for i, t in enumerate(text.to_pylist()):
                for half in (t[: len(t) // 2], t[len(t) // 2:]) if t else ():
                    pieces.append(half)
                    parents.append(i)
            return pa.RecordBatch.from_pydict({"piece": pieces, "__parent_index": parents})

    docs = db.create_table("docs", docs_table(range(400)), stable_row_ids=True)
    view = db.create_udtf_view("halves", source=docs.search(None).select(["doc_id"]), udtf=Halves)
    view.refresh(spark=spark, checkpoint_size=50)
    got = view.to_arrow(["doc_id", "piece", "__chunk_index"]).to_pylist()
    want = sorted((i, h, k) for i in range(400) if doc_text(i)
                  for k, h in enumerate((doc_text(i)[: len(doc_text(i)) // 2], doc_text(i)[len(doc_text(i)) // 2:])))
    assert sorted((r["doc_id"], r["piece"], r["__chunk_index"]) for r in got) == want
    per_process = [p.read_text().split().count("-1") for p in Path(log_dir).glob("*.log")]
    assert per_process and all(n == 1 for n in per_process)  # once per worker process, not per batch


def test_a_chunker_view_refreshes_over_spark_connect_stage_by_stage(db, connect_spark, tmp_path):
    """The stages one by one, as the Airflow operators run them, on a Spark Connect server."""
    from geneva_provider import stages

    docs = db.create_table("docs", docs_table(range(500)), stable_row_ids=True, max_rows_per_file=100)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(tmp_path)))
    summary = stages.plan_refresh(view.ref)
    assert summary.kind == "udtf" and summary.rows_to_compute == 500 and not summary.nothing_to_do
    applied = stages.run_apply(summary.plan_uri, connect_spark)
    assert applied.udtf_calls == 500
    written = stages.run_write_commit(summary.plan_uri, connect_spark)
    assert written.rows_committed == len(expected_rows(docs))
    again = stages.run_write_commit(summary.plan_uri, connect_spark)  # a retried stage commits nothing twice
    assert again.version == written.version
    stages.verify(summary)
    assert view_rows(view) == expected_rows(docs)
    assert sorted(read_calls(tmp_path)) == list(range(500))
    jobs = db.list_jobs("chunks")
    assert jobs[0].kind == "udtf" and jobs[0].status == "DONE"


def test_checkpoint_clean_up_keeps_a_live_refresh_and_clears_a_finished_one(db, spark, tmp_path):
    import datetime as dt

    from geneva_provider import stages

    docs = db.create_table("docs", docs_table(range(300)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(tmp_path)))
    summary = stages.plan_refresh(view.ref, {"checkpoint_size": 50})
    stages.run_apply(summary.plan_uri, spark)
    held = len(JobStore(view.checkpoint_store).batches(""))
    assert held == 6
    view.cleanup_checkpoints(older_than=dt.timedelta(0))  # the refresh is live: its checkpoints stay
    assert len(JobStore(view.checkpoint_store).batches("")) == held
    stages.run_write_commit(summary.plan_uri, spark)
    stages.verify(summary)
    assert view_rows(view) == expected_rows(docs)
    view.cleanup_checkpoints(older_than=dt.timedelta(0))
    assert JobStore(view.checkpoint_store).batches("") == []


def test_a_skipped_parent_is_expanded_again_by_the_next_refresh_and_skip_limits_hold(db, spark, tmp_path):
    flag = tmp_path / "failing"
    flag.touch()
    log_dir = str(tmp_path)

    @gp.chunker(on_error=gp.skip_on_error(max_rows=2))
    def fragile(doc_id: int, text: str) -> Iterator[Chunk]:
        if doc_id % 50 == 7 and os.path.exists(flag):
            raise ValueError(f"cannot split document {doc_id}")
        _log_calls(log_dir, [doc_id])
        yield Chunk(text[:WIDTH], 0)

    docs = db.create_table("docs", docs_table(range(1, 101)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id"]), udtf=fragile)
    result = view.refresh(spark=spark)
    assert result.rows_failed == 2
    assert sorted(view.to_arrow(["doc_id"]).column("doc_id").to_pylist()) == [i for i in range(1, 101)
                                                                               if i % 50 != 7]
    errors = view.get_errors().to_pylist()
    assert sorted(e["row_address"] for e in errors) == [6, 56]  # the parents' source row ids (doc_id - 1)
    assert all("cannot split document" in e["message"] for e in errors)
    flag.unlink()
    clear_calls(log_dir)
    view.refresh(spark=spark)
    assert sorted(read_calls(log_dir)) == [7, 57]  # only the skipped parents
    assert sorted(view.to_arrow(["doc_id"]).column("doc_id").to_pylist()) == list(range(1, 101))

    flag.touch()
    docs.add(docs_table(range(101, 301)))  # 107, 157, 207, 257 fail: over max_rows=2
    version = view.version
    with pytest.raises(UDFExecutionError, match="more than its skip policy allows"):
        view.refresh(spark=spark)
    assert view.version == version
    view.dataset().validate()


def test_a_chunker_row_of_the_wrong_type_is_settled_by_the_policy_for_its_parent_alone(db, spark, tmp_path):
    """A document whose chunk does not convert (a str for an int, a None for a non-nullable field) is
    that document's failure: skipped, recorded and left pending; every other document lands exactly."""
    flag = tmp_path / "failing"
    flag.touch()

    @gp.chunker(on_error=gp.skip_on_error())
    def typed(doc_id: int, text: str) -> Iterator[Chunk]:
        for i in range(0, len(text), WIDTH):
            failing = os.path.exists(flag)
            start = "ten" if failing and doc_id == 13 and i == WIDTH else None if failing and doc_id == 40 else i
            yield Chunk(text[i:i + WIDTH], start)  # type: ignore[arg-type]

    @gp.chunker(batch=True, on_error=gp.skip_on_error(),
                output_schema=pa.schema([("chunk", pa.string()), ("start", pa.int64())]))
    def typed_batch(doc_id: pa.Array, text: pa.Array) -> pa.RecordBatch:
        pieces, starts, parents = [], [], []
        for k, (d, t) in enumerate(zip(doc_id.to_pylist(), text.to_pylist(), strict=True)):
            for i in range(0, len(t), WIDTH):
                pieces.append(t[i:i + WIDTH])
                starts.append("ten" if d == 13 and os.path.exists(flag) else str(i))  # strings Arrow casts
                parents.append(k)
        return pa.record_batch({"chunk": pieces, "start": starts, "__parent_index": pa.array(parents, pa.int64())})

    docs = db.create_table("docs", docs_table(range(60)), stable_row_ids=True)
    assert len(chunks_of(doc_text(13))) > 1 and chunks_of(doc_text(40))  # both have a chunk to get wrong
    source = docs.search(None).select(["doc_id", "text"])
    views = [db.create_udtf_view("chunks", source=source, udtf=typed),
             db.create_udtf_view("chunks_batch", source=source, udtf=typed_batch)]
    bad = {"chunks": [13, 40], "chunks_batch": [13]}  # source row ids: doc_id (a fresh table)
    for view in views:
        result = view.refresh(spark=spark)
        assert result.rows_failed == len(bad[view.name])
        assert view_rows(view) == [r for r in expected_rows(docs) if r[0] not in bad[view.name]]
        assert udtf_view_state(view.dataset().schema.metadata, view.name).pending == bad[view.name]
        errors = sorted(view.get_errors().to_pylist(), key=lambda e: e["row_address"])
        assert [(e["row_address"], e["outcome"], e["error_type"]) for e in errors] == [
            (i, "skipped", "UDTFRowError") for i in bad[view.name]]
        messages = {e["row_address"]: e["message"] for e in errors}
        assert f"chunker '{view.name.replace('chunks', 'typed')}'" in messages[13]
        assert "'start'" in messages[13] and "'ten'" in messages[13]  # the field, and the value
    scalar = {e["row_address"]: e["message"] for e in views[0].get_errors().to_pylist()}
    assert "field 'start' holds a str ('ten'), which does not fit its declared type int64" in scalar[13]
    assert "None for 'start', which its output schema declares not nullable" in scalar[40]

    flag.unlink()  # the chunker fixed: the next refresh expands exactly the pending documents
    for view in views:
        result = view.refresh(spark=spark)
        assert result.rows_computed == len(bad[view.name])
        assert view_rows(view) == expected_rows(docs)
        assert udtf_view_state(view.dataset().schema.metadata, view.name).pending == []


def test_a_gpu_chunker_on_a_session_without_gpus_fails_fast_and_changes_nothing(db, spark):
    @gp.chunker(num_gpus=1)
    def on_gpu(text: str) -> Iterator[Chunk]:
        yield Chunk(text, 0)

    docs = db.create_table("docs", docs_table(range(50)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id"]), udtf=on_gpu)
    version = view.version
    t0 = time.monotonic()
    with pytest.raises(gp.ResourceUnavailableError, match="on_gpu"):
        view.refresh(spark=spark)
    assert time.monotonic() - t0 < 15
    assert view.version == version and view.count_rows() == 0


def test_partial_commits_land_group_by_group_and_a_retried_write_commits_nothing_twice(db, spark, tmp_path):
    from geneva_provider import stages
    from geneva_provider.core.store.layout import AppendedKey, CommittedKey

    docs = db.create_table("docs", docs_table(range(500)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(tmp_path)))
    view.refresh(spark=spark)
    docs.dataset().update({"text": "concat(text, '!')"}, where="doc_id < 250")
    summary = stages.plan_refresh(view.ref, {"checkpoint_size": 100, "commit_granularity": 1})
    assert summary.tasks >= 1 and summary.rows_to_compute == 250
    stages.run_apply(summary.plan_uri, spark)
    v0 = view.version
    stages.run_write_commit(summary.plan_uri, spark)
    updates = [t for t in view.dataset().get_transactions(view.version - v0) if t is not None
               and type(t.operation).__name__ == "Update"]
    assert len(updates) == 3  # 250 parents in checkpoints of 100: three commits, each replacing its parents' rows
    assert view_rows(view) == expected_rows(docs)
    # A retried stage whose record of what it committed was lost still commits nothing twice.
    store = view.checkpoint_store
    store.delete(CommittedKey(summary.job_id).key())
    record = store.get_text(AppendedKey(summary.job_id).key())
    store.delete(AppendedKey(summary.job_id).key())
    assert '"committed":[0,1,2]' in record.replace(" ", "")
    stages.run_write_commit(summary.plan_uri, spark)
    assert view_rows(view) == expected_rows(docs)
    view.dataset().validate()


def test_two_refreshes_planned_at_once_commit_once(db, spark, tmp_path):
    from geneva_provider import stages

    docs = db.create_table("docs", docs_table(range(400)), stable_row_ids=True)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(tmp_path)), max_rows_per_fragment=500)
    first = stages.plan_refresh(view.ref)
    second = stages.plan_refresh(view.ref)
    for summary in (first, second):
        stages.run_apply(summary.plan_uri, spark)
    stages.run_write_commit(first.plan_uri, spark)
    version = view.version
    with pytest.raises(gp.CommitError, match=rf"job\(s\) \['{first.job_id}'\] refreshed the view"):
        stages.run_write_commit(second.plan_uri, spark)
    assert view.version == version
    assert view_rows(view) == expected_rows(docs)
    assert max(f.count_rows() for f in view.dataset().get_fragments()) <= 500  # the view's own fragment size
    clear_calls(tmp_path)
    assert view.refresh(spark=spark).rows_computed == 0 and read_calls(tmp_path) == []


