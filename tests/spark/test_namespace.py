"""GenevaNamespace in-process (job_runner in_process, on the suite's local Spark session): the spec's own request
models in, the spec's responses out -- a UDF column added as an AddVirtualColumnEntry (a base64 cloudpickled UDF,
and a plain function with its output's Arrow type) and backfilled by job id, a query view and a chunker view
created with data, an IVF_PQ index honouring num_partitions / num_sub_vectors, bad requests refused changing
nothing, and no storage secret in any response."""

from __future__ import annotations

import base64
import json

import cloudpickle
import lance
import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry,
    AddVirtualColumnEntry,
    AddVirtualColumnOutputEntry,
    AlterColumnsEntry,
    MaterializedViewUdtfEntry,
)

import geneva_provider as gp
from geneva_provider.core.contracts.operations import GetJob, ListJobs, SourceQuery
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.namespace import GenevaNamespace
from tests.index_data import clustered
from tests.namespace_data import create_docs, docs, letters, times_ten
from tests.namespace_server import ipc

SECRET = "s3cr3t-namespace-value"


def b64(obj: object) -> str:
    return base64.b64encode(cloudpickle.dumps(obj)).decode()


def done(ns: GenevaNamespace, job_id: str) -> gp.JobRecord:
    """Polls describe_job until the job ended; its record."""
    for _ in range(6000):
        job = ns.describe_job(GetJob(job_id=job_id)).job
        if job.status in ("DONE", "FAILED", "CANCELLED"):
            return job
        import time

        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not end: {job}")


@pytest.fixture
def ns(tmp_path, spark):
    root = str(tmp_path / "lake")
    create_docs(root)
    namespace = ln.connect("geneva", {"root": root, "storage.geneva_test_secret": SECRET})
    assert isinstance(namespace, GenevaNamespace)
    return namespace


def test_crud_is_the_directory_namespace_and_a_udf_column_is_backfilled_by_job_id(ns):
    assert ns.list_tables(ln.ListTablesRequest(id=[])).tables == ["t"]
    assert ns.count_table_rows(ln.CountTableRowsRequest(id=["t"])).count == 20
    assert SECRET not in repr(ns) and SECRET not in ns.namespace_id()

    entry = AddVirtualColumnEntry(udf=times_ten.pickled_b64(), udf_name="times_ten", udf_version="1", image="",
                                  input_columns=["x"], outputs=[], field_metadata={"team": "search"})
    added = ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=["t"], new_columns=[AddColumnsEntry(name="y", virtual_column=entry)]))
    ds = ns.catalog.ref("t").dataset()
    assert added.version == ds.version and ds.schema.field("y").metadata[b"team"] == b"search"

    accepted = ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["t"], column="y",
                                                                                   where="x >= 5"))
    job = done(ns, accepted.job_id)
    assert (job.status, job.rows_committed) == ("DONE", 15)
    assert accepted.job_id in [j.job_id for j in ns.list_jobs(ListJobs(id=["t"])).jobs]
    rows = ns.catalog.ref("t").dataset().to_table(columns=["x", "y"]).to_pylist()
    assert {r["x"]: r["y"] for r in rows} == {x: (x * 10 if x >= 5 else None) for x in range(20)}
    ns.catalog.ref("t").dataset().validate()
    assert SECRET not in json.dumps([added.to_dict(), accepted.to_dict(), job.model_dump(mode="json")])


def test_a_plain_function_with_auto_backfill_gives_its_job_id_in_the_context(ns):
    def plus_one(x):
        return x + 1

    entry = AddVirtualColumnEntry(udf=b64(plus_one), udf_name="plus_one", udf_version="7", image="",
                                  input_columns=["x"], auto_backfill=True, outputs=[AddVirtualColumnOutputEntry(
                                      column="z", struct_field="z", data_type={"type": "int64"}, nullable=True)])
    added = ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=["t"], new_columns=[AddColumnsEntry(name="z", virtual_column=entry)]))
    assert done(ns, added.context["job_id"]).status == "DONE"
    t = ns.catalog.ref("t").dataset().to_table(columns=["x", "z"])
    assert t.schema.field("z").type == pa.int64()
    assert t.column("z").to_pylist() == [x + 1 for x in t.column("x").to_pylist()]


