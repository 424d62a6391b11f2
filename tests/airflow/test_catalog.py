"""Tables through the Lance namespace (directory implementation), on local disk and on an object store.

The part that needs Airflow's DB, its programs or Spark; the rest is in tests/{spark,unit}/test_catalog.py.
"""

from __future__ import annotations

import geneva_provider as gp
from tests.helpers import events_table


def test_a_dag_run_on_an_object_store_with_credentials_only_in_the_connection(s3, dagbag, monkeypatch):
    import json

    monkeypatch.setenv("AIRFLOW_CONN_LANCE_S3", json.dumps({
        "conn_type": "lance", "host": f"s3://{s3.bucket}/dag",
        "extra": {"secret_storage_options": s3.storage_options}}))
    db = gp.connect(f"s3://{s3.bucket}/dag", storage_options=s3.storage_options)
    db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    dr = dagbag.get_dag("geneva_test_s3").test()
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert dr.state == "success", states
    got = db.open_table("events").to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and len(got["x"]) == 3_000
    (job,) = db.list_jobs("events")
    assert job.status == "DONE" and job.rows_committed == 3_000 and job.airflow_run_id == dr.run_id
