"""The seams under the Airflow surface: probes apart from waiting, and a Spark stage as submit / poll / result.

What a sensor or trigger looks at is a probe (``pipeline/table_probes.py``): plain pydantic data
that runs on a Lance dataset without Airflow, so an event trigger for an ``AssetWatcher`` can reuse
it.  A trigger is rebuilt by Airflow from its serialized kwargs, so the same kwargs must make the same
trigger, whenever they are read.  A Spark stage is submitted, polled and read back from the
checkpoint store by ids alone (``pipeline/stage_reports.py``), on either backend.  Real Lance tables,
real spark-submit, a real Spark Connect server.

The part that runs Spark stages through the operators' backends; the rest is in
tests/unit/test_airflow_seams.py.
"""

from __future__ import annotations

import json
from collections import defaultdict
from types import SimpleNamespace

import pyarrow as pa

import geneva_provider as gp
from tests.conftest import FAKE_SECRET
from tests.helpers import SPARK_INFO_LINE, events_table


def context():
    return {"outlet_events": defaultdict(lambda: SimpleNamespace(extra=None))}


@gp.udf(data_type=pa.int64())
def triple(x: int) -> int:
    return 3 * x


# ----------------------------------------------------------------------------------------------------- triggers


# --------------------------------------------------------------------------------------------- spark stages
def _planned(lance_db, rows: int) -> dict:
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator

    tbl = lance_db.create_table("events", events_table(rows), max_rows_per_file=2_000)
    tbl.add_columns({"t": triple})
    return GenevaPlanBackfillOperator(task_id="plan", table="events", column="t").execute(context())


def _submit_poll_result(summary: dict, capfd, **spark: object) -> str:
    """The apply stage of ``summary`` through its backend's three steps; its report read back by ids alone.

    ``spark``: more arguments of the apply operator.  Returns the task's log.
    """
    from geneva_provider.core.contracts.kinds import Stage
    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.core.store.checkpoint import open_store, split_key_uri
    from geneva_provider.hooks.lance import LanceHook
    from geneva_provider.operators.spark import GenevaSparkApplyOperator
    from geneva_provider.pipeline.stage_reports import StageSubmission

    plan = PlanSummary.from_xcom(summary)
    operator = GenevaSparkApplyOperator(task_id="apply", plan=summary, **spark)
    backend, options = operator.backend, LanceHook().storage_options
    store = open_store(split_key_uri(plan.plan_uri)[0], options)
    store.put_text(StageSubmission.of(Stage.APPLY, plan.plan_uri).result_key, "an earlier attempt's report")

    submission = backend.submit(operator.entry, plan, options, store)
    assert not submission.done(store)  # submit returns once the stage has started, forgetting the earlier report
    ids = submission.model_dump_json()
    assert json.loads(ids) == {"job_id": plan.job_id, "stage": "apply", "plan_uri": plan.plan_uri}
    assert FAKE_SECRET not in ids
    backend.poll(submission, store)
    assert submission.done(store)
    run = backend.result(submission, store)
    assert run.succeeded and run.report is not None and run.report.result is not None
    assert run.report.result.rows_computed == plan.rows_to_compute == 3_000
    # What a trigger or a retry would do, holding only the ids: the same report, from the store.
    assert StageSubmission.model_validate_json(ids).report(store) == run.report
    logs = "".join(capfd.readouterr())
    assert "apply " + plan.job_id in logs and "rows checkpointed" in logs  # poll logged the job's progress
    assert FAKE_SECRET not in logs
    return logs


def test_a_spark_submit_stage_is_submitted_polled_and_read_back_from_the_store(lance_db, spark_submit, capfd):
    summary = _planned(lance_db, 3_000)
    # A configuration key Spark warns about: its warning must reach the task log.
    logs = _submit_poll_result(summary, capfd, conf={"spark.cache.class": "unused"})
    assert lance_db.open_table("events").to_arrow(["t"]).column("t").null_count == 3_000  # apply commits nothing
    # The task log holds the stage program's own lines and Spark's warnings, not Spark's INFO chatter.
    assert not [line for line in logs.splitlines() if SPARK_INFO_LINE.search(line)]
    assert f"geneva_provider.pipeline.stages.apply: apply {summary['job_id']}: 3000 rows checkpointed" in logs
    assert "WARN SparkConf: The configuration key 'spark.cache.class' has been deprecated" in logs


def test_a_spark_connect_stage_is_submitted_polled_and_read_back_from_the_store(lance_db, capfd):
    summary = _planned(lance_db, 3_000)
    _submit_poll_result(summary, capfd)
    from geneva_provider.operators.spark import GenevaSparkWriteCommitOperator

    written = GenevaSparkWriteCommitOperator(task_id="write", plan=summary).execute(context())  # run(): all three
    assert written["status"] == "success" and written["rows_committed"] == 3_000
    got = lance_db.open_table("events").to_arrow(["x", "t"]).to_pydict()
    assert got["t"] == [3 * x for x in got["x"]]