def test_a_query_view_and_a_chunker_view_are_created_with_their_first_refresh(ns):
    source = SourceQuery(id=["t"], where="x < 10", columns={"x": "x", "s": "s"},
                         udf_columns={"y": {"udf": times_ten, "input_columns": ["x"]}})
    made = ns.create_materialized_view(ln.CreateMaterializedViewRequest(
        id=["v"], kind="query", source_query=source.model_dump_json(), output_schema="", with_no_data=False))
    assert made.job_id and done(ns, made.job_id).status == "DONE"
    rows = ns.catalog.ref("v").dataset().to_table(columns=["x", "s", "y"]).to_pylist()
    assert sorted((r["x"], r["s"], r["y"]) for r in rows) == [(x, f"doc{x}", x * 10) for x in range(10)]

    spec = MaterializedViewUdtfEntry(kind="chunker", udtf=letters.pickled_b64(), udtf_sha="", udtf_name="letters",
                                     udtf_version="1")
    chunks = ns.create_materialized_view(ln.CreateMaterializedViewRequest(
        id=["c"], kind="chunker", source_query=SourceQuery(id=["t"], where="x < 3", columns={"x": "x"})
        .model_dump_json(), output_schema="", udtf_spec=spec, with_no_data=True))
    assert chunks.job_id is None and ns.count_table_rows(ln.CountTableRowsRequest(id=["c"])).count == 0
    refreshed = ns.refresh_materialized_view(ln.RefreshMaterializedViewRequest(id=["c"]))
    assert done(ns, refreshed.job_id).status == "DONE"
    got = ns.catalog.ref("c").dataset().to_table(columns=["x", "chunk", "start"]).to_pylist()
    assert sorted((r["x"], r["chunk"], r["start"]) for r in got) == sorted(
        (x, c, i) for x in range(3) for i, c in enumerate(f"doc{x}"))
    ns.catalog.ref("c").dataset().validate()


def test_create_table_index_honours_num_partitions_and_num_sub_vectors(ns, tmp_path):
    gp.connect(ns.config.root).create_table("vecs", clustered(2000))
    made = ns.create_table_index(ln.CreateTableIndexRequest(id=["vecs"], column="vec", index_type="IVF_PQ",
                                                            distance_type="l2", num_partitions=4, num_sub_vectors=8))
    assert done(ns, made.context["job_id"]).status == "DONE"
    listed = ns.list_table_indices(ln.ListTableIndicesRequest(id=["vecs"])).indexes
    assert [(i.index_name, i.columns, i.index_type, i.num_indexed_rows) for i in listed] == [
        ("vec_idx", ["vec"], "IVF_PQ", 2000)]
    stats = ns.describe_table_index_stats(ln.DescribeTableIndexStatsRequest(id=["vecs"], index_name="vec_idx"))
    assert (stats.num_indexed_rows, stats.num_unindexed_rows, stats.distance_type) == (2000, 0, "l2")
    details = ns.catalog.ref("vecs").dataset().stats.index_stats("vec_idx")
    assert details["indices"][0]["num_partitions"] == 4
    assert details["indices"][0]["sub_index"]["num_sub_vectors"] == 8
    ns.drop_table_index(ln.DropTableIndexRequest(id=["vecs"], index_name="vec_idx"))
    assert ns.list_table_indices(ln.ListTableIndicesRequest(id=["vecs"])).indexes == []


