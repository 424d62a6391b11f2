"""``geneva-provider serve`` started on 127.0.0.1 by the test, spoken to by clients no one here wrote: the official
``lance-namespace-urllib3-client`` and pylance's own REST namespace, then ``lance.dataset`` on the location served."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import lance
import lance_namespace
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import DataApi, NamespaceApi, TableApi
from lance_namespace_urllib3_client.exceptions import ApiException
from lance_namespace_urllib3_client.models import (
    AlterTableBackfillColumnsRequest,
    CountTableRowsRequest,
    CreateNamespaceRequest,
    DescribeTableRequest,
)

from tests.namespace_server import TOKEN, Server, ipc
from tests.s3_server import free_port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("served"))
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            code, out = srv.stop()  # uvicorn re-raises the SIGTERM once its graceful shutdown is done
            assert code in (0, -signal.SIGTERM) and "Finished server process" in out, out
            assert TOKEN not in out


@pytest.fixture(scope="module")
def client(server: Server) -> ApiClient:
    return ApiClient(Configuration(host=server.url, access_token=TOKEN))


@pytest.fixture(scope="module")
def table(server: Server, client: ApiClient) -> str:
    """Namespace ``lake`` with table ``lake$docs`` (3 rows), created through the official client."""
    NamespaceApi(client).create_namespace("lake", CreateNamespaceRequest())
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "text": ["a", "bb", "ccc"]})
    DataApi(client).create_table("lake$docs", ipc(rows))
    return "lake$docs"


def error_of(exc: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(exc.value.body)


def test_table_crud_through_the_official_client(client: ApiClient, table: str, server: Server) -> None:
    assert NamespaceApi(client).list_tables("lake").tables == ["docs"]
    assert "lake" in NamespaceApi(client).list_namespaces("$").namespaces
    described = TableApi(client).describe_table(table, DescribeTableRequest())
    assert described.location is not None and not described.storage_options
    dotted = TableApi(client).describe_table("lake.docs", DescribeTableRequest(), delimiter=".")  # the query override
    assert dotted.location == described.location
    assert DataApi(client).count_table_rows(table, CountTableRowsRequest()) == 3

    DataApi(client).insert_into_table(table, ipc(pa.table({"id": pa.array([4], pa.int64()), "text": ["dddd"]})))
    assert DataApi(client).count_table_rows(table, CountTableRowsRequest()) == 4
    ds = lance.dataset(described.location)
    ds.validate()
    assert sorted(ds.to_table().column("text").to_pylist()) == ["a", "bb", "ccc", "dddd"]

    DataApi(client).create_table("lake$scratch", ipc(pa.table({"x": [1]})))
    assert sorted(NamespaceApi(client).list_tables("lake").tables) == ["docs", "scratch"]
    TableApi(client).drop_table("lake$scratch")
    assert NamespaceApi(client).list_tables("lake").tables == ["docs"]


def test_no_token_is_401(server: Server, table: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        anonymous = ApiClient(Configuration(host=server.url))
        for name, value in headers.items():
            anonymous.set_default_header(name, value)
        with pytest.raises(ApiException) as exc:
            NamespaceApi(anonymous).list_tables("lake")
        assert exc.value.status == 401
        assert error_of(exc)["code"] == lance_namespace.ErrorCode.UNAUTHENTICATED


@pytest.mark.filterwarnings("ignore::UserWarning")  # the wrong version is sent on purpose
def test_bad_requests_answer_the_error_model_and_change_nothing(client: ApiClient, table: str) -> None:
    before = DataApi(client).count_table_rows(table, CountTableRowsRequest())
    with pytest.raises(ApiException) as exc:
        TableApi(client).describe_table("lake$missing", DescribeTableRequest())
    assert exc.value.status == 404
    assert error_of(exc)["code"] == lance_namespace.ErrorCode.TABLE_NOT_FOUND
    assert "missing" in error_of(exc)["error"]

    with pytest.raises(ApiException) as exc:  # rows of another schema
        DataApi(client).insert_into_table(table, ipc(pa.table({"other": [1.5]})))
    assert exc.value.status in (400, 500) and error_of(exc)["error"]

    with pytest.raises(ApiException) as exc:  # a body the server's request model refuses
        TableApi(client).describe_table(table, DescribeTableRequest.model_construct(version="latest"))
    assert exc.value.status == 400
    assert error_of(exc)["code"] == lance_namespace.ErrorCode.INVALID_INPUT and "version" in error_of(exc)["error"]

    DataApi(client).create_table("plain", ipc(pa.table({"text": ["a"]})))
    with pytest.raises(ApiException) as exc:  # a column that is not a UDF column: GenevaNamespace's own error
        DataApi(client).alter_table_backfill_columns("plain", AlterTableBackfillColumnsRequest(column="text"))
    assert exc.value.status == 400
    assert error_of(exc)["code"] == lance_namespace.ErrorCode.INVALID_INPUT
    assert "'text'" in error_of(exc)["error"] and error_of(exc)["detail"] == "ColumnError"
    assert lance.dataset(TableApi(client).describe_table("plain", DescribeTableRequest()).location).version == 1

    assert DataApi(client).count_table_rows(table, CountTableRowsRequest()) == before
    ds = lance.dataset(TableApi(client).describe_table(table, DescribeTableRequest()).location)
    ds.validate()
    assert ds.schema.names == ["id", "text"]


def test_an_unknown_job_is_404_naming_it(server: Server, table: str) -> None:
    request = urllib.request.Request(f"{server.url}/v1/jobs/some-job", headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(request, timeout=10)
    assert exc.value.code == 404
    body = json.loads(exc.value.read())
    assert body["code"] == lance_namespace.ErrorCode.TRANSACTION_NOT_FOUND and "'some-job'" in body["error"]


def test_a_namespace_without_those_operations_answers_unsupported(tmp_path: Path) -> None:
    """Lance's directory namespace served as is: the backfill is the spec's "unsupported" (406), the job routes 501."""
    from fastapi.testclient import TestClient
    from lance.namespace import DirectoryNamespace

    from geneva_provider.serve import app

    with TestClient(app(DirectoryNamespace(root=str(tmp_path)), token=TOKEN)) as http:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert http.post("/v1/table/t/create", headers=headers, content=ipc(pa.table({"x": [1]}))).status_code == 200
        backfill = http.post("/v1/table/t/backfill_column", headers=headers, json={"column": "x"})
        job = http.get("/v1/jobs/some-job", headers=headers)
    assert backfill.status_code == 406 and backfill.json()["code"] == lance_namespace.ErrorCode.UNSUPPORTED
    assert "/home/" not in backfill.json()["error"]  # Lance's Rust source path is cut off
    assert job.status_code == 501 and job.json()["code"] == lance_namespace.ErrorCode.UNSUPPORTED


def test_pylance_rest_namespace_lists_and_reads_through_the_server(server: Server, table: str) -> None:
    ns = lance_namespace.connect("rest", {"uri": server.url, "header.Authorization": f"Bearer {TOKEN}"})
    assert "docs" in ns.list_tables(lance_namespace.ListTablesRequest(id=["lake"])).tables
    described = ns.describe_table(lance_namespace.DescribeTableRequest(id=["lake", "docs"]))
    rows = lance.dataset(described.location).to_table().sort_by("id")
    assert rows.column("id").to_pylist()[:3] == [1, 2, 3]
    assert rows.column("text").to_pylist()[:3] == ["a", "bb", "ccc"]


def test_the_cli_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GENEVA_SERVE_TOKEN"}
    cli = [sys.executable, "-m", "geneva_provider.cli", "--db", str(tmp_path), "serve", "--port", str(free_port())]
    refused = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "GENEVA_SERVE_TOKEN" in refused.stderr
    exposed = subprocess.run([*cli, "--no-auth", "--host", "0.0.0.0"], env=env, capture_output=True, text=True,
                             timeout=60)
    assert exposed.returncode == 2 and "loopback" in exposed.stderr


def test_no_storage_option_reaches_a_response() -> None:
    """A database on an object store (moto S3 on 127.0.0.1): its credentials are in no answer, error or not."""
    from fastapi.testclient import TestClient

    from geneva_provider.serve import app, namespace_for
    from geneva_provider.serve.errors import error_body
    from tests.s3_server import S3Server

    with S3Server() as s3:
        secrets = tuple(s3.storage_options.values())
        served = app(namespace_for(f"s3://{s3.bucket}/db", s3.storage_options), token=TOKEN, secrets=secrets)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with TestClient(served) as http:
            answers = [
                http.post("/v1/table/t/create", headers=headers, content=ipc(pa.table({"x": [1, 2]}))),
                http.post("/v1/table/t/describe", headers=headers, json={}),
                http.get("/v1/namespace/%24/table/list", headers=headers),
                http.post("/v1/table/t/count_rows", headers=headers, json={}),
                http.post("/v1/table/t/insert", headers=headers, content=b"not an Arrow stream"),
                http.post("/v1/table/gone/describe", headers=headers, json={}),
            ]
        assert [a.status_code for a in answers] == [200, 200, 200, 200, 400, 404]
        assert answers[1].json()["location"] == f"s3://{s3.bucket}/db/t.lance"
        assert answers[3].json() == 2
        for answer in answers:
            body = answer.json()
            assert not isinstance(body, dict) or "storage_options" not in body
            assert not any(secret in answer.text for secret in secrets if len(secret) >= 4)

        # an error whose message carries a credential (as some object-store errors do) is masked
        leak = OSError(f"access denied for key {s3.storage_options['aws_secret_access_key']}")
        status, body = error_body(leak, "describe_table", secrets)
        assert status == 500 and body["code"] == lance_namespace.ErrorCode.INTERNAL
        assert s3.storage_options["aws_secret_access_key"] not in str(body) and "***" in str(body["error"])


def test_the_token_from_an_airflow_connection(tmp_path: Path) -> None:
    """--token-conn-id: the connection's password is the token (an environment connection; no Airflow database)."""
    env = {k: v for k, v in os.environ.items() if k != "GENEVA_SERVE_TOKEN"}
    env |= {"AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW_CONN_SERVE_TOKEN": json.dumps({"conn_type": "generic", "password": "conn-token-5b1c"})}
    srv = Server(tmp_path, env, ("--token-conn-id", "serve_token"))
    try:
        ns = lance_namespace.connect("rest", {"uri": srv.url, "header.Authorization": "Bearer conn-token-5b1c"})
        assert ns.list_namespaces(lance_namespace.ListNamespacesRequest(id=[])).namespaces == []
        with pytest.raises(ApiException) as exc:
            NamespaceApi(ApiClient(Configuration(host=srv.url, access_token=TOKEN))).list_namespaces("$")
        assert exc.value.status == 401
    finally:
        code, out = srv.stop()
    assert code in (0, -signal.SIGTERM) and "conn-token-5b1c" not in out
