"""DAG authoring as users wire it: the plan passed by a Jinja template, hand-wired verify tasks,
typos in task-group arguments, and overlapping runs of the same column's backfill."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

import geneva_provider as gp
from geneva_provider.core.contracts.models import PlanSummary
from tests.helpers import events_table

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


def test_verify_says_how_many_rows_the_error_policy_skipped(lance_db, caplog, capsys):
    """A DAG's last word on a backfill (the verify task's line, and its XCom) counts the rows left NULL by the
    UDF's error policy, as a notebook's done line does; and one fragment is "1 fragment"."""
    import pyarrow as pa

    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
    from geneva_provider.stages import InProcessRunner, run_apply, run_write_commit

    tbl = lance_db.create_table("picky", pa.table({"x": list(range(100))}))

    @gp.udf(data_type=pa.int64(), on_error=gp.skip_on_error())
    def picky(x):
        if x in (3, 50):
            raise ValueError(f"bad row {x}")
        return x * 3

    tbl.add_columns({"y": picky})
    summary = GenevaPlanBackfillOperator(task_id="plan", table="picky", column="y").execute(context())
    run_apply(summary["plan_uri"], InProcessRunner())
    run_write_commit(summary["plan_uri"], InProcessRunner())
    capsys.readouterr()
    with caplog.at_level("INFO"):
        result = GenevaVerifyOperator(task_id="verify", plan=summary).execute(context())
    assert result["rows_failed"] == 2 and result["rows_verified"] == 100
    out = capsys.readouterr()  # once Airflow has set up logging its lines are printed, else they reach the handlers
    log = "\n".join([out.out, out.err, caplog.text])
    assert (f"Verified column 'y' of table 'picky' at version {result['version']}: 100 rows in 1 fragment; "
            "2 rows skipped by the error policy (left NULL)") in log, log[-2000:]
    assert tbl.to_arrow(filter="y IS NULL").column("x").to_pylist() == [3, 50]
