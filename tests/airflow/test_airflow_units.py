"""Operators, sensors, triggers and the hook, driven directly (no Airflow DB needed).

The part that needs Airflow's DB, its programs or Spark; the rest is in tests/unit/test_airflow_units.py.
"""

from __future__ import annotations

import asyncio
import json
import os

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import (
    TaskDeferred,
)

import geneva_provider as gp
from geneva_provider.operators.backfill import (
    GenevaAddColumnsOperator,
    GenevaPlanBackfillOperator,
    GenevaVerifyOperator,
)
from geneva_provider.sensors.table import GenevaColumnBackfilledSensor
from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger
from tests.helpers import context, events_table, first_event


@pytest.fixture
def events(lance_db):
    return lance_db.create_table("events", events_table(6_000), max_rows_per_file=2_000)


def test_plan_and_verify_operators(events, spark):
    from geneva_provider.stages import run_apply, run_write_commit

    GenevaAddColumnsOperator(task_id="add", table="events",
                             columns={"w": "geneva_provider.examples:embed"}).execute(context())
    plan_op = GenevaPlanBackfillOperator(task_id="plan", table="events", column="w", where="x < 5000",
                                         task_size=1_000)
    assert set(plan_op.template_fields) >= {"table", "column", "where", "read_version"}
    summary = plan_op.execute(context())
    assert json.loads(json.dumps(summary)) == summary
    assert summary["rows_to_compute"] == 5_000 and summary["tasks"] == 5 and summary["fragments_to_compute"] == 3

    verify = GenevaVerifyOperator(task_id="verify", plan=summary, table="events", column="w")
    assert verify.outlets[0].uri == "lance://lance_default/events/w"
    with pytest.raises(gp.VerificationError, match=r"fragment 0: 2000 rows lack their computed value"):
        verify.execute(context())

    run_apply(summary["plan_uri"], spark)
    run_write_commit(summary["plan_uri"], spark)
    ctx = context()
    result = verify.execute(ctx)
    assert result["rows_verified"] == 5_000 and result["fragments_verified"] == 3
    extra = ctx["outlet_events"][verify.outlets[0]].extra
    assert extra == {"table": "events", "column": "w", "version": events.version, "job_id": summary["job_id"],
                     "rows_computed": 5_000}
    # OpenLineage: the table is the one dataset read and written (not a dataset per column), the column's edge
    # from its UDF's input; verify reports the version committed and the rows, as the write+commit stage left them.
    lineage = plan_op.get_openlineage_facets_on_complete(None)
    path = os.path.abspath(events.uri)
    assert [d.name for d in lineage.inputs] == [d.name for d in lineage.outputs] == [path]
    edges = lineage.outputs[0].facets["columnLineage"].fields["w"].inputFields
    assert [(e.name, e.field, e.transformations[0].subtype) for e in edges] == [
        (path, "x", "TRANSFORMATION"), (path, "x", "FILTER")]  # embed(x), where x < 5000
    [verified] = verify.get_openlineage_facets_on_complete(None).outputs
    assert verified.facets["version"].datasetVersion == str(events.version)
    assert verified.outputFacets["outputStatistics"].rowCount == 5_000


def test_column_backfilled_sensor_and_trigger(events, spark):
    @gp.udf(data_type=pa.int64())
    def neg(x: int) -> int:
        return -x

    events.add_columns({"n": neg})
    sensor = GenevaColumnBackfilledSensor(task_id="s", table="events", column="n", poke_interval=1, timeout=10)
    pending = sensor.poke(context())
    assert not pending.is_done and pending.xcom_value["rows_pending"] == 6_000
    with pytest.raises(TaskDeferred) as exc:
        sensor.execute(context())
    trigger = exc.value.trigger
    assert isinstance(trigger, GenevaColumnBackfilledTrigger)
    events.backfill("n", spark=spark, where="x < 4000")
    assert sensor.poke(context()).xcom_value["fragments_pending"] == 1
    events.backfill("n", spark=spark)
    event = asyncio.run(first_event(trigger))
    assert event.payload["status"] == "success" and event.payload["rows_pending"] == 0
    assert sensor.execute_complete(context(), event.payload)["column"] == "n"


def test_shipped_package_zip_is_importable_on_its_own(tmp_path):
    import subprocess
    import sys

    from geneva_provider.operators.spark_backends import package_zip

    zip_path = package_zip()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import geneva_provider.pipeline.columns.write as w, "
            "geneva_provider.spark_apps._runner as r; print(w.__file__); print(r.__file__)")
    out = subprocess.run([sys.executable, "-c", code, zip_path], capture_output=True, text=True, cwd=tmp_path,
                         check=True).stdout.split()
    assert out[0] == f"{zip_path}/geneva_provider/pipeline/columns/write.py"
    assert out[1] == f"{zip_path}/geneva_provider/spark_apps/_runner.py"


def test_airflow_lists_the_provider():
    import os
    import subprocess
    import sys

    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run([airflow, "providers", "list", "-o", "json"], capture_output=True, text=True, check=True,
                         timeout=300).stdout
    providers = {p["package_name"]: p for p in json.loads(out[out.index("["):])}
    assert providers["airflow-provider-geneva"]["version"] == gp.__version__


