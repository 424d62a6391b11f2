"""The example DAG ``geneva_namespace_jobs`` (what a GenevaNamespace with ``job_runner=airflow`` triggers), run with
``dag.test()`` and the conf the namespace sends: a backfill request runs the backfill stages (and not the refresh
ones), the values are exact, and the namespace's ``describe_job`` finds the job by the DAG run's id; a request with
an option the stages cannot carry fails ``route`` before anything runs."""

from __future__ import annotations

import lance_namespace as ln

from geneva_provider.core.contracts.operations import BackfillColumn, GetJob
from tests.airflow.test_example_dags import run
from tests.conftest import FAKE_SECRET
from tests.helpers import events_table, plain_double


def test_a_backfill_request_runs_the_backfill_stages_and_its_job_is_found_by_the_run_id(dagbag, lance_db, capfd):
    tbl = lance_db.create_table("events", events_table(1_000), max_rows_per_file=250)
    tbl.add_columns({"s": plain_double})
    request = BackfillColumn(id=["events"], column="s", where="x >= 100")
    dr, states, _, _ = run(dagbag.get_dag("geneva_namespace_jobs"),
                           run_conf={"request": request.model_dump(mode="json"), "db_conn_id": None})
    assert dr.state == "success", states
    assert {k: v for k, v in states.items() if k.startswith("backfill_")} == {
        "backfill_plan": "success", "backfill_apply": "success", "backfill_write_commit": "success",
        "backfill_verify": "success"}
    assert {k: v for k, v in states.items() if k.startswith("refresh_")} == dict.fromkeys(
        ("refresh_plan", "refresh_apply", "refresh_write_commit", "refresh_verify"), "skipped")
    got = tbl.to_arrow(["x", "s"]).to_pylist()
    assert {r["x"]: r["s"] for r in got} == {x: (2 * x if x >= 100 else None) for x in range(1_000)}
    tbl.dataset().validate()

    ns = ln.connect("geneva", {"root": lance_db.uri})
    job = ns.describe_job(GetJob(job_id=dr.run_id)).job
    assert (job.status, job.airflow_run_id, job.table, job.column, job.rows_committed) == (
        "DONE", dr.run_id, "events", "s", 900)
    assert FAKE_SECRET not in capfd.readouterr().out


def test_a_request_with_an_option_the_stages_do_not_carry_fails_route_and_changes_nothing(dagbag, lance_db):
    tbl = lance_db.create_table("events", events_table(1_000), max_rows_per_file=250)
    tbl.add_columns({"s": plain_double})
    version = tbl.version
    request = BackfillColumn(id=["events"], column="s", task_size=10)
    dr, states, _, _ = run(dagbag.get_dag("geneva_namespace_jobs"),
                           run_conf={"request": request.model_dump(mode="json")})
    assert dr.state == "failed" and states["route"] == "failed", states
    assert states["backfill_plan"] != "success" and tbl.version == version
