"""A durable Spark Connect stage outlives the Airflow task process that started it.

The task process running apply (``durable=True``) is SIGKILLed mid-stage, as a worker crash would;
the stage's runner, a process of its own, keeps going, and the task's retry (same plan) finds its
lease and waits for it instead of starting the stage a second time.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from tests.helpers import counting_double, events_table, read_calls
from tests.system.test_resume_kill import run_and_kill_after_checkpoints


@pytest.mark.slow
def test_a_killed_task_s_retry_reattaches_to_its_durable_connect_stage(lance_db, spark_default, call_dir, capfd):
    from geneva_provider.operators.backfill import GenevaVerifyOperator
    from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
    from geneva_provider.pipeline.stage_reports import RunStatus, StageSubmission

    rows, checkpoint = 20_000, 500
    tbl = lance_db.create_table("slow", events_table(rows), max_rows_per_file=rows // 2)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.001)})
    script = textwrap.dedent(f"""
        import json
        from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
        from geneva_provider.operators.spark import GenevaSparkApplyOperator
        plan = GenevaPlanBackfillOperator(task_id="plan", table="slow", column="y",
                                          checkpoint_size={checkpoint}).execute({{}})
        print(json.dumps(plan), flush=True)
        GenevaSparkApplyOperator(task_id="apply", plan=plan, durable=True).execute({{}})
        print("FINISHED", flush=True)
    """)
    store = tbl.checkpoint_store
    out = run_and_kill_after_checkpoints(script, store, 6, {**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": spark_default})
    plan = json.loads(next(line for line in out if line.startswith('{"job_id"')))
    submission = StageSubmission.of("apply", plan["plan_uri"])
    assert submission.status(store) is RunStatus.RUNNING  # the task died; its stage did not
    capfd.readouterr()

    # The retry: the same plan, in this process.
    applied = GenevaSparkApplyOperator(task_id="apply", plan=plan, durable=True).execute({})
    logs = "".join(capfd.readouterr())
    assert "is already running" in logs and "waiting for it" in logs  # reattached, not started again
    assert "Started the apply stage" not in logs
    calls = read_calls(call_dir)
    assert len(calls) <= rows + checkpoint  # every row once, give or take one in-flight task
    assert set(calls) == set(range(rows))
    assert applied["rows_computed"] == rows and submission.status(store) is RunStatus.SUCCEEDED
    assert submission.lease(store) is None  # the runner gave its lease up

    GenevaSparkWriteCommitOperator(task_id="write_commit", plan=plan, durable=True).execute({})
    GenevaVerifyOperator(task_id="verify", plan=plan).execute({})
    got = tbl.to_arrow(["x", "y"]).to_pydict()  # what an uninterrupted run leaves
    assert got["y"] == [2 * x for x in got["x"]] and sorted(got["x"]) == list(range(rows))
    tbl.dataset().validate()
