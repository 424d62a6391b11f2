"""Retries that mean something, and the trigger a deferred Spark stage waits on (no JVM, no Airflow DB).

The retry policy the operators set by default is judged on the package's real error classes; the
stage trigger polls a real checkpoint store (the ``lance_default`` connection's) for a stage's
lease and report, exactly as it does in the triggerer.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.sdk import ExceptionRetryPolicy, RetryAction

from geneva_provider.core import errors
from geneva_provider.core.contracts.kinds import EventStatus, Stage
from geneva_provider.core.contracts.models import StageReport
from geneva_provider.core.store.checkpoint import open_store
from geneva_provider.core.store.layout import PlanKey, StageLeaseKey, new_job_id, parse_key
from geneva_provider.hooks.errors import no_retry, retry_policy
from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.pipeline.stage_reports import RunStatus, StageLease, StageSubmission
from geneva_provider.triggers.stage import GenevaStageTrigger
from tests.conftest import FAKE_SECRET, LANCE_DB
from tests.helpers import first_event


def decide(exc: BaseException) -> RetryAction:
    return retry_policy().evaluate(exc, try_number=1, max_tries=3).action


# ------------------------------------------------------------------ the retry policy
@pytest.mark.parametrize(("exc", "action"), [
    (errors.UDFExecutionError("column 'y': UDF 'double' raised ZeroDivisionError at row 7"), RetryAction.FAIL),
    (errors.ColumnError("column 'z' not found in table 'events'"), RetryAction.FAIL),  # a schema error
    (errors.InvalidArgumentError("checkpoint_size must be positive, got -1"), RetryAction.FAIL),  # bad input
    (errors.UDFDefinitionError("column 'y': 'x' is not a @udf function"), RetryAction.FAIL),
    (errors.ConcurrentOverwriteError("newer values in fragment 3"), RetryAction.FAIL),
    (errors.UDFWorkerDiedError("the Python worker died (lost executor)"), RetryAction.RETRY),
    (errors.CommitError("table 'events': 5 commit conflicts, past the budget of 4"), RetryAction.RETRY),
    (errors.SparkServerUnreachableError("sc://127.0.0.1:1 refused"), RetryAction.RETRY),
    (errors.StorageUnreachableError("s3://bucket: connection refused"), RetryAction.RETRY),
    (errors.StageRunnerLostError("the apply stage's runner died"), RetryAction.RETRY),
    (OSError(5, "Input/output error"), RetryAction.RETRY),  # I/O from outside the package
    (ConnectionResetError("reset by peer"), RetryAction.RETRY),
    (TimeoutError("read timed out"), RetryAction.RETRY),
    (RuntimeError("something else"), RetryAction.DEFAULT),  # the task's own retries decide
])
def test_the_retry_policy_retries_what_a_retry_can_fix_and_fails_the_rest_at_once(exc, action):
    assert decide(exc) is action


def test_every_package_error_class_is_judged_by_its_own_retryable_flag():
    for cls in errors.error_classes():
        exc = cls.__new__(cls)
        want = RetryAction.RETRY if cls.retryable else RetryAction.FAIL
        assert decide(exc) is want, cls
        decision = retry_policy().evaluate(exc, try_number=1, max_tries=3)
        assert decision.reason.startswith(f"{cls.__name__}: "), decision.reason
    # A fail-once twin (older Airflow's mapping) is what the policy says of its class too.
    assert decide(no_retry(errors.ColumnError("column 'z'"))) is RetryAction.FAIL


def test_operators_set_the_policy_by_default_and_a_dag_overrides_it():
    policy = retry_policy()
    assert isinstance(policy, ExceptionRetryPolicy)
    apply = GenevaSparkApplyOperator(task_id="apply", plan={"job_id": "j"})
    plan = GenevaPlanBackfillOperator(task_id="plan", table="events", column="y")
    assert apply.retry_policy is policy and plan.retry_policy is policy and apply.has_retry_policy
    own = ExceptionRetryPolicy(rules=[])
    assert GenevaSparkWriteCommitOperator(task_id="w", plan={}, retry_policy=own).retry_policy is own
    assert GenevaSparkApplyOperator(task_id="a", plan={}, default_args={"retry_policy": own}).retry_policy is own


def test_deferrable_defaults_from_the_operators_section(monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")  # as tests/conftest.py sets it
    assert GenevaSparkApplyOperator(task_id="a", plan={}).deferrable is True
    assert GenevaSparkApplyOperator(task_id="a", plan={}, deferrable=False).deferrable is False
    assert GenevaSparkApplyOperator(task_id="a", plan={}).durable is True  # a retry reattaches by default
    assert GenevaSparkApplyOperator(task_id="a", plan={}, durable=False).durable is False


# ------------------------------------------------------------------ the stage trigger
@pytest.fixture
def stage(lance_db):
    """A submitted apply stage's ids, and the checkpoint store of the ``lance_default`` connection."""
    db_uri = str(LANCE_DB)
    store = open_store(f"{db_uri}/events.lance/_checkpoints")
    job_id = new_job_id()
    submission = StageSubmission(job_id=job_id, stage=Stage.APPLY, plan_uri=store.key_uri(PlanKey(job_id).key()))
    return submission, store


