"""OpenLineage as a lineage tool reads it: the events the OpenLineage provider's file transport writes while
``dag.test()`` runs a backfill, a view's refresh, a chunker view's refresh and a backfill whose UDF fails.

The DAGs run in a process of their own, started with the transport configured
(``AIRFLOW__OPENLINEAGE__TRANSPORT``): the provider's plugin registers its listener when it is imported, which in
this test process may have happened before (with no transport, the provider is disabled).  That process uses the
tier's Airflow database, Lance database and Spark Connect server, as any ``dag.test()`` of this tier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAKE_SECRET

DAGS = """
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group, refresh_task_group

START = datetime(2026, 1, 1)
with DAG(dag_id="geneva_ol_backfill", schedule=None, start_date=START):
    backfill_task_group("words", "comments", "words", where="id < 2000", refresh_indexes=False)
with DAG(dag_id="geneva_ol_view", schedule=None, start_date=START):
    refresh_task_group("short", "short", refresh_indexes=False)
with DAG(dag_id="geneva_ol_chunks", schedule=None, start_date=START):
    refresh_task_group("chunks", "chunks", refresh_indexes=False)
with DAG(dag_id="geneva_ol_bug", schedule=None, start_date=START):
    backfill_task_group("bug", "buggy", "y", retries=0, refresh_indexes=False)
"""

RUN = """
import json, sys
from tests.helpers import dag_bag

states = {}
with dag_bag("geneva_test_openlineage.py", sys.argv[1]) as bag:
    for dag_id in sys.argv[2:]:
        dr = bag.get_dag(dag_id).test()
        states[dag_id] = {ti.task_id: ti.state for ti in dr.get_task_instances()}
print("STATES " + json.dumps(states))
"""


@pytest.fixture
def tables(lance_db, airflow_db):
    """``comments`` with its UDF column ``words`` (of ``text``), the query view ``short`` over it (copied
    ``id`` and ``text``, a UDF column of ``text``, rows where ``x >= 100``), the chunker view ``chunks`` of
    ``articles``, and ``buggy`` whose UDF column ``y`` fails at x == 7."""
    from geneva_provider.examples import chunk_text, documents, sample, word_count
    from tests.helpers import broken_double, events_table

    comments = lance_db.create_table("comments", sample(3_000), max_rows_per_file=1_000, stable_row_ids=True)
    comments.add_columns({"words": word_count})
    lance_db.create_materialized_view(
        "short", comments.search(None).where("x >= 100").select({"cid": "id", "body": "text", "wc": word_count}))
    articles = lance_db.create_table("articles", documents(40), stable_row_ids=True)
    lance_db.create_udtf_view("chunks", source=articles.search(None).select(["doc_id", "text"]), udtf=chunk_text)
    buggy = lance_db.create_table("buggy", events_table(100))
    buggy.add_columns({"y": broken_double})
    return {name: lance_db.open_table(name) for name in ("comments", "short", "articles", "chunks", "buggy")}


def run_dags(tmp_path: Path, *dag_ids: str) -> tuple[dict, list[dict]]:
    """Runs the DAGs with ``dag.test()`` in a process whose OpenLineage provider writes to a file transport;
    their task states and the events written, in order."""
    events = tmp_path / "openlineage.jsonl"
    env = {**os.environ, "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
        {"type": "file", "log_file_path": str(events), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "geneva-tests"}
    out = subprocess.run([sys.executable, "-c", RUN, DAGS, *dag_ids], env=env, capture_output=True, text=True,
                         timeout=900, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-5000:]
    assert FAKE_SECRET not in out.stdout + out.stderr
    states = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("STATES "))[7:])
    text = events.read_text()
    assert FAKE_SECRET not in text  # the connection's storage options reach no event
    return states, [json.loads(line) for line in text.splitlines() if line.strip()]


def completed(events: list[dict], dag_id: str, group: str, event_type: str = "COMPLETE") -> dict[str, dict]:
    """The ``event_type`` events of a task group's tasks, by task (job names are ``<dag_id>.<group>.<task>``)."""
    prefix = f"{dag_id}.{group}."
    return {e["job"]["name"][len(prefix):]: e for e in events
            if e["eventType"] == event_type and e["job"]["name"].startswith(prefix)}


def local(tbl) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a local table: ``file`` and its absolute path."""
    return "file", os.path.abspath(tbl.uri)


def names(datasets: list[dict]) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in datasets]


def edges(field: dict) -> list[tuple[str, str, str, str, str]]:
    """A column's input fields as (dataset name, column, type, subtype, description)."""
    return [(f["name"], f["field"], t["type"], t["subtype"], t.get("description"))
            for f in field["inputFields"] for t in f["transformations"]]


