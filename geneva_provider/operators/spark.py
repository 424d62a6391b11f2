"""Operators that run the Spark stages of a plan: over Spark Connect, or with ``spark-submit``.

The Spark connection decides how and where.  A ``spark_connect`` connection (the Spark provider's
``SparkConnectHook``) runs the stage in the Airflow worker as a client of a long-lived Spark
Connect server: no JVM starts per task, the package travels as session artifacts.  A ``spark``
connection submits the stage's program with ``SparkSubmitHook`` (``local[*]``, a standalone
master, YARN, Kubernetes), adding the interpreter for the Python workers, the plan reference and
the storage options in the environment (never on the command line).  Either way the stage's
result becomes the XCom and a failure says the package's reason first.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.hooks.errors import fails_without_retry, no_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.spark_apps import app_path
from geneva_provider.spark_apps._runner import STORAGE_OPTIONS_ENV

PROGRESS_SECONDS = 10.0
SPARK_CONNECT_CONN_TYPE = "spark_connect"  # the Spark provider's SparkConnectHook connection type

if TYPE_CHECKING:
    from geneva_provider.core.models import PlanSummary


class _GenevaSparkStageOperator(BaseOperator):
    """Runs one Spark stage of a plan with spark-submit and returns the stage's JSON result.

    ``ship_package=True`` adds a zip of this package to ``py_files``, for clusters whose Python
    lacks it (pylance, pyarrow and cloudpickle must still be installed there).
    """

    stage: str = ""
    stage_function: str = ""  # the function of geneva_provider.stages that runs the stage over Spark Connect
    keeps_session: bool = False  # over Spark Connect: leave the session open for the job's next Spark stage
    template_fields: Sequence[str] = ("plan", "conf", "py_files", "env_vars")
    ui_color = "#fcefe3"

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ship_package = ship_package
        self.cluster_credentials = cluster_credentials
        self.plan = plan
        self.spark_conn_id = spark_conn_id
        self.lance_conn_id = lance_conn_id
        self.conf = conf or {}
        self.py_files = py_files
        self.env_vars = env_vars or {}
        self.spark_binary = spark_binary
        self._hook: Any = None
        self._session: Any = None  # the Spark Connect client session while a stage runs over Connect

    def nothing_to_do(self, plan: PlanSummary) -> bool:
        return plan.nothing_to_do

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk import BaseHook

        from geneva_provider.core.checkpoint import open_store, split_key_uri
        from geneva_provider.core.models import PlanSummary

        plan = PlanSummary.from_xcom(self.plan)
        if self.nothing_to_do(plan):
            raise AirflowSkipException(f"plan {plan.job_id} has nothing for the {self.stage} stage to do")
        storage_options = LanceHook(self.lance_conn_id).storage_options
        store = open_store(split_key_uri(plan.plan_uri)[0], storage_options)
        if BaseHook.get_connection(self.spark_conn_id).conn_type == SPARK_CONNECT_CONN_TYPE:
            return self._run_over_connect(plan, storage_options, store)
        return self._run_with_spark_submit(plan, storage_options, store)

    def _run_over_connect(self, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any
                          ) -> dict[str, Any]:
        """Runs the stage in this worker as a client of the connection's Spark Connect server.

        No JVM starts here: a client session (with this package and ``py_files`` shipped as
        artifacts, versions checked) drives the server's executors, and the stage's own code
        commits from this process exactly as a spark-submit driver would.
        """
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from geneva_provider import stages
        from geneva_provider.core.checkpoint import split_key_uri
        from geneva_provider.core.models import StageReport
        from geneva_provider.pipeline.connect import close_session, lost_server, unreachable

        url = SparkConnectHook(self.spark_conn_id).get_connection_url()
        self.log.info("Running the %s stage of plan %s over Spark Connect (connection '%s'): %s",
                      self.stage, plan.job_id, self.spark_conn_id, plan.describe())
        keep = False
        try:
            self._session = session = self._job_session(url, store, split_key_uri(plan.plan_uri)[1])
            with ProgressLogger(store, plan.job_id, self.stage, self.log, note=lambda: unreachable(session, url)):
                result = getattr(stages, self.stage_function)(plan.plan_uri, session, storage_options)
            keep = self.keeps_session
        except Exception as exc:  # reported with the package's reason first
            lost = lost_server(self._session, url, exc) if self._session is not None else None
            raise self._failure(plan.job_id, StageReport.failed(lost or exc)) from exc
        finally:
            if self._session is not None:
                close_session(self._session, keep=keep)
                self._session = None
        return StageReport(status="success", result=result).to_xcom()

    def _job_session(self, url: str, store: Any, plan_key: str) -> Any:
        """The job's Spark Connect session: the one an earlier stage (or a dead attempt) left, else a new one.

        Its id is kept beside the plan, so the write+commit stage reuses apply's warm Python
        workers, and a retry finds -- and stops -- whatever the attempt it replaces left running.
        """
        from geneva_provider.core.store_layout import ConnectSessionKey, PlanKey
        from geneva_provider.pipeline.connect import connect_session, resume_session

        pyfiles = [package_zip(), *(p for p in (self.py_files or "").split(",") if p)]
        session_key = ConnectSessionKey(PlanKey.of(plan_key).job_id).key()
        if session_key in store:
            session_id = store.get_text(session_key)
            resumed = resume_session(url, session_id, pyfiles=pyfiles)
            if resumed is not None:
                spark, stopped = resumed
                if stopped:
                    self.log.warning("Stopped the Spark work an earlier attempt of this %s stage left running",
                                     self.stage)
                self.log.info("Reusing the job's Spark Connect session %s", session_id)
                return spark
        session_id = str(uuid.uuid4())
        store.put_text(session_key, session_id)  # before any work: a retry must find it if this process dies
        return connect_session(url, pyfiles=pyfiles, session_id=session_id)

    def _run_with_spark_submit(self, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any
                               ) -> dict[str, Any]:
        """Submits the stage's program with spark-submit; the program leaves its report beside the plan."""
        from geneva_provider.core.checkpoint import split_key_uri
        from geneva_provider.core.models import StageReport
        from geneva_provider.core.store_layout import PlanKey, StageResultKey

        result_key = StageResultKey(PlanKey.of(split_key_uri(plan.plan_uri)[1]).job_id, self.stage).key()
        store.delete(result_key)  # a retry must not read an earlier attempt's result
        self._hook = self.make_hook(plan, storage_options, result_key)
        self.log.info("Submitting the %s stage of plan %s: %s", self.stage, plan.job_id, plan.describe())
        submit_error: Exception | None = None
        with ProgressLogger(store, plan.job_id, self.stage, self.log):
            try:
                self._hook.submit(app_path(self.stage))
            except AirflowException as exc:  # the provider's generic "Cannot execute: spark-submit ..."
                submit_error = exc
        report = store.get_model(result_key, StageReport) if result_key in store else None
        if report is not None and report.status == "success" and submit_error is None:
            return report.to_xcom()
        raise self._failure(plan.job_id, report)

    def make_hook(self, plan: PlanSummary, storage_options: dict[str, str] | None, result_key: str) -> Any:
        """The ``SparkSubmitHook`` that runs the stage: the package's program, the plan, the storage options.

        Storage options travel in the spark-submit process's environment, never on its command line.
        On YARN and Kubernetes (and standalone cluster mode) the Spark provider can only pass
        environment variables as ``--conf`` arguments, so there they are refused unless
        ``cluster_credentials=True`` says the cluster reaches the tables with its own credentials.
        """
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        # The faulthandler makes a UDF's native crash (a segfault) name its fault and frame in the stage's error.
        conf = {"spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
                "spark.python.worker.faulthandler.enabled": "true", **self.conf}
        spark_conn = SparkSubmitHook.get_connection(self.spark_conn_id)
        master = f"{spark_conn.host}:{spark_conn.port}" if spark_conn.port else str(spark_conn.host or "")
        deploy_mode = (spark_conn.extra_dejson or {}).get("deploy-mode")
        env_on_command_line = "yarn" in master or "k8s" in master or (
            master.startswith("spark://") and deploy_mode == "cluster")
        env = {**self.env_vars}
        if storage_options and not (env_on_command_line and self.cluster_credentials):
            if env_on_command_line:
                raise InvalidArgumentError(
                    f"{type(self).__name__} '{self.task_id}': the Spark connection '{self.spark_conn_id}' "
                    f"(master {master}, deploy mode {deploy_mode}) would put the lance connection's storage options "
                    "on the spark-submit command line; give the cluster its own credentials (instance roles, "
                    "spark-defaults) and set cluster_credentials=True, or use client mode / a local master")
            env[STORAGE_OPTIONS_ENV] = json.dumps(storage_options)
        if master.startswith("local") and "SPARK_LOCAL_IP" not in env:
            env["SPARK_LOCAL_IP"] = "127.0.0.1"  # local Spark listens on loopback only
        binary = self.spark_binary or _spark_submit_binary(env)
        py_files = self.py_files
        if self.ship_package:
            py_files = ",".join(p for p in (py_files, package_zip()) if p)
        return SparkSubmitHook(
            conn_id=self.spark_conn_id, conf=conf, py_files=py_files, env_vars=env or None,
            spark_binary=binary, name=f"geneva-{self.stage}-{plan.table}-{plan.column or plan.kind}",
            application_args=["--plan-uri", plan.plan_uri, "--result-key", result_key])

    def _failure(self, job_id: str, report: Any) -> Exception:
        """The stage's failure with the package's reason first, then the last lines Spark printed.

        A deterministic failure (bad input, a UDF bug) fails the task for good; others may retry.
        """
        from geneva_provider.core import errors

        reason = report.error if report is not None and report.error else "it wrote no report (see Spark's output)"
        # The provider keeps (and masks) the last lines spark-submit printed.
        tail = getattr(self._hook, "_submit_log_tail", "")
        message = f"the {self.stage} stage of plan {job_id} failed: {reason}{tail}"
        cls = getattr(errors, report.error_type or "", None) if report is not None else None
        if isinstance(cls, type) and issubclass(cls, errors.GenevaError):  # the package's error, as itself
            error = cls(message)
            error.retryable = report.retryable
            return error if report.retryable else no_retry(error)
        return AirflowException(message)

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
        if self._session is not None:  # stop the server's work for this session, then release it
            from geneva_provider.pipeline.connect import close_session

            close_session(self._session, interrupt=True)