def test_the_trigger_serializes_ids_only_and_the_same_kwargs_make_the_same_trigger(stage):
    submission, _ = stage
    trigger = GenevaStageTrigger(job_id=submission.job_id, stage="apply", plan_uri=submission.plan_uri,
                                 poll_interval=2)
    classpath, kwargs = trigger.serialize()
    assert classpath == "geneva_provider.triggers.stage.GenevaStageTrigger"
    assert kwargs == {"job_id": submission.job_id, "stage": "apply", "plan_uri": submission.plan_uri,
                      "lance_conn_id": "lance_default", "poll_interval": 2.0, "deadline": None,
                      "progress_interval": 5.0}
    assert json.loads(json.dumps(kwargs)) == kwargs and FAKE_SECRET not in json.dumps(kwargs)
    again = GenevaStageTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)


def _trigger(submission: StageSubmission) -> GenevaStageTrigger:
    return GenevaStageTrigger(job_id=submission.job_id, stage=str(submission.stage), plan_uri=submission.plan_uri,
                              poll_interval=0.05)


def test_the_trigger_waits_while_the_lease_is_renewed_and_fires_on_the_report(stage):
    submission, store = stage
    submission.hold(store, StageLease.now("owner-1", pid=os.getpid()))  # a live process on this host
    assert parse_key(submission.lease_key) == StageLeaseKey(submission.job_id, Stage.APPLY)
    assert submission.status(store) is RunStatus.RUNNING

    async def wait_then_report() -> dict:
        task = asyncio.ensure_future(first_event(_trigger(submission)))
        await asyncio.sleep(0.5)
        assert not task.done()  # a live lease and no report: the trigger keeps polling
        await asyncio.to_thread(submission.leave, store, StageReport(status=EventStatus.SUCCESS))
        return (await asyncio.wait_for(task, 10)).payload

    event = asyncio.run(wait_then_report())
    assert event == {"status": "succeeded", "job_id": submission.job_id, "stage": "apply",
                     "plan_uri": submission.plan_uri}


def test_the_trigger_reports_a_failed_stage_and_a_runner_that_died(stage):
    submission, store = stage
    submission.leave(store, StageReport.failed(errors.UDFExecutionError("UDF 'double' raised at x=7")))
    assert asyncio.run(first_event(_trigger(submission))).payload["status"] == "failed"

    submission.clear(store)
    dead = StageLease(owner="o", host="h", pid=1, renewed=time.time() - 120)  # renewed two minutes ago
    submission.hold(store, dead)
    assert submission.status(store) is RunStatus.LOST
    assert asyncio.run(first_event(_trigger(submission))).payload["status"] == "lost"
    assert submission.status(store, now=dead.renewed + timedelta(seconds=30).total_seconds()) is RunStatus.RUNNING

    # On the runner's own host a lease whose process is gone is lost at once, not a lease period later.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    submission.hold(store, StageLease.now("o", pid=gone.pid))
    assert submission.status(store) is RunStatus.LOST


def test_past_its_deadline_the_trigger_revokes_the_runner_s_lease_and_fires_timeout(stage):
    """A deferred task's execution_timeout: the stage's runner (anywhere) sees its lease revoked and stops."""
    submission, store = stage
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # stands for the runner
    submission.hold(store, StageLease.now("runner", pid=runner.pid))
    trigger = GenevaStageTrigger(job_id=submission.job_id, stage="apply", plan_uri=submission.plan_uri,
                                 poll_interval=0.05, deadline=time.time() + 0.3)
    started = time.monotonic()
    assert asyncio.run(first_event(trigger)).payload["status"] == "timeout"
    assert 0.3 <= time.monotonic() - started < 10
    assert submission.lease(store).owner == "revoked" and submission.status(store) is RunStatus.LOST
    assert runner.wait(timeout=10) == -15  # and a runner on this host got SIGTERM


