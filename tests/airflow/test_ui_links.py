"""The tasks' extra links after a real run, as the api-server serves them, and the job record page they open.

``dag.test()`` runs the tasks; the links are read back the way the UI reads them (the serialized operator's
``get_extra_links``: the XCom the worker left as the task ended), and the "Geneva job" link is followed on
the real api-server application (``create_app``, the plugin mounted as Airflow mounts it, a real token).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from tests.conftest import FAKE_SECRET
from tests.helpers import dag_bag, events_table, plain_double

LINKS_DAGS = """
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator

with DAG(dag_id="geneva_test_links", schedule=None, start_date=datetime(2026, 1, 1)):
    plan = GenevaPlanBackfillOperator(task_id="plan", table="linked", column="s")
    # The driver runs its Spark UI (on a free port) for this stage only.
    apply = GenevaSparkApplyOperator(task_id="apply", plan=plan.output, retries=0,
                                     conf={"spark.ui.enabled": "true", "spark.ui.port": "0"})
    write = GenevaSparkWriteCommitOperator(task_id="write_commit", plan=plan.output, retries=0,
                                           conf={"spark.ui.enabled": "false"})
    verify = GenevaVerifyOperator(task_id="verify", plan=plan.output, table="linked", column="s", retries=0)
    plan >> apply >> write >> verify
"""


@pytest.fixture
def links_dag(airflow_db):
    with dag_bag("geneva_test_links.py", LINKS_DAGS) as bag:
        yield bag.get_dag("geneva_test_links")


def _links(dag, dr) -> dict[str, dict[str, str | None]]:
    """Each task's extra links as the api-server computes them (its serialized operator, the run's XComs)."""
    from airflow.serialization.serialized_objects import DagSerialization

    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    links = {}
    for ti in dr.get_task_instances():
        task = served.get_task(ti.task_id)
        links[ti.task_id] = {name: task.get_extra_links(ti, name) for name in task.extra_links}
    return links


@pytest.mark.slow
def test_after_a_run_each_task_links_its_job_record_and_the_stages_spark_ui(links_dag, lance_db, spark_submit,
                                                                            monkeypatch):
    from geneva_provider.pipeline.stages.job_records import read_record

    tbl = lance_db.create_table("linked", events_table(600), max_rows_per_file=200)
    tbl.add_columns({"s": plain_double})
    dr = links_dag.test()
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert dr.state == "success", states
    job_id = dr.get_task_instance("plan").xcom_pull(task_ids="plan")["job_id"]
    links = _links(links_dag, dr)

    job_url = f"/geneva/jobs/{job_id}?table=linked&conn=lance_default"
    assert {task: got["Geneva job"] for task, got in links.items()} == dict.fromkeys(
        ("plan", "apply", "write_commit", "verify"), job_url)
    assert "Spark UI" not in links["plan"] and "Spark UI" not in links["verify"]
    record = read_record(tbl.checkpoint_store, job_id)
    # The apply stage's driver ran its UI: the link is where it was bound (this host, a port of its own).
    apply_ui = links["apply"]["Spark UI"]
    assert apply_ui and re.fullmatch(r"http://(localhost|127\.0\.0\.1):\d+", apply_ui), apply_ui
    assert urlsplit(apply_ui).port not in (None, 0)
    # The write+commit stage's driver ran without one: no link rather than a dead one.
    assert links["write_commit"]["Spark UI"] == ""  # the API answers null: the UI shows the link disabled
    assert record is not None and record.spark_ui is None  # the job's last Spark stage had no UI

    _the_record_page_shows_the_job_and_no_storage_option(job_url, job_id, monkeypatch)


def _the_record_page_shows_the_job_and_no_storage_option(job_url: str, job_id: str, monkeypatch) -> None:
    """Follows the link on Airflow's own api-server app: the plugin is mounted, the page needs a login."""
    from airflow import plugins_manager, settings
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    # Discovered as the provider info registers it (an installed package also registers the entry point).
    monkeypatch.setattr(settings, "LAZY_LOAD_PROVIDERS", False)
    plugins_manager._get_plugins.cache_clear()
    try:
        client = TestClient(create_app("all"))
        assert client.get(job_url).status_code == 401  # no login, no record
        token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="viewer"))
        headers = {"Authorization": f"Bearer {token}"}
        answer = client.get(job_url, headers=headers)
        assert answer.status_code == 200, answer.text
        record = answer.json()
        assert record["job_id"] == job_id and record["table"] == "linked" and record["column"] == "s"
        assert record["status"] == "DONE" and record["rows_planned"] == 600
        assert record["rows_checkpointed"] == 600 and record["rows_committed"] == 600 and record["error"] is None
        page = client.get(job_url, headers={**headers, "Accept": "text/html"})
        assert page.status_code == 200 and f"Geneva job {job_id}" in page.text and "rows_committed" in page.text
        for text in (answer.text, page.text):
            assert FAKE_SECRET not in text and "storage_options" not in text
        missing = client.get(job_url.replace(job_id, "20260101T000000-00000000"), headers=headers)
        assert missing.status_code == 404 and "no record of job" in missing.json()["detail"]
    finally:
        plugins_manager._get_plugins.cache_clear()


@pytest.mark.slow
def test_a_spark_connect_stage_links_the_servers_ui_when_it_runs_one(tmp_path_factory, connect_spark):
    """Over Spark Connect the client has no SparkContext: the link is the server's UI as its settings place it,
    and it answers there; a server without a UI (the suite's) gives no link."""
    import urllib.request

    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from geneva_provider.connect_server import LocalConnectServer, _free_port
    from geneva_provider.pipeline.spark.runner import spark_ui_url

    assert spark_ui_url(connect_spark) is None  # the suite's server runs without its UI
    port = _free_port()
    conf = {"spark.ui.enabled": "true", "spark.ui.port": str(port)}
    with LocalConnectServer(0, master="local[1]", directory=tmp_path_factory.mktemp("connect_ui"), conf=conf) as server:
        session = RemoteSparkSession.builder.remote(server.url).create()
        try:
            url = spark_ui_url(session)
        finally:
            session.stop()
        assert url == f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{url}/jobs/", timeout=30) as page:  # the server's Spark UI, reachable
            assert page.status == 200 and "Spark Jobs" in page.read().decode()