class ProgressLogger:
    """Logs a running job's progress from its record at a steady cadence: rows, rows/s, not Spark task counts.

    ``note`` says what is wrong while the record cannot show it (a Spark Connect server the task cannot
    reach): the line then carries it, as a warning, instead of looking healthy.
    """

    def __init__(self, store: Any, job_id: str, stage: str, log: Any, seconds: float = PROGRESS_SECONDS,
                 note: Callable[[], str | None] | None = None) -> None:
        self.store, self.job_id, self.stage, self.log, self.seconds = store, job_id, stage, log, seconds
        self.note = note
        self._t0 = time.monotonic()
        self._first: int | None = None  # rows done when the stage began (a retry resumes), read on entry
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"geneva-progress-{job_id}")

    def __enter__(self) -> ProgressLogger:
        from geneva_provider.pipeline.job_records import read_record

        record = read_record(self.store, self.job_id)
        self._first = self._done(record) if record is not None else 0  # the rate counts this stage's rows only
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._log()

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            self._log()

    def _log(self) -> None:
        from geneva_provider.pipeline.job_records import read_record

        record = read_record(self.store, self.job_id)
        if record is None:
            return
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = (self._done(record) - (self._first or 0)) / elapsed
        note = self.note() if self.note is not None else None
        status = f"{record.status}, but {note}" if note else record.status
        say = self.log.warning if note else self.log.info
        if record.kind == "compaction":  # a rewrite: no checkpoints, its rows land at its one commit
            say("%s %s: %s; %d of %d rows rewritten and committed (%.0f rows/s)", self.stage,
                self.job_id, status, record.rows_committed, record.rows_planned, rate)
            return
        say("%s %s: %s; %d of %d rows checkpointed, %d ready to commit, %d committed (%.0f rows/s)",
            self.stage, self.job_id, status, record.rows_checkpointed, record.rows_planned,
            record.rows_ready, record.rows_committed, rate)

    def _done(self, record: Any) -> int:
        """The rows this stage moves forward: checkpointed by apply, committed by the others."""
        return record.rows_checkpointed if self.stage == "apply" else record.rows_committed