def test_a_store_the_trigger_cannot_open_is_an_error_event():
    trigger = GenevaStageTrigger(job_id="20260101T000000-00000000", stage="apply", plan_uri="not-a-plan-uri",
                                 poll_interval=0.05)
    event = asyncio.run(first_event(trigger)).payload
    assert event["status"] == "error" and event["message"], event


def test_a_deferred_stage_logs_the_same_progress_lines_as_one_waited_for_in_its_task(stage):
    """While it waits, the trigger logs the job record's rows and rate in the task's format, at most once per
    ``progress_interval`` and only when rows moved; the stage's end makes a last line."""
    import logging

    from geneva_provider.core.contracts.models import JobRecord
    from geneva_provider.pipeline.stages.job_records import start_record, update_record

    submission, store = stage
    start_record(store, JobRecord(job_id=submission.job_id, kind="backfill", table="events", column="y",
                                  created_at="2026-01-01T00:00:00", updated_at="2026-01-01T00:00:00",
                                  rows_planned=1_000, rows_checkpointed=100))
    submission.hold(store, StageLease.now("owner-1", pid=os.getpid()))
    trigger = GenevaStageTrigger(job_id=submission.job_id, stage="apply", plan_uri=submission.plan_uri,
                                 poll_interval=0.05, progress_interval=0.2)
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("geneva_provider.tests.trigger_progress")
    logger.handlers[:], logger.propagate = [Lines()], False
    logger.setLevel(logging.INFO)
    trigger._log = logger  # LoggingMixin keeps its logger here: the triggerer routes it to the task's log

    async def run() -> dict:
        task = asyncio.ensure_future(first_event(trigger))
        await asyncio.sleep(0.6)  # three looks at a record that does not move: one line
        await asyncio.to_thread(update_record, store, submission.job_id, rows_checkpointed=600)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(update_record, store, submission.job_id, rows_checkpointed=1_000)
        await asyncio.to_thread(submission.leave, store, StageReport(status=EventStatus.SUCCESS))
        return (await asyncio.wait_for(task, 10)).payload

    assert asyncio.run(run())["status"] == "succeeded"
    pattern = (rf"^apply {submission.job_id}: \w+; (\d+) of 1000 rows checkpointed, 0 ready to commit, "
               r"0 committed \(\d+ rows/s\)(; \d+ computed(, ETA [\d.]+s)?)?$")
    import re

    counts = [int(re.match(pattern, line)[1]) for line in lines]  # every line in the task's format
    assert counts[0] == 100 and counts.count(100) == 1, lines  # no line while nothing moved
    assert 600 in counts and counts[-1] == 1_000, lines


def test_a_detached_stage_s_runner_log_is_in_airflow_s_log_folder_and_goes_once_the_stage_succeeded(
        stage, caplog, capsys, monkeypatch):
    """Not the system temp dir, where every stage left one for good: ``geneva-stages/`` in Airflow's log folder;
    copied into the task's log when the stage ends, removed when it succeeded, kept when it failed."""
    from airflow.sdk import conf

    from geneva_provider.operators.spark import runner_log

    submission, store = stage
    path = runner_log(submission)
    assert path == Path(conf.get("logging", "base_log_folder")) / "geneva-stages" / f"{submission.job_id}-apply.log"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_NOWHERE", json.dumps(
        {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 9}))  # never reached: the report is read
    operator = GenevaSparkApplyOperator(task_id="apply", plan="{}", spark_conn_id="spark_connect_nowhere")
    assert operator.detached  # durable over the spark_connect connection: the stage ran in a process of its own

    path.write_text("the runner's own line\n")
    submission.leave(store, StageReport.failed(errors.UDFExecutionError("UDF 'double' raised at x=7")))
    with pytest.raises(errors.UDFExecutionError):
        operator.get_job_result(submission.model_dump(mode="json"), {})
    assert path.read_text() == "the runner's own line\n"  # a failed stage's log stays for whoever looks into it

    submission.clear(store)
    submission.leave(store, StageReport(status=EventStatus.SUCCESS))
    caplog.clear()
    capsys.readouterr()
    with caplog.at_level("INFO"):
        assert operator.get_job_result(submission.model_dump(mode="json"), {})["status"] == "success"
    out = capsys.readouterr()  # once Airflow has set up logging its lines are printed, else they reach the handlers
    assert "the runner's own line" in "\n".join([out.out, out.err, caplog.text])  # in the task's log now ...
    assert not path.exists() and list(path.parent.glob(f"{submission.job_id}-*")) == []  # ... and nowhere else
