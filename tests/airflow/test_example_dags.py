"""The example DAGs end to end with dag.test(): real Airflow (SQLite), real Spark, real Lance."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.conftest import FAKE_SECRET
from tests.helpers import SPARK_INFO_LINE


def run(dag, **kwargs):
    t0 = time.perf_counter()
    dr = dag.test(**kwargs)
    seconds = time.perf_counter() - t0
    tis = {ti.task_id: ti for ti in dr.get_task_instances()}
    return dr, {k: ti.state for k, ti in tis.items()}, tis, seconds


def assert_no_secret_leaked(capfd) -> str:
    """The lance connection's storage options hold FAKE_SECRET: it must not reach XCom or any log.

    Returns the captured task logs (what ``dag.test()`` printed), checked.
    """
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        values = [str(v) for (v,) in session.query(XComModel.value)]
    assert values and not [v for v in values if FAKE_SECRET in v]
    logs = [p for p in Path(os.environ["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]).rglob("*") if p.is_file()]
    assert not [p for p in logs if FAKE_SECRET in p.read_text(errors="replace")]
    out, err = capfd.readouterr()
    over_connect = json.loads(os.environ["AIRFLOW_CONN_SPARK_DEFAULT"])["conn_type"] == "spark_connect"
    assert ("over Spark Connect" if over_connect else "Spark-Submit cmd") in out + err  # the task logs were captured
    assert FAKE_SECRET not in out + err  # ... and hold no secret
    return out + err


def words_of(text: str) -> int:
    return len(text.split())


@pytest.mark.slow
def test_backfill_after_ingest(dagbag, lance_db, capfd):
    ingest = dagbag.get_dag("geneva_ingest_events")
    backfill = dagbag.get_dag("geneva_backfill_after_ingest")

    from geneva_provider.pipeline.spark.in_process import InProcessRunner

    dr, states, _, _ = run(ingest, run_conf={"rows": 8_000})
    assert dr.state == "success", states
    # An index on another column than the backfilled one: the group's index stage leaves it alone.
    lance_db.open_table("events").create_scalar_index("id", spark=InProcessRunner())

    dr, states, tis, first_s = run(backfill)
    stage_s = {t: round(tis[f"backfill_words.{t}"].duration or 0, 1)
               for t in ("plan", "apply", "write_commit", "verify")}
    assert dr.state == "success", states
    assert states == {"add_columns": "success", "backfill_words.plan": "success",
                      "backfill_words.apply": "success", "backfill_words.write_commit": "success",
                      "backfill_words.verify": "success", "backfill_words.plan_indexes": "success",
                      "backfill_words.index": "skipped"}  # no index on 'words': no Spark index task
    assert tis["backfill_words.plan_indexes"].xcom_pull(task_ids="backfill_words.plan_indexes") == []
    plan = tis["backfill_words.plan"].xcom_pull(task_ids="backfill_words.plan")
    assert plan["rows_to_compute"] == 8_000 and plan["table"] == "events" and plan["column"] == "words"
    applied = tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")
    assert applied["status"] == "success" and applied["rows_computed"] == 8_000
    tbl = lance_db.open_table("events")
    got = tbl.to_arrow(["text", "words"]).to_pydict()
    assert got["words"] == [words_of(t) for t in got["text"]] and len(got["words"]) == 8_000
    tbl.dataset().validate()
    # The job's record, written by the stages across the DAG's tasks, names the Airflow run.
    record = lance_db.get_job(plan["job_id"])
    assert (record.status, record.airflow_run_id, record.rows_committed) == ("DONE", dr.run_id, 8_000)

    # No new data: both Spark tasks are skipped and the run takes seconds.
    dr, states, tis, noop_s = run(backfill)
    assert dr.state == "success", states
    assert states["backfill_words.apply"] == "skipped" and states["backfill_words.write_commit"] == "skipped"
    assert states["backfill_words.verify"] == "skipped"  # nothing computed: no Asset event
    noop_plan = tis["backfill_words.plan"].xcom_pull(task_ids="backfill_words.plan")
    assert noop_plan["rows_to_compute"] == 0

    # The next hour, the table unchanged since that no-op: the plan is the recorded no-op under a new job id (the
    # table is not opened), every later task skipped again; the job is found, DONE.
    dr, states, tis, _ = run(backfill)
    assert dr.state == "success", states
    assert {states[f"backfill_words.{t}"] for t in ("apply", "write_commit", "verify", "index")} == {"skipped"}
    again = tis["backfill_words.plan"].xcom_pull(task_ids="backfill_words.plan")
    assert again["rows_to_compute"] == 0 and again["job_id"] != noop_plan["job_id"]
    assert (again["read_version"], again["rows_reused"]) == (noop_plan["read_version"], 8_000)
    assert lance_db.get_job(again["job_id"]).status == "DONE"
    assert tis["backfill_words.plan_indexes"].xcom_pull(task_ids="backfill_words.plan_indexes") == []

    # After another ingest, only the new rows are computed.
    dr, states, _, _ = run(ingest, run_conf={"rows": 2_000})
    assert dr.state == "success"
    dr, states, tis, _ = run(backfill)
    assert dr.state == "success", states
    assert tis["backfill_words.plan"].xcom_pull(task_ids="backfill_words.plan")["rows_to_compute"] == 2_000
    assert tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")["rows_computed"] == 2_000
    got = tbl.to_arrow(["text", "words"]).to_pydict()
    assert got["words"] == [words_of(t) for t in got["text"]] and len(got["words"]) == 10_000
    # The index on 'id' was not the job's: its new rows are left to its own refresh, the stage skipped again.
    assert states["backfill_words.index"] == "skipped"
    assert tbl.index_stats("id_idx").num_unindexed_rows == 2_000
    assert_no_secret_leaked(capfd)
    with capfd.disabled():
        print(f"\nbackfill DAG: first run {first_s:.1f}s (task seconds {stage_s}), no-op run {noop_s:.1f}s")


@pytest.mark.slow
def test_hourly_backfill(dagbag, lance_db, capfd):
    from geneva_provider.examples import sample

    tbl = lance_db.create_table("events", sample(6_000), max_rows_per_file=2_000)
    hourly = dagbag.get_dag("geneva_hourly_backfill")
    dr, states, tis, first_s = run(hourly)
    assert dr.state == "success", states
    assert states["wait_for_new_rows"] == "success"
    sensed = tis["wait_for_new_rows"].xcom_pull(task_ids="wait_for_new_rows")
    assert sensed["rows_pending"] == 6_000 and sensed["fragments_pending"] == 3
    assert tis["backfill_embedding.apply"].xcom_pull(task_ids="backfill_embedding.apply")["rows_computed"] == 6_000
    got = tbl.to_arrow(["x", "embedding"]).to_pydict()
    assert all(len(e) == 4 for e in got["embedding"]) and len(got["x"]) == 6_000
    assert got["embedding"][1] == pytest.approx([0.0998334, 0.1986693, 0.2955202, 0.3894183], rel=1e-5)

    # An hour with no new rows: the deferred sensor times out softly, nothing else runs.
    dr, states, _, noop_s = run(hourly)
    assert states["wait_for_new_rows"] == "skipped"
    assert {states[t] for t in states if t.startswith("backfill_embedding.")} == {"skipped"}
    assert_no_secret_leaked(capfd)
    with capfd.disabled():
        print(f"\nhourly DAG: first run {first_s:.1f}s, no-data run {noop_s:.1f}s")


@pytest.mark.slow
def test_apply_retry_recomputes_nothing_already_checkpointed(dagbag, lance_db):
    from tests.helpers import clear_calls, events_table, read_calls

    # flaky_double's call log and die-once flag, which the Connect server's workers know (tests/conftest.py).
    calls, flag = Path(os.environ["GENEVA_TEST_CALL_DIR"]), Path(os.environ["GENEVA_TEST_FAIL_FLAG"])
    clear_calls(calls)
    flag.touch()
    # One Spark task of 8,000 rows (a concurrent second task would be killed with the job, whatever batch
    # it had in flight: which rows that recomputes depends on timing).
    tbl = lance_db.create_table("retry", events_table(8_000), max_rows_per_file=8_000)

    dr, states, tis, _ = run(dagbag.get_dag("geneva_test_retry"))
    assert dr.state == "success", states
    apply_ti = tis["backfill_y.apply"]
    assert apply_ti.try_number == 2 and not flag.exists()  # failed once, succeeded on the retry
    result = apply_ti.xcom_pull(task_ids="backfill_y.apply")
    called = read_calls(calls)
    # Every row was computed exactly once across both attempts: the retry skipped the
    # ranges the first attempt had checkpointed (x=3500 failed before its checkpoint).
    assert sorted(called) == list(range(8_000))
    assert result["rows_computed"] == 4_500  # from the failed batch on, [3500, 8000): [0, 3500) was checkpointed
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]]
    tbl.dataset().validate()


def test_a_udf_bug_fails_its_task_once_with_the_udfs_message_first(dagbag, lance_db, capfd, spark_submit):
    from tests.helpers import events_table

    lance_db.create_table("buggy", events_table(1_000), max_rows_per_file=500)
    dr, states, tis, _ = run(dagbag.get_dag("geneva_test_udf_bug"))
    assert dr.state == "failed"
    assert states["backfill_y.plan"] == "success" and states["backfill_y.apply"] == "failed"
    assert tis["backfill_y.apply"].try_number == 1  # retries=2, yet not retried: a retry cannot fix a bug
    # The stage ran through spark-submit (the others here run over Spark Connect):
    # the connection's storage options reached it, yet no secret is in its logged command, XCom or any log.
    logs = assert_no_secret_leaked(capfd)
    # The stage program's error, as spark-submit printed it, is in the task log; Spark's INFO chatter is not.
    assert "geneva apply failed: UDFExecutionError: UDF 'broken_double'" in logs
    assert not [line for line in logs.splitlines() if SPARK_INFO_LINE.search(line)]
    message = next(line for line in logs.splitlines() if "UDFExecutionError: the apply stage" in line)
    # The package's reason first: the UDF, the column, the table, the row, the original error.
    assert re.search(r"the apply stage of plan \S+ failed: UDFExecutionError: UDF 'broken_double' failed computing "
                     r"column 'y' of table 'buggy'.*x=7", message)
    assert lance_db.open_table("buggy").count_rows("y IS NOT NULL") == 0  # nothing committed
    (job,) = lance_db.list_jobs("buggy")
    assert job.status == "FAILED" and "cannot double x=7" in job.error


@pytest.mark.slow
def test_hourly_view_refresh_and_chained_view(dagbag, lance_db, capfd):
    from airflow.models.asset import AssetDagRunQueue
    from airflow.utils.session import create_session

    from geneva_provider.examples import sample

    src = lance_db.create_table("events", sample(6_000), max_rows_per_file=2_000)
    hourly = dagbag.get_dag("geneva_hourly_view_refresh")
    dr, states, tis, first_s = run(hourly)
    assert dr.state == "success", states
    assert tis["refresh.plan"].xcom_pull(task_ids="refresh.plan")["rows_to_compute"] == 3_000
    view = lance_db.open_table("events_even")
    got = view.to_arrow(["id", "text", "n_words", "__is_set"]).to_pydict()
    assert sorted(got["id"]) == list(range(0, 6_000, 2)) and all(got["__is_set"])
    assert got["n_words"] == [len(t.split()) for t in got["text"]]
    with create_session() as session:  # the view's Asset event queued the chained-view DAG
        queued = {q.target_dag_id for q in session.query(AssetDagRunQueue)}
    assert "geneva_chained_view_refresh" in queued

    dr, states, _, noop_s = run(hourly)
    assert dr.state == "success", states
    assert states["refresh.apply"] == states["refresh.write_commit"] == "skipped"

    src.add(sample(1_000, start=6_000))
    dr, states, tis, _ = run(hourly)
    assert dr.state == "success", states
    assert tis["refresh.apply"].xcom_pull(task_ids="refresh.apply")["rows_computed"] == 500
    assert sorted(view.to_arrow(["id"]).column("id").to_pylist()) == list(range(0, 7_000, 2))

    dr, states, _, _ = run(dagbag.get_dag("geneva_chained_view_refresh"))
    assert dr.state == "success", states
    child = lance_db.open_table("events_even_short").to_arrow(["id", "n_words"]).to_pydict()
    want = [r["id"] for r in view.to_arrow(["id", "n_words"]).to_pylist() if r["n_words"] <= 2]
    assert sorted(child["id"]) == sorted(want) and all(n <= 2 for n in child["n_words"])
    assert_no_secret_leaked(capfd)
    with capfd.disabled():
        print(f"\nhourly view refresh DAG: first run {first_s:.1f}s, no-data run {noop_s:.1f}s")


@pytest.mark.slow
def test_maintenance_compacts_on_spark_without_recompute_and_keeps_the_index_whole(dagbag, lance_db, tmp_path,
                                                                                   spark):
    from geneva_provider.examples import sample
    from geneva_provider.pipeline.indexes.stats import index_segments
    from tests.helpers import clear_calls, counting_double, read_calls

    calls = tmp_path / "calls"
    calls.mkdir()
    tbl = lance_db.create_table("events", sample(12_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(str(calls))})
    tbl.backfill("y", spark=spark)
    tbl.create_scalar_index("y", spark=spark, progress=False)
    for i in range(3):  # each append's backfill indexes its fragment add-only: three small segments of 100 rows
        tbl.add(sample(100, start=12_000 + 100 * i))
        assert [r.rows_indexed for r in tbl.backfill("y", spark=spark, progress=False).indexes] == [100]
    assert len(index_segments(tbl.dataset(), "y_idx")) == 4
    tbl.delete("x % 10 = 0")
    clear_calls(calls)
    before = tbl.to_arrow(["id", "y"]).sort_by("id")

    dr, states, tis, _ = run(dagbag.get_dag("geneva_maintenance"), run_conf={"target_rows_per_fragment": 5_000})
    assert dr.state == "success", states
    assert states == {"compaction.plan": "success", "compaction.compact": "success",
                      "compaction.plan_indexes": "success", "compaction.index": "success",
                      "cleanup_checkpoints": "success", "cleanup_old_versions": "success"}
    cleaned = tis["cleanup_checkpoints"].xcom_pull(task_ids="cleanup_checkpoints")
    assert cleaned["table"] == "events" and cleaned["kept_for_live_jobs"] == 0
    planned = tis["compaction.plan"].xcom_pull(task_ids="compaction.plan")
    # the three small segments released first: every fragment compacts, the 100-row ones too
    assert planned["kind"] == "compaction" and planned["fragments_to_compute"] == 15
    compacted = tis["compaction.compact"].xcom_pull(task_ids="compaction.compact")
    assert compacted["status"] == "success" and compacted["fragments_removed"] == 15
    ds = tbl.dataset()
    assert len(ds.get_fragments()) <= 3
    assert tbl.to_arrow(["id", "y"]).sort_by("id").equals(before)
    assert tbl.backfill("y", spark=spark, refresh_indexes=False).rows_computed == 0 and read_calls(calls) == []
    # the index stage indexed what the compaction made of the released fragments: the index covers every row
    stats = tbl.index_stats("y_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows) == (before.num_rows, 0)
    ys = before.column("y").to_pylist()
    for where, wanted in (("y = 24002", lambda y: y == 24002), ("y < 2000", lambda y: y < 2000),
                          ("y >= 23990", lambda y: y >= 23990)):  # answers through the index equal a scan's
        got = sorted(ds.to_table(columns=["y"], filter=where).column("y").to_pylist())
        assert got == sorted(y for y in ys if wanted(y)) and got, where
    ds.validate()

    # Nothing left to compact: the Spark task is skipped, and so is the index task (nothing to index).
    dr, states, _, _ = run(dagbag.get_dag("geneva_maintenance"), run_conf={"target_rows_per_fragment": 5_000})
    assert dr.state == "success" and states["compaction.compact"] == "skipped", states
    assert states["compaction.plan_indexes"] == "success" and states["compaction.index"] == "skipped", states


def rag_chunks_wanted(docs) -> list[tuple[int, int, str]]:
    """(doc_id, start, chunk) of every chunk of ``docs``, by the chunker's logic in plain Python."""
    from geneva_provider.examples import split_text

    got = docs.to_arrow(["doc_id", "text"]).to_pydict()
    return sorted((d, c.start, c.chunk) for d, t in zip(got["doc_id"], got["text"], strict=True)
                  for c in split_text(t))


