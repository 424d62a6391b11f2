"""The stage registry and the Spark backends: what each Spark stage is, derived once; how it runs, chosen once."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import geneva_provider as gp
from geneva_provider import stages
from geneva_provider.core.contracts.kinds import JobKind, Stage
from geneva_provider.core.contracts.models import JobRecord, PlanSummary, StageReport
from geneva_provider.operators.indexes import GenevaSparkIndexOperator
from geneva_provider.operators.maintenance import GenevaSparkCompactOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.operators.spark_backends import (
    ConnectBackend,
    SparkSettings,
    SparkSubmitBackend,
    spark_backend,
)
from geneva_provider.pipeline.stages.registry import SPARK_STAGES, spark_stage
from geneva_provider.spark_apps import app_path
from tests.conftest import FAKE_SECRET

OPERATORS = {Stage.APPLY: GenevaSparkApplyOperator, Stage.WRITE_COMMIT: GenevaSparkWriteCommitOperator,
             Stage.COMPACT: GenevaSparkCompactOperator, Stage.INDEX: GenevaSparkIndexOperator}


def test_the_registry_holds_the_four_spark_stages_with_what_each_did_before():
    assert list(SPARK_STAGES) == [Stage.APPLY, Stage.WRITE_COMMIT, Stage.COMPACT, Stage.INDEX]
    assert spark_stage("apply") is SPARK_STAGES[Stage.APPLY]  # the word read back from XCom or a log finds it
    apply, write, compact, index = SPARK_STAGES.values()
    assert apply.plan_kinds == write.plan_kinds == (JobKind.BACKFILL, JobKind.REFRESH, JobKind.UDTF)
    assert compact.plan_kinds == (JobKind.COMPACTION,)
    assert index.plan_kinds == (JobKind.INDEX,)
    assert [e.keeps_session for e in SPARK_STAGES.values()] == [True, False, False, False]
    assert [e.progress_counter for e in SPARK_STAGES.values()] == ["rows_checkpointed", "rows_committed",
                                                                  "rows_committed", "rows_checkpointed"]
    assert all(counter in JobRecord.model_fields for counter in (e.progress_counter for e in SPARK_STAGES.values()))
    with pytest.raises(KeyError, match="no Spark stage named 'verify'"):
        spark_stage(Stage.VERIFY)


@pytest.mark.parametrize("stage", list(SPARK_STAGES))
def test_each_entry_is_what_the_stage_api_the_program_and_the_operator_run(stage):
    entry = SPARK_STAGES[stage]
    assert getattr(stages, entry.function_name) is entry.function  # geneva_provider.stages exports the same function
    # The stage's result model is the one its report carries (its "stage" tag is the stage's word).
    assert entry.result.model_fields["stage"].default == stage
    assert entry.result in StageReport.model_fields["result"].annotation.__args__
    # The spark-submit program is one line naming its stage; the registry says the rest.
    program = Path(app_path(stage))
    assert program.stem == entry.program == stage.value
    calls = [ast.unparse(n) for n in ast.walk(ast.parse(program.read_text())) if isinstance(n, ast.Call)]
    assert f"run_stage(Stage.{stage.name})" in calls
    operator = OPERATORS[stage](task_id="t", plan={})
    assert operator.stage == stage and operator.entry is entry and operator.keeps_session == entry.keeps_session


def test_a_program_refuses_a_plan_of_a_kind_its_entry_does_not_run(db, tmp_path):
    import pyarrow as pa

    from geneva_provider.pipeline.maintenance.compaction import plan_compaction
    from geneva_provider.spark_apps._runner import run_stage

    tbl = db.create_table("t", pa.table({"x": list(range(300))}), max_rows_per_file=100)
    summary = plan_compaction(tbl.ref, {"target_rows_per_fragment": 1_000}, store=tbl.checkpoint_store)
    report = tmp_path / "r.json"
    assert run_stage(Stage.APPLY, ["--plan-uri", summary.plan_uri, "--result-file", str(report)]) == 1
    failed = StageReport.model_validate_json(report.read_text())
    assert failed.error is not None and failed.error.code == "InvalidArgumentError"
    assert "is a compaction plan: the apply stage runs backfill, refresh or udtf plans" in failed.error.message


@pytest.mark.parametrize(("connection", "backend"), [
    ({"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}, ConnectBackend),
    ({"conn_type": "spark", "host": "local[2]"}, SparkSubmitBackend),
    ({"conn_type": "spark", "host": "yarn"}, SparkSubmitBackend),
])
def test_the_backend_is_chosen_once_from_the_connection_type(monkeypatch, connection, backend):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CHOSEN", json.dumps(connection))
    chosen = spark_backend(SparkSettings(conn_id="spark_chosen"), log=None)
    assert type(chosen) is backend


def test_a_standalone_cluster_connection_given_as_a_uri_is_refused_too(monkeypatch):
    """The provider resolves ``spark://m:7077`` (conn_type spark, host m) to its master: storage options stay off
    a standalone cluster's command line however the connection was written."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_URI", "spark://master-host:7077?deploy-mode=cluster")
    plan = PlanSummary(job_id="j", plan_uri="/x/plan-j.lance", table="t", column="c", tasks=1, rows_to_compute=5,
                       rows_reused=0, read_version=3, fragments_to_compute=1, fragments_reused=0, fragments_done=0,
                       nothing_to_do=False)
    operator = GenevaSparkApplyOperator(task_id="a", plan=plan, spark_conn_id="spark_uri")
    with pytest.raises(gp.InvalidArgumentError, match=r"master spark://master-host:7077, deploy mode cluster"
                       ) as refused:
        operator.make_hook(plan, {"aws_secret_access_key": FAKE_SECRET}, "r")
    assert FAKE_SECRET not in str(refused.value) and "GenevaSparkApplyOperator 'a'" in str(refused.value)


