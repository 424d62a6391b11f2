"""GenevaNamespace's pieces that need no JVM: the ``geneva`` impl registered when ``lance_namespace`` is imported
(without ``import geneva_provider`` importing it), the properties read into a typed config that never shows a
secret, the spec's JSON Arrow types, and the conf of the Airflow runner's DAG runs (a child namespace's table by
its id)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.namespace.config import NamespaceConfig
from geneva_provider.namespace.convert import arrow_type

SECRET = "s3cr3t-config-value"


def test_the_geneva_impl_is_registered_once_lance_namespace_is_imported_and_not_before():
    script = ("import sys, geneva_provider\n"
              "assert 'lance_namespace' not in sys.modules\n"
              "import lance_namespace\n"
              "print(lance_namespace._REGISTERED_IMPLS['geneva'])\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "geneva_provider.namespace.GenevaNamespace"
    after = ("import lance_namespace, geneva_provider\n"  # imported first: registered at once
             "print(lance_namespace._REGISTERED_IMPLS['geneva'])\n")
    out = subprocess.run([sys.executable, "-c", after], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "geneva_provider.namespace.GenevaNamespace"


def test_properties_are_grouped_by_prefix_and_secrets_never_shown():
    config = NamespaceConfig.of({"root": "/lake", "storage.aws_secret_access_key": SECRET, "job_runner": "airflow",
                                 "airflow.url": "http://127.0.0.1:8080", "airflow.token": SECRET})
    assert config.storage_options() == {"aws_secret_access_key": SECRET}
    assert config.inner_properties() == {"root": "/lake", "storage.aws_secret_access_key": SECRET}
    assert config.airflow is not None and config.airflow.dag_id == "geneva_namespace_jobs"
    assert SECRET not in repr(config) and SECRET not in str(config.model_dump())
    other = NamespaceConfig.of({"root": "/lake", "inner_impl": "rest", "inner.uri": "http://127.0.0.1:1"})
    assert other.inner_properties() == {"uri": "http://127.0.0.1:1"}


@pytest.mark.parametrize(("properties", "message"), [
    ({"root": "/lake", "colour": "blue"}, r"unknown property 'colour'"),
    ({"root": "/lake", "job_runner": "ray"}, r"job_runner"),
    ({"root": "/lake", "job_runner": "airflow"}, r"job_runner 'airflow' needs airflow.url"),
    ({"storage.key": SECRET}, r"root"),
])
def test_bad_properties_are_refused_naming_them_and_no_value(properties, message):
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        NamespaceConfig.of(properties)
    assert SECRET not in str(caught.value)


def test_json_arrow_types():
    assert arrow_type({"type": "int64"}, "t") == pa.int64()
    assert arrow_type({"type": "utf8"}, "t") == pa.string()
    vec = {"type": "fixed_size_list", "length": 4, "fields": [{"name": "item", "type": {"type": "float32"}}]}
    assert arrow_type(vec, "t") == pa.list_(pa.field("item", pa.float32()), 4)
    pair = {"type": "struct", "fields": [{"name": "a", "type": {"type": "int32"}, "nullable": False},
                                         {"name": "b", "type": {"type": "list", "fields": [
                                             {"name": "item", "type": {"type": "bool"}}]}}]}
    assert arrow_type(pair, "t") == pa.struct([pa.field("a", pa.int32(), nullable=False),
                                               pa.field("b", pa.list_(pa.bool_()))])
    with pytest.raises(InvalidArgumentError, match=r"column 'z'.*'tensor'"):
        arrow_type({"type": "tensor"}, "column 'z'")


def test_job_runner_airflow_sends_a_child_namespace_s_job_with_the_table_s_whole_id(tmp_path, monkeypatch):
    """A job on ["lake", "docs"] is a DAG run whose conf (RemoteJob) carries the request with its whole id -- the
    one place its namespace is named -- and the runner's describe of that run names the table; no secret in it."""
    import lance_namespace as ln

    from geneva_provider.core.contracts.operations import RemoteJob
    from geneva_provider.namespace.runners import AirflowRunner
    from tests.namespace_data import create_child_docs

    root = str(tmp_path / "lake")
    sent: list[tuple[str, str, Any]] = []

    def call(self: AirflowRunner, method: str, path: str, body: Any = None) -> dict[str, Any]:
        sent.append((method, path, body))
        return {"state": "queued", "conf": sent[0][2]["conf"]} if method == "GET" else {}

    monkeypatch.setattr(AirflowRunner, "_call", call)
    ns = ln.connect("geneva", {"root": root, "job_runner": "airflow", "airflow.url": "http://127.0.0.1:9",
                               "airflow.token": SECRET, "airflow.db_conn_id": "lake_conn"})
    table_id = create_child_docs(ns, "lake")
    run_id = ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(
        id=table_id, column="x", task_size=5)).job_id
    method, path, body = sent[0]
    assert (method, path, body["dag_run_id"]) == ("POST", "dags/geneva_namespace_jobs/dagRuns", run_id)
    conf = body["conf"]
    assert (conf["db"], conf["db_conn_id"]) == (root, "lake_conn") and set(conf) == {"db", "db_conn_id", "request"}
    assert {k: v for k, v in conf["request"].items() if v is not None} == {
        "op": "backfill_column", "id": ["lake", "docs"], "column": "x", "task_size": 5, "refresh_indexes": True}
    job = RemoteJob.of(conf, "test")
    assert (job.namespace, job.request.table) == (["lake"], "docs")
    record = ns.runner.describe(run_id)
    assert (record.table, record.column, record.status, record.airflow_run_id) == ("docs", "x", "PENDING", run_id)
    assert SECRET not in repr(sent)


def test_a_remote_job_s_conf_is_checked_naming_what_is_wrong():
    """RemoteJob.of: an op that is no job, a namespace given besides the id, an id with an empty level, an unknown
    key -- each refused with InvalidArgumentError naming it."""
    from geneva_provider.core.contracts.operations import RemoteJob

    request = {"op": "backfill_column", "id": ["team_a", "docs"], "column": "y"}
    assert RemoteJob.of({"request": request}, "dag").namespace == ["team_a"]
    assert RemoteJob.of({"request": {**request, "id": ["docs"]}, "db": "/lake"}, "dag").namespace == []
    ops = r"\['backfill_column', 'create_index', 'refresh_materialized_view'\]"
    with pytest.raises(InvalidArgumentError, match=rf"dag: the request's op must be one of {ops}, got 'drop_columns'"):
        RemoteJob.of({"request": {"op": "drop_columns", "id": ["t"], "columns": ["y"]}}, "dag")
    with pytest.raises(InvalidArgumentError, match=r"dag: the request's op must be one of .*got None"):
        RemoteJob.of({}, "dag")
    with pytest.raises(InvalidArgumentError, match=r"no 'namespace' \(got \['team_b'\]\).*\['team_a', 'docs'\]"):
        RemoteJob.of({"request": request, "namespace": ["team_b"]}, "dag")
    with pytest.raises(InvalidArgumentError, match=r"bad dag conf: request.backfill_column.id: .*non-empty name"):
        RemoteJob.of({"request": {**request, "id": ["", "docs"]}}, "dag")
    with pytest.raises(InvalidArgumentError, match=r"bad dag conf: dbb: Extra inputs are not permitted"):
        RemoteJob.of({"request": request, "dbb": "/lake"}, "dag")