def test_bad_requests_raise_the_packages_errors_and_change_nothing(ns):
    version = ns.catalog.ref("t").dataset().version
    docker = AddVirtualColumnEntry(udf=times_ten.pickled_b64(), udf_name="times_ten", udf_version="1", image="",
                                   input_columns=["x"], outputs=[], udf_backend="DockerUDFSpecV1")
    with pytest.raises(InvalidArgumentError, match=r"column 'y'.*udf_backend 'DockerUDFSpecV1'"):
        ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
            id=["t"], new_columns=[AddColumnsEntry(name="y", virtual_column=docker)]))
    garbage = docker.model_copy(update={"udf_backend": None, "udf": "not base64!"})
    with pytest.raises(InvalidArgumentError, match=r"column 'y'.*not a base64 cloudpickled function"):
        ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
            id=["t"], new_columns=[AddColumnsEntry(name="y", virtual_column=garbage)]))
    with pytest.raises(gp.GenevaError, match=r"'nope'"):
        ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["t"], column="nope"))
    with pytest.raises(InvalidArgumentError, match=r"udtf_spec.batch=True contradicts kind 'chunker'"):
        ns.create_materialized_view(ln.CreateMaterializedViewRequest(
            id=["v"], kind="chunker", source_query=SourceQuery(id=["t"]).model_dump_json(), output_schema="",
            udtf_spec=MaterializedViewUdtfEntry(kind="chunker", udtf=b64(len), udtf_sha="", udtf_name="n",
                                                udtf_version="1", batch=True)))
    with pytest.raises(InvalidArgumentError, match=r"source_query is not the JSON"):
        ns.create_materialized_view(ln.CreateMaterializedViewRequest(id=["v"], kind="query", source_query="{",
                                                                     output_schema=""))
    with pytest.raises(InvalidArgumentError, match=r"unknown property 'colour'"):
        GenevaNamespace(root=ns.config.root, colour="blue")
    assert ns.catalog.ref("t").dataset().version == version
    assert ns.list_tables(ln.ListTablesRequest(id=[])).tables == ["t"]


def test_an_expression_column_then_alter_and_drop_columns(ns):
    added = ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(id=["t"], new_columns=[
        AddColumnsEntry(name="x2", expression="x * 2")]))
    assert ns.catalog.ref("t").dataset().version == added.version
    altered = ns.alter_table_alter_columns(ln.AlterTableAlterColumnsRequest(id=["t"], alterations=[
        AlterColumnsEntry(path="x2", rename="doubled"),
        AlterColumnsEntry(path="s", nullable=True)]))
    ds = ns.catalog.ref("t").dataset()
    assert altered.version == ds.version and "doubled" in ds.schema.names and "x2" not in ds.schema.names
    assert ds.to_table(columns=["x", "doubled"]).to_pydict() == {"x": list(range(20)),
                                                                 "doubled": [2 * x for x in range(20)]}
    dropped = ns.alter_table_drop_columns(ln.AlterTableDropColumnsRequest(id=["t"], columns=["doubled"]))
    ds = ns.catalog.ref("t").dataset()
    assert dropped.version == ds.version and ds.schema.names == ["x", "s"]
    ds.validate()


def test_a_plain_function_with_several_outputs_is_a_multi_output_udf(ns):
    def around(x):
        return {"lo": x - 1, "hi": x + 1}

    outputs = [AddVirtualColumnOutputEntry(column=c, struct_field=c, data_type={"type": "int64"}, nullable=True)
               for c in ("lo", "hi")]
    entry = AddVirtualColumnEntry(udf=b64(around), udf_name="around", udf_version="1", image="",
                                  input_columns=["x"], outputs=outputs)
    ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=["t"], new_columns=[AddColumnsEntry(name="lo", virtual_column=entry)]))
    job = done(ns, ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["t"], column="hi")).job_id)
    assert job.status == "DONE"
    t = ns.catalog.ref("t").dataset().to_table(columns=["x", "lo", "hi"]).to_pylist()
    assert [(r["lo"], r["hi"]) for r in t] == [(r["x"] - 1, r["x"] + 1) for r in t] and len(t) == 20


