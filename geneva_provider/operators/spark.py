"""Operators that run the Spark stages of a plan: over Spark Connect, or with ``spark-submit``.

The Spark connection decides how and where: it chooses the backend once
(:mod:`geneva_provider.operators.spark_backends`).  Which stage an operator runs, and what that
stage needs, comes from its entry in the stage registry
(:mod:`geneva_provider.pipeline.stages.registry`).  Either way the stage's result becomes the
XCom and a failure says the package's reason first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk import conf as airflow_conf
from airflow.sdk.exceptions import AirflowException, AirflowSkipException, AirflowTaskTimeout

from geneva_provider.core.contracts.kinds import EventStatus, Stage
from geneva_provider.core.docstrings import inherit_params
from geneva_provider.hooks.errors import fails_without_retry, no_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.openlineage import LineageMixin, inject_parent_job_info
from geneva_provider.operators._common import in_process_rows_setting, reuse_session_setting, with_retry_policy
from geneva_provider.operators.links import GenevaJobLink, SparkUILink, push_job_link, push_spark_ui_link
from geneva_provider.operators.progress import progress_seconds
from geneva_provider.operators.spark_backends import (
    ConnectBackend,
    InProcessBackend,
    SparkSubmitBackend,
    small_plan,
    small_write,
    spark_backend,
)
from geneva_provider.pipeline.stages.registry import SparkStage, spark_stage
from geneva_provider.stage_runner.backends import SparkBackend, SparkSettings, StageRun
from geneva_provider.stage_runner.progress import ProgressLogger

if TYPE_CHECKING:
    from geneva_provider.core.contracts.lineage_models import Committed
    from geneva_provider.core.contracts.models import PlanSummary, StageReport
    from geneva_provider.hooks.spark_submit import GenevaSparkSubmitHook
    from geneva_provider.pipeline.stage_reports import StageSubmission


try:  # Airflow 3.3+: a retry reattaches to the stage an earlier try left running
    from airflow.sdk import ResumableJobMixin
except ImportError:  # before 3.3: every try submits the stage (today's behaviour)
    class ResumableJobMixin:  # type: ignore[no-redef]
        """Stand-in for Airflow 3.3's mixin: submit, poll, result, with no state kept across tries."""

        def __init__(self, *, durable: bool = False, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.durable = False

        def execute_resumable(self, context: Any) -> Any:
            external_id = self.submit_job(context)  # type: ignore[attr-defined]
            return self.poll_until_complete(external_id, context)  # type: ignore[attr-defined]


FIRST_POLL_SECONDS = 0.1  # the first look at a stage run in a process of its own


def poll_wait(elapsed: float, poll_interval: float) -> float:
    """Seconds until the next look at a stage that has run ``elapsed`` seconds: a tenth of that, from
    ``FIRST_POLL_SECONDS`` up to ``poll_interval``.

    A small stage's end is seen within a fraction of a second of it (a fixed 5 s wait made every short
    stage last a multiple of 5 s), and a long one's store is read no more often than ``poll_interval``.
    """
    return min(max(FIRST_POLL_SECONDS, elapsed / 10), max(poll_interval, FIRST_POLL_SECONDS))


class _GenevaSparkStageOperator(LineageMixin, ResumableJobMixin, BaseOperator):
    """Runs one Spark stage of a plan (its ``stage``'s registry entry) and returns the stage's JSON result.

    :param plan: the plan stage's summary (its XCom, an ``XComArg``) (templated)
    :param spark_conn_id: the Spark connection: ``spark_connect`` runs the stage over Spark Connect, ``spark``
        submits its program with spark-submit
    :param lance_conn_id: the Lance connection (storage options of the table and its checkpoint store)
    :param conf: Spark settings for the stage (templated)
    :param py_files: comma-separated files shipped to the executors (templated)
    :param env_vars: environment of the spark-submit process (templated)
    :param spark_binary: the spark-submit to run
    :param ship_package: add a zip of this package to ``py_files``, for clusters whose Python lacks it
        (pylance, pyarrow and cloudpickle must still be installed there)
    :param cluster_credentials: the cluster reaches the tables with its own credentials (YARN, Kubernetes)
    :param deferrable: over Spark Connect, run the stage in a process of its own and wait for it in the
        triggerer: the task holds no worker slot while Spark runs (default ``[operators] default_deferrable``;
        Airflow 3.3+; a spark-submit stage always runs in the task)
    :param durable: over Spark Connect, run the stage in a process of its own even when not deferred, so that
        a worker crash or a task restart reattaches to it instead of starting it again (default ``True``;
        Airflow 3.3+).  ``False`` runs the stage in the task process: a killed task's Spark work may go on on
        the server while its retry starts the stage again
    :param poll_interval: at most this many seconds between two looks at a stage that runs in a process of its
        own (the first looks come sooner: a tenth of the stage's time so far, from 0.1 s)
    :param progress_interval: seconds between two progress lines (rows, rows/s) in the task log while the
        stage runs -- a line only when rows moved, and one every ``PROGRESS_HEARTBEATS`` intervals regardless
        (default ``[geneva] progress_interval``, else 5)
    :param openlineage_inject_parent_job_info: add this task's OpenLineage parent job properties
        (``spark.openlineage.parent*``) to the stage's Spark conf, as ``SparkSubmitOperator`` does (default
        ``[openlineage] spark_inject_parent_job_info``); a spark-submit stage's application gets them
    :param in_process_rows: the apply and write+commit stages of a plan with at most this many rows to compute (and
        no UDF asking for GPUs) run in the task's own process with the in-process task runner -- no Spark session,
        upload or job, which cost more than such work -- through the same checkpoints and commit (default
        ``[geneva] in_process_rows``, else 20,000; 0: always on Spark)

    The task's extra links open the job's record ("Geneva job") and the Spark UI of the stage's driver
    ("Spark UI": a spark-submit driver's, or the Spark Connect server's when it runs one).

    A retry of a stage that already succeeded returns its result without running it again, and no
    two tries run the same stage at once: the process that runs it holds a lease in the checkpoint
    store, which a later try finds and waits on.
    """

    stage: Stage  # the Spark stage this operator runs: everything else comes from its registry entry
    template_fields: Sequence[str] = ("plan", "conf", "py_files", "env_vars")
    ui_color = "#fcefe3"
    external_id_key = "geneva_stage"  # the task state store key of the submitted stage's ids
    operator_extra_links = (GenevaJobLink(), SparkUILink())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__doc__ = inherit_params(cls.__doc__, _GenevaSparkStageOperator.__doc__)

    def __init__(
        self,
        *,
        plan: Any,
        spark_conn_id: str = "spark_default",
        lance_conn_id: str = LanceHook.default_conn_name,
        conf: dict[str, Any] | None = None,
        py_files: str | None = None,
        env_vars: dict[str, str] | None = None,
        spark_binary: str | None = None,
        ship_package: bool = False,
        cluster_credentials: bool = False,
        deferrable: bool = airflow_conf.getboolean("operators", "default_deferrable", fallback=False),
        durable: bool = True,
        poll_interval: float = 5.0,
        progress_interval: float | None = None,
        openlineage_inject_parent_job_info: bool = airflow_conf.getboolean(
            "openlineage", "spark_inject_parent_job_info", fallback=False),
        in_process_rows: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(durable=durable, **with_retry_policy(kwargs))
        self.openlineage_inject_parent_job_info = openlineage_inject_parent_job_info
        self.ship_package = ship_package
        self.cluster_credentials = cluster_credentials
        self.plan = plan
        self.spark_conn_id = spark_conn_id
        self.lance_conn_id = lance_conn_id
        self.conf = conf or {}
        self.py_files = py_files
        self.env_vars = env_vars or {}
        self.spark_binary = spark_binary
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.progress_interval = progress_seconds(progress_interval, f"{type(self).__name__} '{self.task_id}'")
        self.in_process_rows = in_process_rows_setting(in_process_rows, f"{type(self).__name__} '{self.task_id}'")

    runs_small_plans = False  # whether a small plan's stage runs in the task's process (in_process_rows)

    @cached_property
    def backend(self) -> SparkBackend:
        """How the stage runs (when the task runs: after rendering): in the task's process for a small plan
        (:func:`~geneva_provider.operators.spark_backends.small_plan`), else as the Spark connection says."""
        settings = self.spark_settings()
        plan = getattr(self, "_summary", None)
        if self.runs_small_plans and plan is not None:
            why = small_plan(settings, plan, self._storage_options)
            if why is not None:
                return InProcessBackend(settings, self.log, why)
        backend = spark_backend(settings, self.log)
        if plan is not None and isinstance(backend, SparkSubmitBackend):
            why = self.small_without_jvm(settings, plan)
            if why is not None:
                return InProcessBackend(settings, self.log, why)
        return backend

    def small_without_jvm(self, settings: SparkSettings, plan: PlanSummary) -> str | None:
        """Why this stage of a plan that is not small runs in the task's process rather than in a spark-submit JVM,
        or None (it goes to spark-submit)."""
        return None

    @property
    def entry(self) -> SparkStage:
        """The stage's entry in the stage registry."""
        return spark_stage(self.stage)

    @property
    def keeps_session(self) -> bool:
        """Over Spark Connect: whether the session stays open for the job's next Spark stage."""
        return self.entry.keeps_session

    @property
    def detached(self) -> bool:
        """Whether the stage runs in a process of its own (over Spark Connect, deferred or durable)."""
        return isinstance(self.backend, ConnectBackend) and (self._defers or self.durable)

    _defers = False  # deferrable, and run by a task runner that can defer (set by execute, execute_complete)
    _result: tuple[Any, dict[str, Any]] | None = None  # the submission whose result was read, and that result
    _outcome: Any = None  # ... and that result as its model (ApplyResult, WriteResult, ...)

    def nothing_to_do(self, plan: PlanSummary) -> bool:
        return plan.nothing_to_do

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.core.contracts.models import PlanSummary

        self._summary = plan = PlanSummary.from_xcom(self.plan)
        if self.nothing_to_do(plan):
            raise AirflowSkipException(f"plan {plan.job_id} has nothing for the {self.stage} stage to do")
        self._storage_options  # noqa: B018 - the Lance connection first: a missing one is named before Spark's
        push_job_link(context, plan.job_id, plan.table, self.lance_conn_id, plan.namespace)
        if self.openlineage_inject_parent_job_info and context.get("ti") is not None:
            self.conf = inject_parent_job_info(self.conf, context)
        # A bare execute() (a notebook, a script) has no task runner to defer with: it waits in place.
        self._defers = self.deferrable and context.get("ti") is not None
        if self._defers and not isinstance(self.backend, ConnectBackend):
            what = "a small plan's stage" if isinstance(self.backend, InProcessBackend) else "a spark-submit stage"
            self.log.info("deferrable=True: %s runs in its task (only Spark Connect stages defer)", what)
        return self.execute_resumable(context)

    # ------------------------------------------------------------ ResumableJobMixin: submit, status, poll, result
    @cached_property
    def _storage_options(self) -> dict[str, str] | None:
        return LanceHook(self.lance_conn_id).storage_options

    def _store(self, plan_uri: str) -> Any:
        from geneva_provider.core.store.checkpoint import open_store, split_key_uri

        return open_store(split_key_uri(plan_uri)[0], self._storage_options)

    def submit_job(self, context: Any) -> dict[str, Any]:
        """Starts the stage (or finds it already running elsewhere) and returns its ids (plain JSON, no secrets)."""
        from geneva_provider.pipeline.stage_reports import RunStatus, StageSubmission

        plan = self._summary
        store = self._store(plan.plan_uri)
        if not self.detached:
            submission = self.backend.submit(self.entry, plan, self._storage_options, store)
            return submission.model_dump(mode="json")
        from geneva_provider.stage_runner import detached

        submission = StageSubmission.of(self.stage, plan.plan_uri)
        if submission.status(store) == RunStatus.RUNNING:  # another try's runner: never two at once
            self.log.info("The %s stage of plan %s is already running (%s): waiting for it", self.stage,
                          plan.job_id, submission.lease(store))
            return submission.model_dump(mode="json")
        assert isinstance(self.backend, ConnectBackend)
        pid = detached.start(submission, plan, store, url=self.backend.url, storage_options=self._storage_options,
                             py_files=self.py_files, submitter=self.spark_settings().submitter,
                             log_folder=_log_folder(), package=self.backend.package,
                             reuse_session=self.spark_settings().reuse_session)
        self.log.info("Started the %s stage of plan %s over Spark Connect (connection '%s') in process %d, its "
                      "log in %s: %s", self.stage, plan.job_id, self.spark_conn_id, pid,
                      runner_log(submission), plan.describe())
        return submission.model_dump(mode="json")

    def get_job_status(self, external_id: Any, context: Any) -> str:
        """Where the stage stands, from the checkpoint store: a :class:`RunStatus` value."""
        from geneva_provider.pipeline.stage_reports import StageSubmission

        submission = StageSubmission.model_validate(external_id)
        return str(submission.status(self._store(submission.plan_uri)))

    def is_job_active(self, status: str) -> bool:
        return status == "running"

    def is_job_succeeded(self, status: str) -> bool:
        return status == "succeeded"

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        """Waits for the stage to end -- in the triggerer when deferrable -- and returns its result (the mixin
        returns what this returns when a try reattaches)."""
        from geneva_provider.pipeline.stage_reports import RunStatus, StageSubmission

        submission = StageSubmission.model_validate(external_id)
        store = self._store(submission.plan_uri)
        if not self.detached:
            self.backend.poll(submission, store)
            return self.get_job_result(external_id, context)
        if self._defers and submission.status(store) == RunStatus.RUNNING:
            from geneva_provider.triggers.stage import GenevaStageTrigger

            self.defer(trigger=GenevaStageTrigger(job_id=submission.job_id, stage=str(submission.stage),
                                                  plan_uri=submission.plan_uri, lance_conn_id=self.lance_conn_id,
                                                  poll_interval=self.poll_interval, deadline=self._deadline(context),
                                                  progress_interval=self.progress_interval),
                       method_name="execute_complete")
        with ProgressLogger(store, submission.job_id, submission.stage, self.log, seconds=self.progress_interval):
            started = time.monotonic()
            while submission.status(store) == RunStatus.RUNNING:
                time.sleep(poll_wait(time.monotonic() - started, self.poll_interval))
        return self.get_job_result(external_id, context)

    def _deadline(self, context: Any) -> float | None:
        """When ``execution_timeout`` runs out (seconds since the epoch; from the try's start), for the trigger:
        a deferred task's wait is not bounded by Airflow, and the stage's Spark work must stop with it."""
        if self.execution_timeout is None:
            return None
        started = getattr(context.get("ti"), "start_date", None)
        begin = started.timestamp() if started is not None else time.time()
        return begin + self.execution_timeout.total_seconds()

    @fails_without_retry
    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Resumes the task once the trigger saw the stage end: the same result as a stage waited for in the task."""
        self._defers = True
        if event.get("status") == "error":
            raise AirflowException(f"waiting for the {self.stage} stage failed: {event.get('message')}")
        if event.get("status") == "timeout":
            raise AirflowTaskTimeout(f"the {self.stage} stage of plan {event['job_id']} ran past the task's "
                                     f"execution_timeout ({self.execution_timeout}); its Spark work was stopped")
        return self.get_job_result({k: event[k] for k in ("job_id", "stage", "plan_uri")}, context)

    def get_job_result(self, external_id: Any, context: Any) -> dict[str, Any]:
        """The stage's result from the report it left; a failed (or lost) stage raises the package's error."""
        from geneva_provider.core.errors import StageRunnerLostError
        from geneva_provider.pipeline.stage_reports import StageSubmission

        submission = StageSubmission.model_validate(external_id)
        if self._result is not None and self._result[0] == submission:  # poll returned it already (the mixin asks
            return self._result[1]                                          # again after polling)
        store = self._store(submission.plan_uri)
        self._push_spark_ui(context, store, submission.job_id)
        if self.detached or self.backend.stage is None:  # not run by this process: its report alone
            self._relay_runner_log(submission)
            run = StageRun(submission.report(store), succeeded=False)
            if run.report is None:
                raise StageRunnerLostError(
                    f"the {self.stage} stage of plan {submission.job_id} ended without a report: the process "
                    f"that ran it died (see {self._runner_log(submission)}); the next try resumes it from its "
                    "checkpoints")
            run = StageRun(run.report, succeeded=run.report.status == EventStatus.SUCCESS)
            if run.succeeded:  # its log is in the task's now; a failed stage's stays where the error says
                self._forget_runner_log(submission)
        else:
            run = self.backend.result(submission, store)
        if run.succeeded and run.report is not None:
            self._result = (submission, run.report.to_xcom())
            self._outcome = run.report.result
            return self._result[1]
        raise self._failure(submission.job_id, run.report, run.output_tail) from run.cause

    @staticmethod
    def _push_spark_ui(context: Any, store: Any, job_id: str) -> None:
        """The Spark UI the stage's driver reported in the job record, for the task's "Spark UI" link."""
        from geneva_provider.pipeline.stages.job_records import read_record

        record = read_record(store, job_id)
        push_spark_ui_link(context, record.spark_ui if record is not None else None)

    def _relay_runner_log(self, submission: Any) -> None:
        """Copies what the stage's runner logged into the task log (when it ran on this host)."""
        path = runner_log(submission)
        if path.is_file():
            self.log.info("The %s stage's runner logged (%s):\n%s", self.stage, path,
                          path.read_text(errors="replace").rstrip())

    @staticmethod
    def _forget_runner_log(submission: Any) -> None:
        runner_log(submission).unlink(missing_ok=True)

    @staticmethod
    def _runner_log(submission: Any) -> str:
        return f"{runner_log(submission)} on the worker that started it"

    def spark_settings(self) -> SparkSettings:
        """The operator's (rendered) Spark arguments, as the backends take them."""
        return SparkSettings(conn_id=self.spark_conn_id, conf=self.conf, py_files=self.py_files,
                             env_vars=self.env_vars, spark_binary=self.spark_binary, ship_package=self.ship_package,
                             cluster_credentials=self.cluster_credentials,
                             submitter=f"{type(self).__name__} '{self.task_id}'",
                             progress_interval=self.progress_interval, in_process_rows=self.in_process_rows,
                             reuse_session=reuse_session_setting(f"{type(self).__name__} '{self.task_id}'"))

    def make_hook(self, plan: PlanSummary, storage_options: dict[str, str] | None, result_key: str
                  ) -> GenevaSparkSubmitHook:
        """The spark-submit hook that would run the stage on a ``spark`` connection (see ``SparkSubmitBackend``)."""
        return SparkSubmitBackend(self.spark_settings(), self.log).make_hook(self.entry, plan, storage_options,
                                                                             result_key)

    def _failure(self, job_id: str, report: StageReport | None, tail: str = "") -> Exception:
        """The stage's failure with the package's reason first, then the last lines Spark printed (``tail``).

        A deterministic failure (bad input, a UDF bug) fails the task for good; others may retry.
        """
        from geneva_provider.core.errors import GenevaError

        payload = report.error if report is not None else None
        reason = payload.describe() if payload is not None else "it wrote no report (see Spark's output)"
        message = f"the {self.stage} stage of plan {job_id} failed: {reason}{tail}"
        error = payload.to_exc(message) if payload is not None else None
        if isinstance(error, GenevaError):  # the package's error, as itself
            return error if error.retryable else no_retry(error)
        return AirflowException(message)

    def lineage_written(self) -> Committed | None:
        """What the stage committed, once its result is read (lineage's statistics and version): a write+commit's
        rows, files and bytes, a compaction's files, an index build's rows; nothing for an apply."""
        return self._outcome.committed() if self._outcome is not None else None

    def on_kill(self) -> None:
        """Stops the stage's Spark work: the stage this task runs, or the process of its own that runs it."""
        if "backend" not in self.__dict__:  # not chosen: nothing runs
            return
        if self.detached and getattr(self, "_summary", None) is not None:
            from geneva_provider.pipeline.stage_reports import StageSubmission

            submission = StageSubmission.of(self.stage, self._summary.plan_uri)
            submission.stop(self._store(submission.plan_uri))
            return
        self.backend.on_kill()


class GenevaSparkApplyOperator(_GenevaSparkStageOperator):
    """Apply stage on Spark: computes every planned range not yet checkpointed (a retry resumes)."""

    stage = Stage.APPLY
    runs_small_plans = True

    def nothing_to_do(self, plan: PlanSummary) -> bool:
        return plan.nothing_to_do or not plan.tasks


class GenevaSparkWriteCommitOperator(_GenevaSparkStageOperator):
    """Write+commit stage on Spark: one column file per fragment, DataReplacement commits."""

    stage = Stage.WRITE_COMMIT
    runs_small_plans = True

    def small_without_jvm(self, settings: SparkSettings, plan: PlanSummary) -> str | None:
        return small_write(settings, plan, self._storage_options)


def _log_folder() -> Path:
    """Airflow's log folder (``[logging] base_log_folder``, ``$AIRFLOW_HOME/logs`` by default)."""
    return Path(airflow_conf.get("logging", "base_log_folder"))


def runner_log(submission: StageSubmission) -> Path:
    """Where the stand-alone runner of a deferred or durable stage logs, on the worker that started it:
    ``geneva-stages/`` in Airflow's log folder, one file per job and stage
    (:func:`geneva_provider.stage_runner.detached.log_path`).

    The task copies it into its own log when the stage has ended and removes it when the stage succeeded; a
    failed or lost stage's stays for whoever looks into it (the task's error names it).
    """
    from geneva_provider.stage_runner.detached import log_path

    return log_path(_log_folder(), submission)
