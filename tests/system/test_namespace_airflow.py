"""GenevaNamespace with ``job_runner=airflow`` under a real scheduler (test_scheduler.py's deployment): a
backfill request triggers a run of ``geneva_namespace_jobs`` through the REST API (user + password, a token got
from ``/auth/token``), the job id the namespace returns is the DAG run's id, ``describe_job`` follows it to DONE,
the run's tasks are the backfill stages, and the values are exact."""

from __future__ import annotations

import shutil
import time

import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import AddColumnsEntry, AddVirtualColumnEntry

from geneva_provider.core.contracts.operations import GetJob
from tests.system import test_scheduler
from tests.system.test_scheduler import ROOT, AirflowStack, with_logs

deployment = test_scheduler.stack  # the deployment fixture ("stack"), started for this module

pytestmark = pytest.mark.slow
DAG_ID = "geneva_namespace_jobs"


def test_a_backfill_request_runs_as_a_dag_run_whose_id_is_the_job_id(deployment: AirflowStack) -> None:
    with_logs(namespace_backfill)(deployment)  # any failure carries the tail of every component's log


def namespace_backfill(stack: AirflowStack) -> None:
    import geneva_provider as gp

    shutil.copy(ROOT / "dags_examples" / f"{DAG_ID}.py", stack.dags / f"{DAG_ID}.py")

    def parsed() -> bool | None:
        dags = {d["dag_id"]: d for d in stack.get("/dags", params={"limit": 100})["dags"]}
        return True if DAG_ID in dags and not dags[DAG_ID]["is_paused"] else None

    stack.wait_for("the namespace DAG to be parsed", parsed, timeout=120)
    gp.connect(str(stack.lake)).create_table("nsjobs", pa.table({"x": pa.array(range(300), pa.int64())}),
                                             max_rows_per_file=100)
    ns = ln.connect("geneva", {"root": str(stack.lake), "job_runner": "airflow", "airflow.url": stack.url,
                               "airflow.username": "admin", "airflow.password": stack.password})
    assert stack.password not in repr(ns)

    @gp.udf(data_type=pa.int64(), name="plus_five", version="1")
    def plus_five(x: int) -> int:
        return x + 5

    column = AddVirtualColumnEntry(udf=plus_five.pickled_b64(), udf_name="plus_five", udf_version="1", image="",
                                   input_columns=["x"], outputs=[])
    ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=["nsjobs"], new_columns=[AddColumnsEntry(name="p", virtual_column=column)]))
    run_id = ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["nsjobs"], column="p",
                                                                                where="x >= 50")).job_id
    states = stack.wait_for_run(DAG_ID, run_id, timeout=400)
    assert {k: v for k, v in states.items() if k.startswith("backfill_")} == dict.fromkeys(
        ("backfill_plan", "backfill_apply", "backfill_write_commit", "backfill_verify"), "success"), states
    assert states["route"] == "success" and states["refresh_plan"] == "skipped", states
    for _ in range(100):  # the run ended: its job record says DONE
        job = ns.describe_job(GetJob(job_id=run_id)).job
        if job.status == "DONE":
            break
        time.sleep(0.5)
    assert (job.status, job.airflow_run_id, job.column, job.rows_committed) == ("DONE", run_id, "p", 250)
    rows = gp.connect(str(stack.lake)).open_table("nsjobs").to_arrow(["x", "p"]).to_pylist()
    assert {r["x"]: r["p"] for r in rows} == {x: (x + 5 if x >= 50 else None) for x in range(300)}