def test_a_table_in_a_child_namespace_gets_a_udf_column_backfilled_and_a_view(ns):
    """Table ``docs`` in child namespace ``lake`` (made with create_namespace + create_table): every operation finds
    it through the inner namespace (its describe_table location), not as a root table of that name."""
    ns.create_namespace(ln.CreateNamespaceRequest(id=["lake"]))
    ns.create_table(ln.CreateTableRequest(id=["lake", "docs"]), ipc(docs()))
    entry = AddVirtualColumnEntry(udf=times_ten.pickled_b64(), udf_name="times_ten", udf_version="1", image="",
                                  input_columns=["x"], outputs=[])
    ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=["lake", "docs"], new_columns=[AddColumnsEntry(name="y", virtual_column=entry)]))
    accepted = ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["lake", "docs"], column="y",
                                                                                   where="x >= 5"))
    job = done(ns, accepted.job_id)
    assert (job.status, job.table, job.rows_committed) == ("DONE", "docs", 15)
    assert [j.job_id for j in ns.list_jobs(ListJobs(id=["lake", "docs"])).jobs] == [accepted.job_id]
    assert accepted.job_id in [j.job_id for j in ns.list_jobs(ListJobs()).jobs]  # every namespace's jobs
    location = ns.describe_table(ln.DescribeTableRequest(id=["lake", "docs"])).location
    table = lance.dataset(location)
    table.validate()
    assert {r["x"]: r["y"] for r in table.to_table(columns=["x", "y"]).to_pylist()} == {
        x: (x * 10 if x >= 5 else None) for x in range(20)}

    source = SourceQuery(id=["lake", "docs"], where="x < 8", columns={"x": "x", "y": "y"})
    made = ns.create_materialized_view(ln.CreateMaterializedViewRequest(
        id=["lake", "v"], kind="query", source_query=source.model_dump_json(), output_schema="", with_no_data=False))
    assert made.job_id and done(ns, made.job_id).status == "DONE"
    view = lance.dataset(ns.describe_table(ln.DescribeTableRequest(id=["lake", "v"])).location)
    view.validate()
    assert sorted((r["x"], r["y"]) for r in view.to_table(columns=["x", "y"]).to_pylist()) == [
        (x, x * 10 if x >= 5 else None) for x in range(8)]
    refreshed = ns.refresh_materialized_view(ln.RefreshMaterializedViewRequest(id=["lake", "v"]))
    assert done(ns, refreshed.job_id).status == "DONE"  # its source found again in the view's namespace
    assert ns.list_tables(ln.ListTablesRequest(id=["lake"])).tables == ["docs", "v"]
    assert ns.list_tables(ln.ListTablesRequest(id=[])).tables == ["t"]  # the root's table of the tests, untouched
    assert "y" not in ns.catalog.ref("t").dataset().schema.names

    with pytest.raises(InvalidArgumentError, match=r"source \['lake', 'docs'\] is in another namespace"):
        ns.create_materialized_view(ln.CreateMaterializedViewRequest(
            id=["w"], kind="query", source_query=source.model_dump_json(), output_schema=""))
    assert ns.list_tables(ln.ListTablesRequest(id=[])).tables == ["t"]


def test_job_runner_spark_runs_the_backfill_on_the_active_session(tmp_path, spark):
    """``job_runner=spark`` with ``spark.master``: getOrCreate picks the suite's session up (no second JVM), and the
    backfill asked for by job id runs on it."""
    root = str(tmp_path / "lake")
    create_docs(root)
    ns = ln.connect("geneva", {"root": root, "job_runner": "spark", "spark.master": "local[1]"})
    assert ns.runner.spark is spark
    entry = AddVirtualColumnEntry(udf=times_ten.pickled_b64(), udf_name="times_ten", udf_version="1", image="",
                                  input_columns=["x"], outputs=[])
    ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=["t"], new_columns=[AddColumnsEntry(name="y", virtual_column=entry)]))
    accepted = ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["t"], column="y"))
    job = done(ns, accepted.job_id)
    assert (job.status, job.rows_committed) == ("DONE", 20)
    ds = ns.catalog.ref("t").dataset()
    ds.validate()
    assert ds.to_table(columns=["x", "y"]).to_pydict() == {"x": list(range(20)), "y": [x * 10 for x in range(20)]}
