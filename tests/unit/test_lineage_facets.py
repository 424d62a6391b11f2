"""OpenLineage facets from the plan and the commit (no JVM): dataset names, column edges, schema, statistics,
versions -- from real plans of real Lance tables, read as a lineage tool reads the facets (their JSON)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import PlanSummary, WriteResult
from geneva_provider.core.filters import filter_columns
from geneva_provider.openlineage import dataset_name, operator_lineage
from geneva_provider.stages import BackfillOptions, plan_backfill
from tests.conftest import FAKE_SECRET
from tests.helpers import events_table


@gp.udf(data_type=pa.int64(), input_columns=["x"])
def double(x: int) -> int:
    return x * 2


@pytest.mark.parametrize(("uri", "expected"), [
    ("/data/lake/t.lance", ("file", "/data/lake/t.lance")),
    ("/data/lake/t.lance/", ("file", "/data/lake/t.lance")),
    ("file:///data/lake/t.lance", ("file", "/data/lake/t.lance")),
    ("s3://bucket/lake/t.lance", ("s3://bucket", "lake/t.lance")),
    ("gs://bucket/t.lance", ("gs://bucket", "t.lance")),
    ("abfss://box@acct.dfs.core.windows.net/lake/t.lance", ("abfss://box@acct.dfs.core.windows.net", "lake/t.lance")),
])
def test_a_table_uri_is_named_as_the_openlineage_naming_spec_names_files(uri, expected):
    assert dataset_name(uri) == expected


def test_a_relative_local_path_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dataset_name("lake/t.lance") == ("file", str(tmp_path / "lake" / "t.lance"))


def test_the_filter_columns_are_the_table_columns_it_reads_outside_string_literals():
    names = ["id", "x", "text", "my col", "meta"]
    assert filter_columns("id < 10 AND text = 'x > 1'", names) == ["id", "text"]
    assert filter_columns('"my col" IS NOT NULL OR x IN (1, 2) OR id > x', names) == ["my col", "x", "id"]
    assert filter_columns("meta.lang = 'en'", names) == ["meta"]
    assert filter_columns(None, names) == []


def facets(lineage) -> dict:
    """The OperatorLineage as the JSON an OpenLineage event carries (its datasets)."""
    from openlineage.client.serde import Serde

    return {side: [json.loads(Serde.to_json(d)) for d in getattr(lineage, side)] for side in ("inputs", "outputs")}


def test_a_backfill_plan_carries_its_lineage_and_the_facets_name_one_table_dataset(db):
    tbl = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": double})
    summary = PlanSummary.from_xcom(json.loads(json.dumps(
        plan_backfill(tbl.ref, "y", BackfillOptions(where="id >= 1000")).to_xcom())))  # through XCom's JSON
    lineage = summary.lineage
    assert lineage is not None and lineage.source_uri == lineage.table_uri == tbl.uri
    assert lineage.source_version == summary.read_version == tbl.version  # the version the plan read
    path = os.path.abspath(tbl.uri)

    started = facets(operator_lineage(lineage))
    [inp], [out] = started["inputs"], started["outputs"]
    assert (inp["namespace"], inp["name"]) == (out["namespace"], out["name"]) == ("file", path)
    assert inp["facets"]["version"]["datasetVersion"] == str(tbl.version)
    assert "version" not in out["facets"] and out.get("outputFacets", {}) == {}  # nothing committed yet
    field = out["facets"]["columnLineage"]["fields"]["y"]
    assert [(f["name"], f["field"], t["type"], t["subtype"], t["description"]) for f in field["inputFields"]
            for t in f["transformations"]] == [
        (path, "x", "DIRECT", "TRANSFORMATION", f"UDF double version {double.version}"),
        (path, "id", "INDIRECT", "FILTER", "where")]
    assert [f["name"] for f in out["facets"]["columnLineage"]["dataset"]] == [path]
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [("y", "int64")]

    written = WriteResult(job_id=summary.job_id, version=summary.read_version + 2, fragments_committed=2,
                          rows_committed=2_000, fragments_vanished=[], commit_retries=0, seconds=1.0,
                          files_written=2, bytes_written=4_321)
    [out] = facets(operator_lineage(lineage, written.committed()))["outputs"]
    assert out["facets"]["version"]["datasetVersion"] == str(summary.read_version + 2)
    stats = out["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["fileCount"], stats["size"]) == (2_000, 2, 4_321)


def test_an_operator_reports_its_plans_lineage_and_no_dataset_before_the_plan_is_rendered(db):
    from airflow.sdk import DAG

    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
    from geneva_provider.operators.spark import GenevaSparkWriteCommitOperator

    tbl = db.create_table("events", events_table(100))
    tbl.add_columns({"y": double})
    summary = plan_backfill(tbl.ref, "y").to_xcom()
    with DAG("lineage_units", schedule=None):
        plan = GenevaPlanBackfillOperator(task_id="plan", table="events", column="y")
        pending = GenevaSparkWriteCommitOperator(task_id="pending", plan=plan.output)
        given = GenevaSparkWriteCommitOperator(task_id="given", plan=summary)
    assert pending.get_openlineage_facets_on_start().outputs == []  # an XComArg: not a plan yet, no table named
    [out] = facets(given.get_openlineage_facets_on_start())["outputs"]
    assert out["name"] == os.path.abspath(tbl.uri) and list(out["facets"]["columnLineage"]["fields"]) == ["y"]
    assert given.get_openlineage_facets_on_failure(None).outputs[0].name == os.path.abspath(tbl.uri)


def test_a_job_without_column_lineage_reports_no_dataset():
    lineage = operator_lineage(None)
    assert lineage.inputs == [] and lineage.outputs == []


def test_before_its_plan_exists_a_plan_operator_names_its_table_without_a_version(lance_db):
    """START of a plan task: the table its connection names, read and written, no version read yet."""
    from airflow.sdk import DAG

    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator

    tbl = lance_db.create_table("events", events_table(10))
    with DAG("lineage_start", schedule=None):
        plan = GenevaPlanBackfillOperator(task_id="plan", table="events", column="y")
    started = facets(plan.get_openlineage_facets_on_start())
    [inp], [out] = started["inputs"], started["outputs"]
    assert (inp["namespace"], inp["name"]) == (out["namespace"], out["name"]) == ("file", os.path.abspath(tbl.uri))
    assert "version" not in inp.get("facets", {}) and "columnLineage" not in out.get("facets", {})
    assert FAKE_SECRET not in json.dumps(started)  # the connection's storage options are in no event


def test_add_columns_reports_each_udf_column_from_its_inputs_and_the_versions(lance_db):
    from geneva_provider.examples import sample, word_count
    from geneva_provider.operators.backfill import GenevaAddColumnsOperator

    tbl = lance_db.create_table("comments", sample(20))
    op = GenevaAddColumnsOperator(task_id="declare", table="comments",
                                  columns={"words": "geneva_provider.examples:word_count"})
    result = op.execute({})
    done = facets(op.get_openlineage_facets_on_complete(None))
    [inp], [out] = done["inputs"], done["outputs"]
    path = os.path.abspath(tbl.uri)
    assert inp["name"] == out["name"] == path
    assert "version" not in inp.get("facets", {})  # a schema change reads no rows
    assert out["facets"]["version"]["datasetVersion"] == str(result["version"]) != "1"
    [(field, edges)] = out["facets"]["columnLineage"]["fields"].items()
    assert field == "words"
    assert [(f["name"], f["field"], t["subtype"], t["description"]) for f in edges["inputFields"]
            for t in f["transformations"]] == [(path, "text", "TRANSFORMATION",
                                                f"UDF word_count version {word_count.version}")]
    declared = lance_db.open_table("comments").schema.field("words").type
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [("words", str(declared))]
    assert "outputStatistics" not in out.get("outputFacets", {})  # a declaration writes no rows


def test_a_created_view_reports_its_source_and_its_columns(lance_db):
    from geneva_provider.examples import sample
    from geneva_provider.operators.views import GenevaCreateMaterializedViewOperator

    src = lance_db.create_table("comments", sample(30))
    op = GenevaCreateMaterializedViewOperator(task_id="view", view="short", source_table="comments",
                                              columns={"cid": "id", "wc": "geneva_provider.examples:word_count"},
                                              where="x >= 10")
    before = facets(op.get_openlineage_facets_on_start())
    assert [d["name"] for d in before["inputs"]] == [os.path.abspath(src.uri)]
    assert [d["name"] for d in before["outputs"]] == [os.path.abspath(f"{lance_db.uri}/short.lance")]  # to be made
    op.execute({})
    done = facets(op.get_openlineage_facets_on_complete(None))
    [inp], [out] = done["inputs"], done["outputs"]
    assert inp["facets"]["version"]["datasetVersion"] == str(src.version)
    fields = out["facets"]["columnLineage"]["fields"]
    assert {c: [(f["field"], t["subtype"]) for f in e["inputFields"] for t in f["transformations"]]
            for c, e in fields.items()} == {"cid": [("id", "IDENTITY"), ("x", "FILTER")],
                                            "wc": [("text", "TRANSFORMATION"), ("x", "FILTER")]}


def test_a_compaction_and_an_index_build_read_and_write_their_table(lance_db):
    from geneva_provider.operators.maintenance import GenevaSparkCompactOperator
    from geneva_provider.pipeline.jobs import plan_compaction_keeping_indexes

    tbl = lance_db.create_table("events", events_table(300), max_rows_per_file=50)
    summary = plan_compaction_keeping_indexes(tbl.ref, {"target_rows_per_fragment": 1_000},
                                              store=tbl.checkpoint_store)
    assert summary.lineage is not None and summary.lineage.source_version == tbl.version
    op = GenevaSparkCompactOperator(task_id="compact", plan=summary.to_xcom())
    started = facets(op.get_openlineage_facets_on_start())
    [inp], [out] = started["inputs"], started["outputs"]
    assert inp["name"] == out["name"] == os.path.abspath(tbl.uri)
    assert inp["facets"]["version"]["datasetVersion"] == str(tbl.version)
    assert "columnLineage" not in out["facets"] and "schema" not in out["facets"]


def test_a_sensor_reads_the_table_it_waits_on_and_writes_nothing(lance_db):
    from airflow.sdk import DAG

    from geneva_provider.sensors.table import GenevaTableChangedSensor

    tbl = lance_db.create_table("events", events_table(10))
    with DAG("lineage_sensor", schedule=None):
        sensor = GenevaTableChangedSensor(task_id="wait", table="events", min_version=2)
    lineage = facets(sensor.get_openlineage_facets_on_start())
    assert [d["name"] for d in lineage["inputs"]] == [os.path.abspath(tbl.uri)] and lineage["outputs"] == []