def files_between(tbl, before: int, after: int) -> tuple[int, int]:
    """How many data files version ``after`` of ``tbl`` holds that ``before`` did not, and their size on disk."""
    import lance

    def paths(version: int) -> set[str]:
        ds = lance.dataset(tbl.uri, version=version)
        return {f.path for frag in ds.get_fragments() for f in frag.data_files()}

    added = paths(after) - paths(before)
    return len(added), sum(os.path.getsize(os.path.join(tbl.uri, "data", p)) for p in added)


def check_output(event: dict, tbl, source, read_version: int, since: int, rows: int) -> None:
    """``event`` reads ``source`` at ``read_version`` and writes ``tbl`` at its latest version: ``rows`` rows in the
    data files added since version ``since`` of ``tbl``, their number and size as the table's directory holds them."""
    [inp], [out] = event["inputs"], event["outputs"]
    assert (inp["namespace"], inp["name"]) == local(source) and (out["namespace"], out["name"]) == local(tbl)
    assert inp["facets"]["version"]["datasetVersion"] == str(read_version)
    committed = tbl.dataset().version
    assert out["facets"]["version"]["datasetVersion"] == str(committed)
    files, size = files_between(tbl, since, committed)
    stats = out["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["fileCount"], stats["size"]) == (rows, files, size) and size > 0


def test_openlineage_events_of_a_backfill_a_view_refresh_a_chunker_refresh_and_a_failing_udf(tables, tmp_path):
    import lance

    from geneva_provider.examples import chunk_text, documents, split_text, word_count

    comments, short, articles, chunks, buggy = (tables[n] for n in ("comments", "short", "articles", "chunks",
                                                                    "buggy"))
    states, events = run_dags(tmp_path, "geneva_ol_backfill", "geneva_ol_view", "geneva_ol_chunks", "geneva_ol_bug")
    for dag_id in ("geneva_ol_backfill", "geneva_ol_view", "geneva_ol_chunks"):
        assert set(states[dag_id].values()) == {"success"}, states
    assert states["geneva_ol_bug"] == {"bug.plan": "success", "bug.apply": "failed",
                                       "bug.write_commit": "upstream_failed", "bug.verify": "upstream_failed"}
    assert {e["job"]["namespace"] for e in events} == {"geneva-tests"}
    text = json.dumps(events)
    assert "aws_secret_access_key" not in text and "secret_storage_options" not in text

    # The backfill: every task of the group reads and writes the one dataset of the table, its column edges and
    # schema; write+commit and verify also the rows, files and bytes committed and the versions read and committed.
    udf = f"UDF word_count version {word_count.version}"
    done = completed(events, "geneva_ol_backfill", "words")
    assert set(done) == {"plan", "apply", "write_commit", "verify"}
    comments_ds = local(comments)
    for task, event in done.items():
        assert names(event["inputs"]) == names(event["outputs"]) == [comments_ds], task
        [out] = event["outputs"]
        lineage = out["facets"]["columnLineage"]
        assert list(lineage["fields"]) == ["words"], task
        assert edges(lineage["fields"]["words"]) == [
            (comments_ds[1], "text", "DIRECT", "TRANSFORMATION", udf),
            (comments_ds[1], "id", "INDIRECT", "FILTER", "where")], task
        assert [(f["field"], f["transformations"][0]["subtype"]) for f in lineage["dataset"]] == [("id", "FILTER")]
        assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [("words", "int32")]
    read = int(done["write_commit"]["inputs"][0]["facets"]["version"]["datasetVersion"])
    before = lance.dataset(comments.uri, version=read).to_table(columns=["words"])["words"]
    assert before.null_count == 3_000  # the version read: no value computed yet
    after = comments.dataset().to_table(columns=["id", "text", "words"]).to_pylist()
    assert [r["words"] for r in after if r["id"] < 2_000] == [len(r["text"].split()) for r in after if r["id"] < 2_000]
    for task in ("write_commit", "verify"):
        check_output(done[task], comments, comments, read, since=read, rows=2_000)
    assert "outputStatistics" not in done["apply"]["outputs"][0]["outputFacets"]

    # The view's refresh: source table -> view table, copied columns IDENTITY, the UDF column TRANSFORMATION,
    # the view's filter INDIRECT.
    done = completed(events, "geneva_ol_view", "short")
    source, view = local(comments), local(short)
    for task, event in done.items():
        assert names(event["inputs"]) == [source] and names(event["outputs"]) == [view], task
    [out] = done["write_commit"]["outputs"]
    fields = out["facets"]["columnLineage"]["fields"]
    assert {c: edges(f) for c, f in fields.items()} == {
        "cid": [(source[1], "id", "DIRECT", "IDENTITY", "copied from column id"),
                (source[1], "x", "INDIRECT", "FILTER", "where")],
        "body": [(source[1], "text", "DIRECT", "IDENTITY", "copied from column text"),
                 (source[1], "x", "INDIRECT", "FILTER", "where")],
        "wc": [(source[1], "text", "DIRECT", "TRANSFORMATION", udf), (source[1], "x", "INDIRECT", "FILTER", "where")]}
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [
        ("cid", "int64"), ("body", "string"), ("wc", "int32")]
    assert short.count_rows() == 2_900
    # The source version read is the backfill's commit: the latest version of comments when the refresh ran.
    assert done["write_commit"]["inputs"][0]["facets"]["version"]["datasetVersion"] == str(comments.dataset().version)
    [out] = done["verify"]["outputs"]
    assert out["facets"]["version"]["datasetVersion"] == str(short.dataset().version)
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 2_900

    # The chunker view's refresh: articles -> chunks, the carried columns IDENTITY, the UDTF's outputs from text.
    done = completed(events, "geneva_ol_chunks", "chunks")
    source, view = local(articles), local(chunks)
    chunker = f"UDTF chunk_text version {chunk_text.version}"
    expected_chunks = sum(len(split_text(t)) for t in documents(40)["text"].to_pylist())
    for task, event in done.items():
        assert names(event["inputs"]) == [source] and names(event["outputs"]) == [view], task
    [out] = done["verify"]["outputs"]
    assert {c: edges(f) for c, f in out["facets"]["columnLineage"]["fields"].items()} == {
        "doc_id": [(source[1], "doc_id", "DIRECT", "IDENTITY", "copied from column doc_id")],
        "text": [(source[1], "text", "DIRECT", "IDENTITY", "copied from column text")],
        "chunk": [(source[1], "text", "DIRECT", "TRANSFORMATION", chunker)],
        "start": [(source[1], "text", "DIRECT", "TRANSFORMATION", chunker)]}
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [
        (f.name, str(f.type)) for f in chunks.schema if f.name in ("doc_id", "text", "chunk", "start")]
    assert chunks.count_rows() == expected_chunks
    # The view was made empty (version 1): what its refresh committed is every data file it holds.
    check_output(done["write_commit"], chunks, articles, articles.dataset().version, since=1, rows=expected_chunks)
    assert out["outputFacets"]["outputStatistics"] == done["write_commit"]["outputs"][0]["outputFacets"][
        "outputStatistics"]

    # The failing UDF: the apply task's FAIL event, with the error facet naming the UDF's error and the datasets;
    # nothing was committed.
    [failed] = [e for e in events if e["eventType"] == "FAIL" and e["job"]["name"] == "geneva_ol_bug.bug.apply"]
    error = failed["run"]["facets"]["errorMessage"]
    assert "cannot double x=7" in error["message"] and error["programmingLanguage"] == "python"
    assert names(failed["inputs"]) == names(failed["outputs"]) == [local(buggy)]
    assert "outputStatistics" not in failed["outputs"][0]["outputFacets"]
    assert buggy.dataset().to_table(columns=["y"])["y"].null_count == 100  # no value committed
    buggy.dataset().validate()
    for tbl in (comments, short, chunks):
        tbl.dataset().validate()


PARENT_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_ol_parent", schedule=None, start_date=datetime(2026, 1, 1)):
    backfill_task_group("small", "small", "y", openlineage_inject_parent_job_info=True, refresh_indexes=False)
"""


def test_a_spark_submit_stage_names_its_task_as_the_openlineage_parent_of_its_application(lance_db, airflow_db,
                                                                                         spark_submit, capfd):
    """``openlineage_inject_parent_job_info=True``: the stage's spark-submit command carries the task's OpenLineage
    parent job properties, as ``SparkSubmitOperator`` passes them to the OpenLineage Spark listener."""
    from tests.helpers import dag_bag, events_table, plain_double

    tbl = lance_db.create_table("small", events_table(50))
    tbl.add_columns({"y": plain_double})
    with dag_bag("geneva_test_ol_parent.py", PARENT_DAG) as bag:
        dr = bag.get_dag("geneva_ol_parent").test()
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert set(states.values()) == {"success"}, states
    assert tbl.to_arrow()["y"].to_pylist() == [2 * x for x in range(50)]
    out = "".join(capfd.readouterr())
    for task in ("apply", "write_commit"):
        assert f"spark.openlineage.parentJobName=geneva_ol_parent.small.{task}" in out, task
    assert "spark.openlineage.parentRunId=" in out and "spark.openlineage.rootParentJobName=geneva_ol_parent" in out
    assert FAKE_SECRET not in out
