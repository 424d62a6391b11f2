"""Execution contexts over Spark Connect: ``db.context(cluster="sc://...", manifest=...)`` runs the jobs inside on a
session of its own, with the user's driver-only package shipped to the server's Python workers.

(The same on a classic standalone cluster: tests/system/test_distributed.py.)
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.pipeline.spark.contexts import context_session
from geneva_provider.pipeline.spark.runner import is_connect


def test_a_manifest_ships_a_driver_only_package_over_spark_connect(db, connect_server, shipped):
    name, mod = shipped

    @gp.udf(data_type=pa.int64())
    def scaled(x: int) -> int:
        return mod.scale(x)

    tbl = db.create_table("t", [{"x": i} for i in range(50)], max_rows_per_file=20)
    tbl.add_columns({"y": scaled})

    # Without the manifest the server's workers cannot load the UDF: the package's error names the module,
    # the job is recorded FAILED, nothing is written, and the context's session is released.
    with pytest.raises(gp.SparkEnvironmentError, match=f"module '{name}' is not importable") as raised:
        with db.context(cluster=connect_server.url) as spark:
            assert is_connect(spark) and context_session() is spark
            tbl.backfill("y", progress=False)
    assert "GenevaManifest(py_modules=" in str(raised.value)
    assert spark.is_stopped and context_session() is None
    assert tbl.count_rows("y IS NOT NULL") == 0
    assert [j.status for j in db.list_jobs(table_name="t")] == ["FAILED"]

    # With it, the backfill (given no spark=) runs on the context's Connect session: every value exact.
    db.define_manifest("dev", gp.GenevaManifest("dev", py_modules=[name]))
    with db.context(cluster=connect_server.url, manifest="dev") as spark:
        result = tbl.backfill("y", progress=False)
    assert spark.is_stopped and context_session() is None
    assert result.rows_computed == 50
    assert tbl.to_arrow(["x", "y"]).sort_by("x").column("y").to_pylist() == [7 * x + 1 for x in range(50)]
    assert [j.status for j in db.list_jobs(table_name="t")] == ["DONE", "FAILED"]


def test_pip_requirements_the_workers_lack_are_named_and_the_session_is_released(db, connect_server):
    manifest = gp.GenevaManifest(pip=["pyarrow>=1", "geneva-no-such-package-3f9a", "pyarrow<1"])
    ctx = db.context(cluster=connect_server.url, manifest=manifest)
    with pytest.raises(gp.SparkEnvironmentError) as raised:
        ctx.__enter__()
    text = str(raised.value)
    assert "geneva-no-such-package-3f9a (not installed)" in text and "pyarrow<1 (installed: " in text
    assert "pyarrow>=1" not in text  # the one the workers have is not named
    assert context_session() is None and ctx.spark is None


def test_a_udf_declared_with_a_manifest_ships_it_to_every_backfill_of_its_column(db, connect_server, shipped):
    """``@udf(manifest=...)``, the reference's: recorded with the column, so a backfill given only a session
    (no context, no manifest of its own) still finds the driver-only package on the workers."""
    name, mod = shipped

    @gp.udf(data_type=pa.int64(), manifest=gp.GenevaManifest("scaled", py_modules=[name]))
    def scaled(x: int) -> int:
        return mod.scale(x)

    tbl = db.create_table("t", [{"x": i} for i in range(30)], max_rows_per_file=10)
    tbl.add_columns({"y": scaled})
    with db.context(cluster=connect_server.url) as spark:  # a bare session: the context ships nothing
        result = tbl.backfill("y", spark=spark, progress=False)
    assert result.rows_computed == 30
    assert tbl.to_arrow(["x", "y"]).sort_by("x").column("y").to_pylist() == [7 * x + 1 for x in range(30)]
