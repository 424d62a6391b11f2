"""The issue's first must-show: the official ``lance-namespace-urllib3-client`` against ``geneva-provider serve``
serving GenevaNamespace -- a UDF column's backfill answered 202 with a job id, the job polled on the extension
route to DONE, the values exact; a query view and a chunker view created and refreshed through the protocol."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import lance
import pytest
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import DataApi, MaterializedViewApi, TableApi
from lance_namespace_urllib3_client.exceptions import ApiException
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry,
    AddVirtualColumnEntry,
    AddVirtualColumnOutputEntry,
    AlterTableAddColumnsRequest,
    AlterTableBackfillColumnsRequest,
    CreateMaterializedViewRequest,
    DescribeTableRequest,
    MaterializedViewUdtfEntry,
    RefreshMaterializedViewRequest,
)

import geneva_provider as gp
from geneva_provider.core.contracts.operations import SourceQuery
from tests.namespace_data import create_docs, docs, letters, times_ten
from tests.namespace_server import TOKEN, Server, ipc


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, ApiClient]]:
    root = tmp_path_factory.mktemp("lake")
    create_docs(str(root))
    srv = Server(root)
    try:
        yield srv, ApiClient(Configuration(host=srv.url, access_token=TOKEN))
    finally:
        srv.stop()


def done(client: ApiClient, job_id: str) -> dict:
    """Polls ``GET /v1/jobs/{job_id}`` until the job ended; its record."""
    for _ in range(3000):
        answer = client.call_api("GET", f"{client.configuration.host}/v1/jobs/{job_id}",
                                 header_params={"Authorization": f"Bearer {TOKEN}"})
        answer.read()
        assert answer.status == 200, answer.data
        job = json.loads(answer.data)["job"]
        if job["status"] in ("DONE", "FAILED", "CANCELLED"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end: {job}")


def rows(client: ApiClient, table: str, columns: list[str]) -> list[dict]:
    location = TableApi(client).describe_table(table, DescribeTableRequest()).location
    ds = lance.dataset(location)
    ds.validate()
    return ds.to_table(columns=columns).to_pylist()


def test_a_udf_column_is_added_and_backfilled_by_job_id(served: tuple[Server, ApiClient]) -> None:
    """The column added as the spec carries it (``AddVirtualColumnEntry``: a base64 cloudpickled UDF), its backfill
    asked for (202 + job id) and followed on the job route to DONE, the values exact; a UDF backend the server
    cannot run is refused with the spec's error model, nothing changed."""
    srv, client = served
    entry = AddVirtualColumnEntry(input_columns=["x"], image="", udf=times_ten.pickled_b64(), udf_name="times_ten",
                                  udf_version="1", outputs=[AddVirtualColumnOutputEntry(
                                      column="y", struct_field="", data_type={"type": "int64"}, nullable=True)])
    before = rows_version(client, "t")
    docker = entry.model_copy(update={"udf_backend": "DockerUDFSpecV1", "image": "team/udf:1"})
    with pytest.raises(ApiException) as refused:
        TableApi(client).alter_table_add_columns("t", AlterTableAddColumnsRequest(
            new_columns=[AddColumnsEntry(name="y", virtual_column=docker)]))
    assert refused.value.status == 400 and "DockerUDFSpecV1" in json.loads(refused.value.body)["error"]
    assert rows_version(client, "t") == before  # nothing changed
    TableApi(client).alter_table_add_columns("t", AlterTableAddColumnsRequest(
        new_columns=[AddColumnsEntry(name="y", virtual_column=entry)]))
    assert gp.connect(str(srv.root)).open_table("t").udf_columns()["y"]["name"] == "times_ten"
    accepted = DataApi(client).alter_table_backfill_columns_with_http_info(
        "t", AlterTableBackfillColumnsRequest(column="y", where="x >= 5"))
    assert accepted.status_code == 202 and accepted.data.job_id
    job = done(client, accepted.data.job_id)
    assert (job["status"], job["rows_committed"]) == ("DONE", 15)
    got = {r["x"]: r["y"] for r in rows(client, "t", ["x", "y"])}
    assert got == {x: (x * 10 if x >= 5 else None) for x in range(20)}


def rows_version(client: ApiClient, table: str) -> int:
    return lance.dataset(TableApi(client).describe_table(table, DescribeTableRequest()).location).version


