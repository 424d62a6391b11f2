"""GenevaNamespace's pieces that need no JVM: the ``geneva`` impl registered when ``lance_namespace`` is imported
(without ``import geneva_provider`` importing it), the properties read into a typed config that never shows a
secret, the spec's JSON Arrow types, and the Airflow runner's refusal of a child namespace's table."""

from __future__ import annotations

import subprocess
import sys

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


def test_job_runner_airflow_refuses_a_table_of_a_child_namespace_before_calling_airflow(tmp_path):
    """The DAG it triggers opens the root's tables: a job on ["lake", "docs"] is refused, naming it, with no call to
    the Airflow API (nothing listens at its URL) and nothing changed."""
    import lance_namespace as ln

    from tests.namespace_data import docs
    from tests.namespace_server import ipc

    ns = ln.connect("geneva", {"root": str(tmp_path / "lake"), "job_runner": "airflow",
                               "airflow.url": "http://127.0.0.1:9", "airflow.token": SECRET})
    ns.create_namespace(ln.CreateNamespaceRequest(id=["lake"]))
    ns.create_table(ln.CreateTableRequest(id=["lake", "docs"]), ipc(docs()))
    with pytest.raises(InvalidArgumentError, match=r"not on \['lake', 'docs'\] in namespace \['lake'\]") as refused:
        ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["lake", "docs"], column="x"))
    assert SECRET not in str(refused.value)
    assert ns.catalog_for(["lake", "docs"]).ref("docs").dataset().version == 1
