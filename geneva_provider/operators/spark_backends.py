"""How a Spark stage of a plan runs in an Airflow task: over Spark Connect, or with ``spark-submit`` -- chosen once
from the connection.  The backends' interface and the Connect backend itself are below the Airflow surface
(:mod:`geneva_provider.stage_runner.backends`); here are the ones that need Airflow's hooks.

A ``spark_connect`` connection (the Spark provider's ``SparkConnectHook``) gives a
:class:`ConnectBackend`: the stage runs in the Airflow worker as a client of a long-lived Spark
Connect server, no JVM starts per task and the package travels as session artifacts.  Any other
Spark connection gives a :class:`SparkSubmitBackend`: the stage's program is submitted with
:class:`~geneva_provider.hooks.spark_submit.GenevaSparkSubmitHook` (``local[*]``, a standalone
master, YARN, Kubernetes).

Either way a stage goes through the same three steps, as the Spark provider's ``submit_job`` /
``poll_until_complete`` and the Databricks provider's submit-then-trigger do: :meth:`SparkBackend.submit`
starts it and returns its ids (a :class:`~geneva_provider.pipeline.stage_reports.StageSubmission`),
:meth:`~SparkBackend.poll` waits for it to end while logging its progress from the job record, and
:meth:`~SparkBackend.result` reads the report the stage left in the job's checkpoint store -- the
operator turns a failed one into the package's error.  :meth:`~SparkBackend.run` is the three in a
row (today's blocking stage).  Because the result is read from the store by ids alone, a
deferrable or resumable stage needs only a trigger (or a retry) that polls
``StageSubmission.done`` and then calls ``result``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.kinds import EventStatus
from geneva_provider.spark_apps import app_path
from geneva_provider.spark_apps.package import package_zip
from geneva_provider.stage_runner.backends import (
    ConnectStageBackend,
    SparkBackend,
    SparkSettings,
    StageEnd,
)

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.hooks.spark_submit import GenevaSparkSubmitHook
    from geneva_provider.pipeline.stage_reports import StageSubmission
    from geneva_provider.pipeline.stages.registry import SparkStage

SPARK_CONNECTION_TYPES = ("type 'spark_connect', host = sc://<server> and its port, to run the stages over Spark "
                          "Connect; or type 'spark', host = the master (local[*], spark://..., yarn, k8s://...), to "
                          "submit them with spark-submit")


def spark_backend(settings: SparkSettings, log: Any) -> SparkBackend:
    """The backend of the Spark connection ``settings.conn_id``: Spark Connect for a ``spark_connect`` one.

    No such connection is an InvalidArgumentError (the task fails once, saying how to define it).
    """
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    from geneva_provider.hooks.errors import airflow_connection

    conn = airflow_connection(settings.conn_id, "spark_conn_id", SPARK_CONNECTION_TYPES)
    if conn.conn_type == SparkConnectHook.conn_type:
        return ConnectBackend(settings, log)
    return SparkSubmitBackend(settings, log)


def small_plan(settings: SparkSettings, plan: PlanSummary, storage_options: dict[str, str] | None) -> str | None:
    """Why ``plan``'s Spark stages run in the task's process (:class:`InProcessBackend`), or None: they go to Spark.

    A plan with at most ``settings.in_process_rows`` rows to compute (the ``in_process_rows`` operator argument,
    ``[geneva] in_process_rows``, 20,000 by default) and no UDF asking for GPUs.  There its work is smaller than
    what Spark costs before any of it starts -- over Spark Connect a session, its package upload, a probe job
    and a new Python worker daemon that imports pyarrow, lance and the stages; over spark-submit a JVM -- and the
    in-process task runner runs it through the very stage code, checkpoints and commit.  Both stages of a plan
    decide alike (the same summary), so apply's checkpoints and write+commit's files come from one place.
    """
    if plan.rows_to_compute > settings.in_process_rows:
        return None
    from geneva_provider.pipeline.stages.planning import load_plan

    job_plan, _ = load_plan(plan.plan_uri, storage_options)
    if any(ask.resources.num_gpus for ask in job_plan.resource_asks):  # GPUs are given by Spark alone
        return None
    return (f"{plan.rows_to_compute:,} rows to compute, at most {settings.in_process_rows:,} (in_process_rows): "
            "in this process, no Spark")


def small_write(settings: SparkSettings, plan: PlanSummary, storage_options: dict[str, str] | None) -> str | None:
    """Why a column's write+commit runs in the task's process though its plan is not small, or None: a JVM writes.

    Its writers run on the driver anyway when their column files are small
    (:func:`~geneva_provider.pipeline.stages.on_driver.write_runner`, at most ``DRIVER_WRITE_BYTES``), and the
    driver commits: over spark-submit the stage's second JVM (~10 s of start for the demo's 100k rows) would run
    nothing on Spark.  Here the same stage code writes and commits with the in-process runner instead.  Off with
    ``in_process_rows=0`` (every stage on Spark), as the small plans are.
    """
    if not settings.in_process_rows or plan.nothing_to_do:
        return None
    from geneva_provider.core.contracts.models import Action, ColumnPlan
    from geneva_provider.pipeline.stages import on_driver
    from geneva_provider.pipeline.stages.context import StageContext
    from geneva_provider.pipeline.stages.planning import load_plan

    job_plan, _ = load_plan(plan.plan_uri, storage_options)
    if not isinstance(job_plan, ColumnPlan):
        return None
    rows = sum(f.physical_rows for f in job_plan.fragments if f.action is Action.COMPUTE)
    schema = StageContext.of(job_plan, storage_options).dataset().schema
    size = on_driver.write_bytes(job_plan, rows, schema)
    if size > on_driver.DRIVER_WRITE_BYTES:
        return None
    return f"{rows:,} rows (~{size // 1024:,} KiB) to write from checkpoints: in this process, no spark-submit"


class InProcessBackend(SparkBackend):
    """Runs a small plan's stage in the task's own process with the in-process task runner: no Spark at all.

    What the stage computes, checkpoints, writes and commits is the same code as on Spark (the runner is the
    :class:`~geneva_provider.pipeline.spark.task_runner.TaskRunner` seam); it leaves its report in the store as
    the other backends do, so a retry of the task resumes from its checkpoints whichever backend it gets.
    Nothing runs outside this process, so a killed task leaves nothing running.
    """

    def __init__(self, settings: SparkSettings, log: Any, why: str = "") -> None:
        super().__init__(settings, log)
        self.why = why
        self._runner: Any = None
        self._job_id = ""

    def _start(self, stage: SparkStage, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any,
               submission: StageSubmission) -> Callable[[], StageEnd]:
        from geneva_provider.core.contracts.models import StageReport
        from geneva_provider.pipeline.spark.in_process import InProcessRunner

        self._runner, self._job_id = InProcessRunner(), plan.job_id
        self.log.info("Running the %s stage of plan %s in the task's process (%s): %s", stage.name, plan.job_id,
                      self.why, plan.describe())

        def drive() -> StageEnd:
            cause = None
            try:
                report = StageReport(status=EventStatus.SUCCESS,
                                     result=stage.function(plan.plan_uri, self._runner, storage_options))
            except Exception as exc:  # noqa: BLE001 - the operator reports it with the package's reason first
                report, cause = StageReport.failed(exc), exc
            self._leave(submission, store, report)
            return StageEnd(failed=cause is not None, cause=cause)

        return drive

    def on_kill(self) -> None:
        """Stops the stage's tasks before their next one (each then fails as cancelled)."""
        if self._runner is not None:
            self._runner.cancel(self._job_id)