def test_a_query_view_and_a_chunker_view_are_created_and_refreshed(served: tuple[Server, ApiClient]) -> None:
    _, client = served
    views = MaterializedViewApi(client)
    source = SourceQuery(id=["t"], where="x < 10", columns={"x": "x", "s": "s"})
    made = views.create_materialized_view("v", CreateMaterializedViewRequest(
        kind="query", source_query=source.model_dump_json(), output_schema="", with_no_data=True))
    assert made.job_id is None  # with_no_data: no refresh started
    refreshed = views.refresh_materialized_view(
        "v", refresh_materialized_view_request=RefreshMaterializedViewRequest())
    assert done(client, refreshed.job_id)["status"] == "DONE"
    assert sorted((r["x"], r["s"]) for r in rows(client, "v", ["x", "s"])) == [(x, f"doc{x}") for x in range(10)]

    spec = MaterializedViewUdtfEntry(kind="chunker", udtf=letters.pickled_b64(), udtf_sha="", udtf_name="letters",
                                     udtf_version="1")
    chunks = views.create_materialized_view("c", CreateMaterializedViewRequest(
        kind="chunker", source_query=SourceQuery(id=["t"], where="x < 3", columns={"x": "x"}).model_dump_json(),
        output_schema="", udtf_spec=spec, with_no_data=False))
    assert chunks.job_id and done(client, chunks.job_id)["status"] == "DONE"
    got = sorted((r["x"], r["chunk"], r["start"]) for r in rows(client, "c", ["x", "chunk", "start"]))
    assert got == sorted((x, c, i) for x in range(3) for i, c in enumerate(f"doc{x}"))


def test_a_table_in_a_child_namespace_is_backfilled_by_job_id_through_the_protocol(
        served: tuple[Server, ApiClient]) -> None:
    """``lake$docs``, made with create_namespace + create_table through the client: its UDF column added, its
    backfill accepted (202 + job id), the job followed on the job route to DONE, the values exact."""
    from lance_namespace_urllib3_client.api import NamespaceApi
    from lance_namespace_urllib3_client.models import CreateNamespaceRequest

    _, client = served
    NamespaceApi(client).create_namespace("lake", CreateNamespaceRequest())
    DataApi(client).create_table("lake$docs", ipc(docs()))
    entry = AddVirtualColumnEntry(input_columns=["x"], image="", udf=times_ten.pickled_b64(), udf_name="times_ten",
                                  udf_version="1", outputs=[])
    TableApi(client).alter_table_add_columns("lake$docs", AlterTableAddColumnsRequest(
        new_columns=[AddColumnsEntry(name="y", virtual_column=entry)]))
    accepted = DataApi(client).alter_table_backfill_columns_with_http_info(
        "lake$docs", AlterTableBackfillColumnsRequest(column="y", where="x < 4"))
    assert accepted.status_code == 202
    job = done(client, accepted.data.job_id)
    assert (job["status"], job["table"], job["rows_committed"]) == ("DONE", "docs", 4)
    got = {r["x"]: r["y"] for r in rows(client, "lake$docs", ["x", "y"])}
    assert got == {x: (x * 10 if x < 4 else None) for x in range(20)}


def test_create_index_through_the_protocol_honours_num_partitions_and_num_sub_vectors(
        served: tuple[Server, ApiClient]) -> None:
    """``create_table_index`` runs the Spark index build as a job (its id in the response's context), honouring
    ``num_partitions`` / ``num_sub_vectors``; the index is listed, described and dropped through the protocol."""
    from lance_namespace_urllib3_client.models import (
        CreateTableIndexRequest,
        DescribeTableIndexStatsRequest,
        ListTableIndicesRequest,
    )

    from tests.spark.test_namespace import clustered

    srv, client = served
    gp.connect(str(srv.root)).create_table("vecs", clustered(2000))
    tables = TableApi(client)
    made = tables.create_table_index("vecs", CreateTableIndexRequest(
        column="vec", index_type="IVF_PQ", distance_type="l2", num_partitions=4, num_sub_vectors=8))
    assert done(client, made.context["job_id"])["status"] == "DONE"
    listed = tables.list_table_indices("vecs", ListTableIndicesRequest()).indexes
    assert [(i.index_name, i.columns, i.num_indexed_rows) for i in listed] == [("vec_idx", ["vec"], 2000)]
    stats = tables.describe_table_index_stats("vecs", "vec_idx", DescribeTableIndexStatsRequest())
    assert (stats.num_indexed_rows, stats.num_unindexed_rows) == (2000, 0)
    details = lance.dataset(tables.describe_table("vecs", DescribeTableRequest()).location).stats.index_stats("vec_idx")
    assert details["indices"][0]["num_partitions"] == 4
    assert details["indices"][0]["sub_index"]["num_sub_vectors"] == 8
    tables.drop_table_index("vecs", "vec_idx")
    assert tables.list_table_indices("vecs", ListTableIndicesRequest()).indexes == []
