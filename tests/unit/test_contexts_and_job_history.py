"""Execution contexts' arguments (checked before any Spark starts) and the job history with the reference's
(LanceDB Geneva's) field names and filters, from real backfills through the in-process runner: no JVM."""

from __future__ import annotations

import datetime as dt
import os
import zipfile

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.pipeline.spark.contexts import context_session, prepare
from geneva_provider.stages import InProcessRunner
from tests.helpers import driver_only_package


# ------------------------------------------------------------------ contexts: bad input, before any Spark
@pytest.mark.parametrize(("kwargs", "named"), [
    ({"pip": [1]}, "pip"), ({"py_modules": [""]}, "py_modules"), ({"files": None}, "files"),
    ({"skip_site_packages": "no"}, "skip_site_packages"), ({"name": ""}, "name"),
    ({"local_zip_output_dir": 3}, "local_zip_output_dir"),
])
def test_a_bad_manifest_is_refused_naming_the_argument(kwargs, named):
    with pytest.raises(InvalidArgumentError, match=named):
        gp.GenevaManifest(**kwargs)


def test_a_context_checks_its_cluster_and_manifest_when_made(db, tmp_path):
    with pytest.raises(InvalidArgumentError, match="'no_such_module_9c1e' is neither a path nor a module"):
        db.context(manifest=gp.GenevaManifest(py_modules=["no_such_module_9c1e"]))
    with pytest.raises(InvalidArgumentError, match="pip requirement 'numpy>>=1'"):
        db.context(manifest=gp.GenevaManifest(pip=["numpy>>=1"]))
    with pytest.raises(InvalidArgumentError, match=r"files entry .*missing\.txt"):
        db.context(manifest=gp.GenevaManifest(files=[str(tmp_path / "missing.txt")]))
    with pytest.raises(InvalidArgumentError, match="no manifest named 'dev'"):
        db.context(manifest="dev")
    with pytest.raises(InvalidArgumentError, match="cluster must be"):
        db.context(cluster=42)
    with pytest.raises(InvalidArgumentError, match="define_cluster 'c'"):
        db.define_cluster("c", 42)
    with pytest.raises(InvalidArgumentError, match="manifest must be a GenevaManifest"):
        db.define_manifest("m", {"pip": []})
    with pytest.raises(InvalidArgumentError, match="num_cpus"):
        gp.local_context(num_cpus=0)
    assert context_session() is None  # nothing was entered


def test_defined_clusters_and_manifests_are_found_by_name(db):
    db.define_cluster("remote", "sc://127.0.0.1:15002")
    db.define_manifest("dev", gp.GenevaManifest("dev", pip=["pyarrow"]))
    ctx = db.context(cluster="remote", manifest="dev")
    assert ctx.cluster == gp.SparkCluster("sc://127.0.0.1:15002") and ctx.cluster.is_connect
    assert ctx.manifest.pip == ("pyarrow",)
    assert db.context("spark://host:7077").cluster.master == "spark://host:7077"  # not a defined name: a master
    assert repr(gp.SparkCluster("sc://h:1/;token=SECRET")) == "SparkCluster(master='sc://h:1')"


def test_local_ray_context_is_a_local_spark_context_that_ignores_ray_settings(db):
    with pytest.warns(UserWarning, match=r"\['address'\] are Ray settings"):
        ctx = gp.local_ray_context(num_cpus=2, address="auto")
    assert ctx.cluster == gp.SparkCluster("local[2]")
    assert gp.Connection.local_ray_context().cluster == gp.SparkCluster("local[*]")
    assert db.local_ray_context(num_gpus=1).cluster.gpus == 1


def test_a_package_directory_is_shipped_as_a_zip_that_holds_it(tmp_path, monkeypatch):
    name, path = driver_only_package(tmp_path)
    monkeypatch.syspath_prepend(path)
    kept = tmp_path / "zips"
    shipment = prepare(gp.GenevaManifest(py_modules=[name, os.path.join(path, name, "maths.py")],
                                         local_zip_output_dir=str(kept), delete_local_zips=False), "test")
    assert shipment.pyfiles == [str(kept / f"{name}.zip"), os.path.join(path, name, "maths.py")]
    with zipfile.ZipFile(shipment.pyfiles[0]) as zf:
        assert sorted(zf.namelist()) == [f"{name}/__init__.py", f"{name}/maths.py"]
    shipment.clean()
    assert (kept / f"{name}.zip").exists()  # kept where the caller asked
    temporary = prepare(gp.GenevaManifest(py_modules=[name]), "test")
    assert os.path.exists(temporary.pyfiles[0])
    temporary.clean()
    assert not os.path.exists(temporary.pyfiles[0])


# ------------------------------------------------------------------ job history
def _fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def test_list_jobs_filters_and_the_reference_field_names(db):
    a = db.create_table("a", [{"x": i} for i in range(30)], max_rows_per_file=10)
    b = db.create_table("b", [{"x": i} for i in range(10)])
    a.add_columns({"y": gp.udf(data_type=pa.int64())(lambda x: x * 2)})
    b.add_columns({"z": gp.udf(data_type=pa.int64())(_fails_on_three)})
    before = dt.datetime.now(dt.UTC)
    a.backfill("y", spark=InProcessRunner(), progress=False)
    with pytest.raises(gp.UDFExecutionError):
        b.backfill("z", spark=InProcessRunner(), progress=False)

    assert [(j.table_name, j.status) for j in db.list_jobs()] == [("b", "FAILED"), ("a", "DONE")]
    (done,) = db.list_jobs(table_name="a")
    assert db.list_jobs("a") == [done] and db.list_jobs(table_name="a", status="DONE") == [done]
    assert db.list_jobs(table_name="a", status="FAILED") == []
    assert [j.table_name for j in db.list_jobs(status="FAILED")] == ["b"]

    assert (done.table_name, done.column_name, done.job_type, done.status) == ("a", "y", "BACKFILL", "DONE")
    assert before <= done.launched_at <= done.completed_at <= dt.datetime.now(dt.UTC)
    assert (done.rows_checkpointed, done.rows_ready_for_commit, done.rows_committed) == (30, 30, 30)
    assert done.tasks >= 1 and done.commit_conflict_retries == 0
    assert min(done.read_seconds, done.udf_seconds, done.write_seconds, done.commit_seconds) >= 0
    assert done.commit_seconds > 0  # the commits did take time
    metrics = {m["name"]: m for m in done.metrics}
    assert metrics["rows_committed"] == {"name": "rows_committed", "count": 30, "total": 30}
    assert metrics["tasks"]["count"] == done.tasks and metrics["commit_conflict_retries"]["count"] == 0
    assert metrics["udf_processing_time"]["count"] == round(done.udf_seconds * 1000)

    (failed,) = db.list_jobs(table_name="b")
    assert failed.completed_at is not None and failed.rows_committed == 0 and "three" in (failed.error or "")
    assert failed.tasks >= 1  # measured before the failure was raised

    with pytest.raises(InvalidArgumentError, match="table 'a' and table_name 'b' differ"):
        db.list_jobs("a", table_name="b")
    assert db.list_jobs(table_name="a", status="done") == [done]  # any case, as the CLI's --status takes it
    with pytest.raises(InvalidArgumentError, match=r"status must be one of .*'finished'"):
        db.list_jobs(table_name="a", status="finished")
