"""DAG authoring as users wire it: the plan passed by a Jinja template, hand-wired verify tasks,
typos in task-group arguments, and overlapping runs of the same column's backfill."""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

import geneva_provider as gp
from geneva_provider.core.models import PlanSummary
from geneva_provider.stages import plan_backfill, run_apply, run_write_commit
from tests.helpers import counting_double, events_table

SUMMARY = {"job_id": "j", "plan_uri": "/x/plan-j.lance", "table": "man3", "column": "s", "tasks": 1,
           "rows_to_compute": 5, "rows_reused": 0, "read_version": 3, "fragments_to_compute": 1,
           "fragments_reused": 0, "fragments_done": 0, "nothing_to_do": False}


def context():
    return {"outlet_events": defaultdict(lambda: SimpleNamespace(extra=None))}


def test_plan_summary_reads_what_a_template_renders():
    expected = PlanSummary.model_validate(SUMMARY)
    # "{{ ti.xcom_pull(task_ids='plan') }}" renders the dict's repr: single quotes, True/None.
    assert PlanSummary.from_xcom(str({**SUMMARY, "column": None})) == expected.model_copy(update={"column": None})
    assert PlanSummary.from_xcom(f" {SUMMARY!r}\n") == expected
    assert PlanSummary.from_xcom(PlanSummary.model_validate(SUMMARY).model_dump_json()) == expected  # | tojson
    assert PlanSummary.from_xcom(dict(SUMMARY)) == expected  # render_template_as_native_obj=True
    for bad in ("{{ ti.xcom_pull(task_ids='plan') }}", "__import__('os').getcwd()", "{'job_id': 'j'}", None):
        with pytest.raises(gp.InvalidArgumentError, match="expected the plan summary returned by the plan task"
                           ) as failed:
            PlanSummary.from_xcom(bad)
        assert "plan=plan.output" in str(failed.value) and "| tojson" in str(failed.value)
    with pytest.raises(gp.InvalidArgumentError, match=r"got \"__import__\('os'\)\.getcwd\(\)\""):
        PlanSummary.from_xcom("__import__('os').getcwd()")  # a literal is read, never evaluated


# dag.test() runs a DAG its bundle (the DAGs folder) holds: the test writes these there for its run only.
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
    from airflow.dag_processing.dagbag import DagBag

    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "geneva_test_templated_plan.py"
    path.write_text(TEMPLATED_DAGS)
    try:
        bag = DagBag(dag_folder=str(path))
        assert not bag.import_errors, bag.import_errors
        yield bag
    finally:
        path.unlink()


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


@pytest.mark.parametrize(("table", "column", "named"), [
    ("team", "wrong", ["table='team', column='wrong'"]),
    ("man3", "wrong", ["table='man3', column='wrong'"]),
    ("team", None, ["table='team', column=None"]),
])
def test_verify_refuses_a_table_or_column_other_than_the_plans(lance_db, table, column, named):
    from geneva_provider.operators.backfill import (
        GenevaAddColumnsOperator,
        GenevaPlanBackfillOperator,
        GenevaVerifyOperator,
    )

    tbl = lance_db.create_table("man3", events_table(100))
    GenevaAddColumnsOperator(task_id="add", table="man3", columns={"s": "tests.helpers:plain_double"}
                             ).execute(context())
    summary = GenevaPlanBackfillOperator(task_id="plan", table="man3", column="s").execute(context())
    version = tbl.version
    verify = GenevaVerifyOperator(task_id="verify", plan=summary, table=table, column=column)
    assert verify.outlets[0].uri == f"lance://lance_default/{table}" + (f"/{column}" if column else "")
    ctx = context()
    with pytest.raises(gp.InvalidArgumentError, match="do not match the plan") as failed:
        verify.execute(ctx)
    assert isinstance(failed.value, AirflowFailException)  # bad wiring: not retried
    for needle in (*named, "task_id 'verify'", "table 'man3', column 's'", summary["job_id"]):
        assert needle in str(failed.value)
    assert not ctx["outlet_events"]  # no Asset event carries this run
    assert tbl.version == version