def rag_chunks_got(view) -> tuple[list[tuple[int, int, str]], dict[tuple[int, int], list[float] | None]]:
    got = view.to_arrow(["doc_id", "start", "chunk", "text", "embedding"]).to_pylist()
    assert all(r["text"] for r in got)  # the parent's text is carried beside each chunk
    return (sorted((r["doc_id"], r["start"], r["chunk"]) for r in got),
            {(r["doc_id"], r["start"]): r["embedding"] for r in got})


RAG_INDEX_URI = "lance://lance_default/doc_chunks/index/embedding_idx"


def rag_index_events(run_id: str) -> list[tuple[str, str, dict]]:
    """The index Asset events the run emitted: (source task, source alias names, extra)."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        return [(e.source_task_id, sorted(a.name for a in e.source_aliases), dict(e.extra or {}))
                for e in session.query(AssetEvent) if e.source_run_id == run_id and e.asset.uri == RAG_INDEX_URI]


@pytest.mark.slow
def test_rag_ingest_chunks_embeds_indexes_and_finds_a_known_chunk(dagbag, lance_db, capfd):
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    from geneva_provider.examples import hashed_embedding, split_text
    from geneva_provider.pipeline.indexes.stats import index_segments

    rag = dagbag.get_dag("geneva_rag_ingest")
    dr, states, tis, first_s = run(rag, run_conf={"docs": 120})
    assert dr.state == "success", states
    # No index yet when the embedding backfill ends: its index stage plans nothing and skips its Spark task.
    assert {k for k, v in states.items() if v != "success"} == {"embed_chunks.index"}, states
    assert states["embed_chunks.index"] == "skipped"
    assert tis["embed_chunks.plan_indexes"].xcom_pull(task_ids="embed_chunks.plan_indexes") == []
    docs, view = lance_db.open_table("docs"), lance_db.open_table("doc_chunks")
    assert docs.dataset().has_stable_row_ids and docs.count_rows() == 120
    wanted = rag_chunks_wanted(docs)
    chunks, embeddings = rag_chunks_got(view)
    assert chunks == wanted and len(wanted) > 120  # documents of several chunks
    assert {len(split_text(t)) for t in docs.to_arrow(["text"]).column("text").to_pylist()} >= {1, 2, 3, 4}
    for doc_id, start, chunk in chunks:
        assert embeddings[doc_id, start] == pytest.approx(hashed_embedding(chunk))
    assert tis["refresh_chunks.apply"].xcom_pull(task_ids="refresh_chunks.apply")["status"] == "success"
    first_chunks = len(wanted)
    # The index, built by the DAG over every chunk; the search found the newest document's first chunk first.
    stats = view.index_stats("embedding_idx")
    assert (stats.index_type, stats.columns) == ("IVF_FLAT", ["embedding"])
    assert (stats.num_indexed_rows, stats.num_unindexed_rows, stats.num_partitions) == (first_chunks, 0, 4)
    found = tis["search"].xcom_pull(task_ids="search")
    assert (found["doc_id"], found["start"], found["distance"]) == (119, 0, 0.0), found
    with create_session() as session:  # docs ingested, the view refreshed, its embedding column computed, indexed
        emitted = {(e.asset.uri, e.source_task_id) for e in session.query(AssetEvent) if e.source_run_id == dr.run_id}
    assert emitted == {("lance://lance_default/docs", "ingest"),
                       ("lance://lance_default/doc_chunks", "refresh_chunks.verify"),
                       ("lance://lance_default/doc_chunks/embedding", "embed_chunks.verify"),
                       (RAG_INDEX_URI, "build_index")}, emitted
    ((_, aliases, extra),) = rag_index_events(dr.run_id)
    assert aliases == ["lance.lance_default.doc_chunks.indexes"]
    assert (extra["index"], extra["rows_indexed"], extra["refresh"]) == ("embedding_idx", first_chunks, False)
    assert tis["embed_chunks.plan"].xcom_pull(task_ids="embed_chunks.plan")["rows_to_compute"] == first_chunks
    assert tis["embed_chunks.apply"].xcom_pull(task_ids="embed_chunks.apply")["rows_computed"] == first_chunks
    before = dict(embeddings)
    segments = {s["uuid"]: sorted(s["fragment_ids"]) for s in index_segments(view.dataset(), "embedding_idx")}

    # A second batch: only the new documents are chunked, only their chunks embedded, only their fragments indexed
    # -- add-only, by the backfill's index stage; the index exists, so create_index and build_index are skipped.
    dr, states, tis, second_s = run(rag, run_conf={"docs": 30})
    assert dr.state == "success", states
    assert {k for k, v in states.items() if v != "success"} == {"create_index", "build_index"}, states
    assert docs.count_rows() == 150
    wanted = rag_chunks_wanted(docs)
    chunks, embeddings = rag_chunks_got(view)
    assert chunks == wanted
    new = [c for c in wanted if c[0] >= 120]
    assert new and len(wanted) == first_chunks + len(new)
    for doc_id, start, chunk in chunks:
        assert embeddings[doc_id, start] == pytest.approx(hashed_embedding(chunk))
    assert {k: v for k, v in embeddings.items() if k[0] < 120} == before  # the old chunks left as they were
    assert tis["embed_chunks.plan"].xcom_pull(task_ids="embed_chunks.plan")["rows_to_compute"] == len(new)
    assert tis["embed_chunks.apply"].xcom_pull(task_ids="embed_chunks.apply")["rows_computed"] == len(new)
    stats = view.index_stats("embedding_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows) == (len(wanted), 0)
    after = {s["uuid"]: sorted(s["fragment_ids"]) for s in index_segments(view.dataset(), "embedding_idx")}
    assert {u: after.get(u) for u in segments} == segments and len(after) > len(segments)  # old segments kept
    refreshed = tis["embed_chunks.index"].xcom_pull(task_ids="embed_chunks.index", map_indexes=0)
    assert refreshed["refresh"] and not refreshed["trained"] and refreshed["rows_indexed"] == len(new)
    assert sorted(f for u, fs in after.items() if u not in segments for f in fs) == refreshed["fragments_indexed"]
    ((source, aliases, extra),) = rag_index_events(dr.run_id)
    assert (source, aliases) == ("embed_chunks.index", ["lance.lance_default.doc_chunks.indexes"])
    assert (extra["rows_indexed"], extra["refresh"], extra["version"]) == (len(new), True, view.version)
    found = tis["search"].xcom_pull(task_ids="search")
    assert (found["doc_id"], found["start"], found["distance"]) == (149, 0, 0.0), found
    view.dataset().validate()
    assert_no_secret_leaked(capfd)
    with capfd.disabled():
        print(f"\nRAG ingest DAG: first run {first_s:.1f}s, second run {second_s:.1f}s")


def watched_trigger(dag) -> dict:
    """The kwargs of the watcher's trigger on the DAG's one scheduling Asset (what the triggerer runs)."""
    (asset,) = dag.timetable.asset_condition.objects
    (watcher,) = asset.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == "geneva_provider.triggers.table.LanceTableChangedTrigger"
    return kwargs


@pytest.mark.slow
def test_on_change_backfill_computes_only_the_rows_each_outside_write_added(dagbag, lance_db, tmp_path):
    from geneva_provider.examples import sample, setup_comments
    from tests.helpers import clear_calls, counting_words, read_calls

    dag = dagbag.get_dag("geneva_on_change_backfill")
    assert watched_trigger(dag)["table"] == "comments"
    calls = tmp_path / "calls"
    calls.mkdir()
    tbl = setup_comments(lance_db, words=counting_words(str(calls)))
    assert setup_comments(lance_db, words=counting_words(str(calls))).version == tbl.version  # set up again: no-op

    # What the watcher reacts to: writes from outside Airflow.  dag.test() stands in for the run its event starts.
    tbl.add(sample(3_000))
    dr, states, tis, _ = run(dag)
    assert states.pop("backfill_words.index") == "skipped", states  # no index on the column: no Spark index task
    assert dr.state == "success" and set(states.values()) == {"success"}, states
    assert sorted(read_calls(calls)) == list(range(3_000))
    assert tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")["rows_computed"] == 3_000

    tbl.add(sample(500, start=3_000))
    clear_calls(calls)
    dr, states, tis, _ = run(dag)
    assert dr.state == "success", states
    assert sorted(read_calls(calls)) == list(range(3_000, 3_500))  # the new rows, each once
    got = tbl.to_arrow(["text", "words"]).to_pydict()
    assert got["words"] == [words_of(t) for t in got["text"]] and len(got["words"]) == 3_500

    # A run with nothing new (as after a change the watcher would not report): no Spark job, no call.
    clear_calls(calls)
    dr, states, _, _ = run(dag)
    assert dr.state == "success" and states["backfill_words.apply"] == "skipped", states
    assert read_calls(calls) == []
    tbl.dataset().validate()


@pytest.mark.slow
def test_on_change_chunks_then_embeds_exactly_the_new_documents_chunks(dagbag, lance_db, tmp_path):
    from geneva_provider.examples import documents, hashed_embedding, setup_articles
    from tests.helpers import chunk_key, clear_calls, counting_embed_chunk, read_calls

    dag = dagbag.get_dag("geneva_on_change_chunks_embeddings")
    assert watched_trigger(dag)["table"] == "articles"
    calls = tmp_path / "calls"
    calls.mkdir()
    view = setup_articles(lance_db, embedding=counting_embed_chunk(str(calls)))
    assert setup_articles(lance_db, embedding=counting_embed_chunk(str(calls))).version == view.version
    docs = lance_db.open_table("articles")

    docs.add(documents(40))
    dr, states, tis, _ = run(dag)
    assert [states.pop(f"{g}.index") for g in ("refresh_chunks", "embed_chunks")] == ["skipped"] * 2, states
    assert dr.state == "success" and set(states.values()) == {"success"}, states
    chunks, embeddings = rag_chunks_got(view)
    assert chunks == rag_chunks_wanted(docs) and len(chunks) > 40
    assert sorted(read_calls(calls)) == sorted(chunk_key(d, s) for d, s, _ in chunks)
    for doc_id, start, chunk in chunks:
        assert embeddings[doc_id, start] == pytest.approx(hashed_embedding(chunk))
    before = dict(embeddings)

    # Another writer appends documents: only theirs are chunked, only their chunks embedded.
    docs.add(documents(10, start=40))
    clear_calls(calls)
    dr, states, tis, _ = run(dag)
    assert dr.state == "success", states
    chunks, embeddings = rag_chunks_got(view)
    assert chunks == rag_chunks_wanted(docs)
    new = sorted(chunk_key(d, s) for d, s, _ in chunks if d >= 40)
    assert new and sorted(read_calls(calls)) == new
    assert tis["embed_chunks.plan"].xcom_pull(task_ids="embed_chunks.plan")["rows_to_compute"] == len(new)
    assert {k: v for k, v in embeddings.items() if k[0] < 40} == before  # the old chunks left as they were
    for doc_id, start, chunk in chunks:
        assert embeddings[doc_id, start] == pytest.approx(hashed_embedding(chunk))

    # A delete at the source: the documents' chunks leave the view, nothing is embedded.
    docs.delete("doc_id < 5")
    clear_calls(calls)
    dr, states, _, _ = run(dag)
    assert dr.state == "success", states
    chunks, embeddings = rag_chunks_got(view)
    assert chunks == rag_chunks_wanted(docs) and min(d for d, _, _ in chunks) == 5
    assert read_calls(calls) == [] and all(e is not None for e in embeddings.values())
    view.dataset().validate()
