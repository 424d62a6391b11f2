"""An Airflow DAG that builds an index: ``GenevaCreateIndexOperator >> GenevaSparkIndexOperator`` over the shared
Spark Connect server, then ``GenevaRefreshIndexOperator >> GenevaSparkIndexOperator`` (skipped with nothing to
index), and a bad spec failing the plan task with the package's error, nothing changed."""

from __future__ import annotations

import pytest

from tests.airflow.test_example_dags import assert_no_secret_leaked, run
from tests.helpers import dag_bag
from tests.index_data import clustered, queries, recall

DAGS = """
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.operators.indexes import (
    GenevaCreateIndexOperator,
    GenevaRefreshIndexOperator,
    GenevaSparkIndexOperator,
)

with DAG(dag_id="geneva_test_index", schedule=None, start_date=datetime(2026, 1, 1)):
    plan = GenevaCreateIndexOperator(task_id="plan", table="emb", column="vec", index_type="IVF_PQ",
                                     num_partitions=16, num_sub_vectors=8, target_groups=4)
    plan >> GenevaSparkIndexOperator(task_id="build", plan=plan.output)

with DAG(dag_id="geneva_test_index_refresh", schedule=None, start_date=datetime(2026, 1, 1)):
    plan = GenevaRefreshIndexOperator(task_id="plan", table="emb", index_name="vec_idx")
    plan >> GenevaSparkIndexOperator(task_id="build", plan=plan.output)

with DAG(dag_id="geneva_test_bad_index", schedule=None, start_date=datetime(2026, 1, 1)):
    plan = GenevaCreateIndexOperator(task_id="plan", table="emb", column="vec", num_sub_vectors=5, retries=0)
    plan >> GenevaSparkIndexOperator(task_id="build", plan=plan.output)
"""


@pytest.fixture
def index_dags(airflow_db):
    with dag_bag("geneva_test_index.py", DAGS) as bag:
        yield bag


def test_an_index_dag_plans_on_the_worker_and_builds_by_spark_tasks_over_connect(index_dags, lance_db, capfd):
    tbl = lance_db.create_table("emb", clustered(4000), max_rows_per_file=500)  # 8 fragments
    dr, states, tis, _ = run(index_dags.get_dag("geneva_test_index"))
    assert dr.state == "success", states
    summary = tis["plan"].xcom_pull(task_ids="plan")
    assert (summary["kind"], summary["index_name"], summary["tasks"], summary["rows_to_compute"]) == (
        "index", "vec_idx", 4, 4000)
    built = tis["build"].xcom_pull(task_ids="build")
    assert built["segments_per_task"] == [1, 1, 1, 1] and built["segments_committed"] == 1
    assert built["job_id"] == summary["job_id"] and built["rows_indexed"] == 4000
    ds = tbl.dataset()
    ds.validate()
    assert tbl.index_stats("vec_idx").num_unindexed_rows == 0
    assert recall(ds, queries(ds.to_table())) >= 0.9
    [job] = lance_db.list_jobs("emb", kind="index")
    assert (job.job_id, job.status, job.airflow_run_id, job.segments_done) == (summary["job_id"], "DONE",
                                                                                dr.run_id, 4)
    assert_no_secret_leaked(capfd)

    dr, states, _, _ = run(index_dags.get_dag("geneva_test_index_refresh"))  # every fragment covered
    assert dr.state == "success" and states["build"] == "skipped", states
    tbl.add(clustered(600, start=4000))
    dr, states, tis, _ = run(index_dags.get_dag("geneva_test_index_refresh"))
    assert dr.state == "success" and states["build"] == "success", states
    refreshed = tis["build"].xcom_pull(task_ids="build")
    assert refreshed["refresh"] and refreshed["rows_indexed"] == 600 and not refreshed["trained"]
    assert tbl.index_stats("vec_idx").num_unindexed_rows == 0

    version = tbl.version
    dr, states, _, _ = run(index_dags.get_dag("geneva_test_bad_index"))
    assert dr.state == "failed" and states == {"plan": "failed", "build": "upstream_failed"}, states
    logs = "".join(capfd.readouterr())
    assert "InvalidArgumentError" in logs and "num_sub_vectors=5 does not divide the dimension 64" in logs
    assert tbl.version == version
