"""DAG authoring as users wire it: the plan passed by a Jinja template, hand-wired verify tasks.

The part that needs Airflow's DB, its programs or Spark; the rest is in tests/unit/test_operator_wiring.py.
"""

from __future__ import annotations

import pytest

import geneva_provider as gp
from geneva_provider.stages import plan_backfill, run_apply, run_write_commit
from tests.helpers import counting_double, dag_bag, events_table, plain_double

TEMPLATED_DAGS = """
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from geneva_provider.operators.backfill import GenevaAddColumnsOperator, GenevaPlanBackfillOperator, \\
    GenevaVerifyOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator

PULLED = "{{ ti.xcom_pull(task_ids='plan') }}"  # the usual Jinja idiom: renders the dict's Python repr

with DAG(dag_id="geneva_test_templated_plan", schedule=None, start_date=datetime(2026, 1, 1)):
    add = GenevaAddColumnsOperator(task_id="add", table="man3", columns={"s": "tests.helpers:plain_double"})
    plan = GenevaPlanBackfillOperator(task_id="plan", table="man3", column="s")
    apply = GenevaSparkApplyOperator(task_id="apply", plan=PULLED, retries=0)
    write = GenevaSparkWriteCommitOperator(task_id="write_commit", plan=PULLED, retries=0)
    verify = GenevaVerifyOperator(task_id="verify", plan=PULLED, table="man3", column="s", retries=0)
    add >> plan >> apply >> write >> verify

# No connection 'spark_nowhere': the apply task fails once, though it may retry twice.
with DAG(dag_id="geneva_test_missing_spark", schedule=None, start_date=datetime(2026, 1, 1)):
    plan = GenevaPlanBackfillOperator(task_id="plan", table="man3", column="s")
    apply = GenevaSparkApplyOperator(task_id="apply", plan=PULLED, spark_conn_id="spark_nowhere", retries=2,
                                     retry_delay=1)
    plan >> apply

# Rendering templates as native objects hands the operators the dict itself.
with DAG(dag_id="geneva_test_native_plan", schedule=None, start_date=datetime(2026, 1, 1),
         render_template_as_native_obj=True):
    plan = GenevaPlanBackfillOperator(task_id="plan", table="man3", column="s")
    apply = GenevaSparkApplyOperator(task_id="apply", plan=PULLED, retries=0)
    verify = GenevaVerifyOperator(task_id="verify", plan=PULLED, table="man3", column="s", retries=0)
    plan >> apply >> verify
"""


@pytest.fixture
def templated_dags(airflow_db):
    with dag_bag("geneva_test_templated_plan.py", TEMPLATED_DAGS) as bag:
        yield bag


def test_a_missing_spark_connection_fails_its_task_once(templated_dags, lance_db, spark_submit, capfd):
    tbl = lance_db.create_table("man3", events_table(100))
    tbl.add_columns({"s": plain_double})
    dr, states = _run(templated_dags.get_dag("geneva_test_missing_spark"))
    assert dr.state == "failed" and states == {"plan": "success", "apply": "failed"}, states
    apply = next(ti for ti in dr.get_task_instances() if ti.task_id == "apply")
    assert apply.try_number == 1  # not retried
    logs = "".join(capfd.readouterr())  # the task log
    assert "spark_conn_id 'spark_nowhere': no such Airflow connection" in logs and "AIRFLOW_CONN_SPARK_NOWHERE" in logs
    assert "No tasks to run" not in logs  # dag.test() waited for no retry


def _run(dag):
    dr = dag.test()
    return dr, {ti.task_id: ti.state for ti in dr.get_task_instances()}


@pytest.mark.slow
def test_plan_passed_by_a_jinja_template_runs_the_backfill(templated_dags, lance_db):
    tbl = lance_db.create_table("man3", events_table(3_000), max_rows_per_file=1_000)
    dr, states = _run(templated_dags.get_dag("geneva_test_templated_plan"))
    assert dr.state == "success", states
    assert set(states.values()) == {"success"}
    got = tbl.to_arrow(["x", "s"]).to_pydict()
    assert got["s"] == [2 * x for x in got["x"]] and len(got["x"]) == 3_000

    version = tbl.version
    dr, states = _run(templated_dags.get_dag("geneva_test_native_plan"))
    assert dr.state == "success", states
    # Read as the plan (nothing left to compute): skipped, not failed on the plan's form.
    assert states == {"plan": "success", "apply": "skipped", "verify": "skipped"}
    assert tbl.version == version


def test_overlapping_backfills_of_one_column_fail_the_later_commit_for_good(db, spark, call_dir):
    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    first = plan_backfill(tbl.ref, "y")
    second = plan_backfill(tbl.ref, "y")  # a second DAG run, planned before the first commits
    run_apply(first.plan_uri, spark)
    run_write_commit(first.plan_uri, spark)
    version = tbl.version
    run_apply(second.plan_uri, spark)
    with pytest.raises(gp.CommitError) as failed:
        run_write_commit(second.plan_uri, spark)
    message = str(failed.value)
    assert failed.value.retryable is False  # each retry reuses this plan: the operators fail once
    for needle in ("columns ['y'", "table 'events'", "fragments [0, 1]", "concurrent backfill of the same column",
                   second.job_id, "rerun the backfill, or its DAG, for a new plan"):
        assert needle in message
    assert tbl.version == version  # the first run's values stand
    assert tbl.to_arrow(["x", "y"]).to_pydict()["y"] == [2 * x for x in range(4_000)]