class ConnectBackend(ConnectStageBackend):
    """The Connect stage backend of an Airflow Spark connection: the server's URL is the connection's
    (``SparkConnectHook``), looked up when the stage first needs it; the session ships this package's zip."""

    @cached_property
    def hook(self) -> SparkConnectHook:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return SparkConnectHook(self.settings.conn_id)

    @property
    def url(self) -> str:
        if self._url is None:
            self._url = self.hook.get_connection_url()
        return self._url

    def _server(self) -> str:
        return f" (connection '{self.settings.conn_id}')"

    @property
    def package(self) -> str:
        """The zip of the installed package (built once per version of the sources)."""
        if self._package is None:
            self._package = package_zip()
        return self._package


class SparkSubmitBackend(SparkBackend):
    """Submits a stage's program with spark-submit; the program leaves its report beside the plan."""

    def __init__(self, settings: SparkSettings, log: Any) -> None:
        super().__init__(settings, log)
        self._hook: GenevaSparkSubmitHook | None = None

    def _start(self, stage: SparkStage, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any,
               submission: StageSubmission) -> Callable[[], StageEnd]:
        self._hook = hook = self.make_hook(stage, plan, storage_options, submission.result_key)
        self.log.info("Submitting the %s stage of plan %s: %s", stage.name, plan.job_id, plan.describe())

        from airflow.sdk.exceptions import AirflowException

        def drive() -> StageEnd:
            try:
                hook.submit(app_path(stage.program))
            except AirflowException:  # the provider's generic "Cannot execute: spark-submit ...":
                return StageEnd(failed=True)  # the report (or, without one, the output's tail) says why
            return StageEnd()

        return drive

    def _output_tail(self) -> str:
        return self._hook.output_tail if self._hook is not None else ""

    def make_hook(self, stage: SparkStage, plan: PlanSummary, storage_options: dict[str, str] | None,
                  result_key: str) -> GenevaSparkSubmitHook:
        """The hook that submits ``stage``'s program: the plan, the storage options (never on its command line)."""
        from geneva_provider.hooks.spark_submit import GenevaSparkSubmitHook

        settings = self.settings
        # The faulthandler makes a UDF's native crash (a segfault) name its fault and frame in the stage's error.
        # The Spark connection's spark_conf extra goes between these defaults and the operator's conf.
        defaults = {"spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
                    "spark.python.worker.faulthandler.enabled": "true"}
        env = {**settings.env_vars}
        binary = settings.spark_binary or _spark_submit_binary(env)
        py_files = settings.py_files
        if settings.ship_package:
            py_files = ",".join(p for p in (py_files, package_zip()) if p)
        return GenevaSparkSubmitHook(
            storage_options=storage_options, cluster_credentials=settings.cluster_credentials,
            submitter=settings.submitter, conn_id=settings.conn_id, conf=dict(settings.conf), conf_defaults=defaults,
            py_files=py_files, env_vars=env,
            spark_binary=binary, name=f"geneva-{stage.name}-{plan.table}-{plan.column or plan.kind}",
            application_args=["--plan-uri", plan.plan_uri, "--result-key", result_key])

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


def _spark_submit_binary(env: dict[str, str]) -> str:
    """``spark-submit`` from PATH, else the one beside this interpreter (pip's pyspark)."""
    if shutil.which("spark-submit"):
        return "spark-submit"
    local = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    if os.path.exists(local):
        import pyspark

        env.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
        env.setdefault("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")
        return local
    return "spark-submit"