def package_zip() -> str:
    """A zip of the installed ``geneva_provider`` (pure Python) for ``--py-files``, built once per version."""
    import tempfile
    import zipfile
    from pathlib import Path

    import geneva_provider

    target = Path(tempfile.gettempdir()) / f"geneva_provider-{geneva_provider.__version__}-{os.getuid()}.zip"
    package = Path(geneva_provider.__file__).parent
    apps = Path(app_path("apply")).parent  # packaged inside geneva_provider, or spark_apps/ in a source tree
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package.rglob("*.py")):
            if apps not in path.parents:
                zf.write(path, f"geneva_provider/{path.relative_to(package)}")
        for path in sorted(apps.glob("*.py")):
            zf.write(path, f"geneva_provider/spark_apps/{path.name}")
    os.replace(tmp, target)
    return str(target)


class GenevaSparkApplyOperator(_GenevaSparkStageOperator):
    """Apply stage on Spark: computes every planned range not yet checkpointed (a retry resumes)."""

    stage = "apply"
    stage_function = "run_apply"
    keeps_session = True  # write+commit reuses its warm Python workers

    def nothing_to_do(self, plan: PlanSummary) -> bool:
        return plan.nothing_to_do or not plan.tasks


class GenevaSparkWriteCommitOperator(_GenevaSparkStageOperator):
    """Write+commit stage on Spark: one column file per fragment, DataReplacement commits."""

    stage = "write_commit"
    stage_function = "run_write_commit"


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