@pytest.mark.parametrize("factory", ["backfill", "refresh"])
def test_task_group_typo_names_the_groups_task_and_every_option_it_takes(factory):
    from airflow.sdk import DAG, TaskGroup

    from geneva_provider.task_groups import backfill_task_group, refresh_task_group

    with DAG(dag_id=f"typo_{factory}", schedule=None, start_date=datetime(2026, 1, 1)) as dag, TaskGroup("team"):
        with pytest.raises(gp.InvalidArgumentError) as failed:
            if factory == "backfill":
                backfill_task_group("bf", "t", "s", checkpoint_sise=500)
            else:
                refresh_task_group("bf", "v", checkpoint_sise=500)
    message = str(failed.value)
    assert f"{factory}_task_group 'team.bf' (task 'team.bf.plan'): unknown argument(s) ['checkpoint_sise']" in message
    for option in ("checkpoint_size", "parallelism", "conf", "py_files", "env_vars", "spark_binary", "ship_package",
                   "spark_conn_id", "cluster_credentials", "lance_conn_id"):
        assert f"'{option}'" in message
    assert "GenevaPlan" not in message
    assert not dag.task_dict  # nothing was added to the DAG


def test_task_group_passes_spark_options_to_the_spark_tasks_only():
    from airflow.sdk import DAG

    from geneva_provider.task_groups import backfill_task_group

    with DAG(dag_id="spark_options", schedule=None, start_date=datetime(2026, 1, 1)):
        group = backfill_task_group("g", "t", "s", spark_conn_id="spark_cluster", cluster_credentials=True)
    tasks = {t.task_id.split(".")[-1]: t for t in group.children.values()}
    for name in ("apply", "write_commit"):
        assert (tasks[name].spark_conn_id, tasks[name].cluster_credentials) == ("spark_cluster", True)


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


GPU_CONF = {"spark.executor.resource.gpu.amount": "1",
            "spark.executor.resource.gpu.discoveryScript": "/opt/spark/getGpus.sh",
            "spark.dynamicAllocation.enabled": False, "spark.executor.cores": 8}


def _submit_command(monkeypatch, extra: dict, **operator_args) -> list[str]:
    import json

    from geneva_provider.hooks.lance import LanceHook
    from geneva_provider.operators.spark import GenevaSparkApplyOperator
    from geneva_provider.spark_apps import app_path

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_GPUS", json.dumps(
        {"conn_type": "spark", "host": "spark://gpu-master:7077", "extra": extra}))
    plan = PlanSummary(**SUMMARY)
    op = GenevaSparkApplyOperator(task_id="a", plan=plan, spark_conn_id="spark_gpus", **operator_args)
    return op.make_hook(plan, LanceHook().storage_options, "r")._build_spark_submit_command(app_path("apply"))


def _confs(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_a_spark_connections_spark_conf_extra_reaches_the_submit_command_under_the_operators_conf(monkeypatch):
    from tests.conftest import FAKE_SECRET

    command = _submit_command(monkeypatch, {"deploy-mode": "client", "spark_conf": GPU_CONF},
                              conf={"spark.executor.cores": "4"})
    confs = _confs(command)
    assert confs["spark.executor.resource.gpu.amount"] == "1"
    assert confs["spark.executor.resource.gpu.discoveryScript"] == "/opt/spark/getGpus.sh"
    assert confs["spark.dynamicAllocation.enabled"] == "false"  # a JSON boolean, as Spark spells it
    assert confs["spark.executor.cores"] == "4"  # the operator's conf wins over the connection's
    assert "spark.pyspark.python" in confs  # the package's own settings stay
    assert command[command.index("--master") + 1] == "spark://gpu-master:7077"
    assert FAKE_SECRET not in " ".join(command) and "GENEVA_STORAGE_OPTIONS" not in " ".join(command)


def test_a_connection_without_spark_conf_adds_nothing_and_a_bad_one_is_refused(monkeypatch):
    confs = _confs(_submit_command(monkeypatch, {"deploy-mode": "client"}))
    assert not any(k.startswith("spark.executor.resource") for k in confs)
    as_text = _confs(_submit_command(monkeypatch, {"spark_conf": '{"spark.executor.resource.gpu.amount": "2"}'}))
    assert as_text["spark.executor.resource.gpu.amount"] == "2"
    for bad in (["spark.executor.resource.gpu.amount=1"], {"spark.x": {"nested": 1}}, "not json"):
        with pytest.raises(gp.InvalidArgumentError, match="'spark_gpus' has a spark_conf extra that is not a dict"):
            _submit_command(monkeypatch, {"spark_conf": bad})
