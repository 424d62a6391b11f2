"""Operators that run the Spark stages of a plan: over Spark Connect, or with ``spark-submit``.

The Spark connection decides how and where: it chooses the backend once
(:mod:`geneva_provider.operators.spark_backends`).  Which stage an operator runs, and what that
stage needs, comes from its entry in the stage registry
(:mod:`geneva_provider.pipeline.stages.registry`).  Either way the stage's result becomes the
XCom and a failure says the package's reason first.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.hooks.errors import fails_without_retry, no_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.spark_backends import SparkBackend, SparkSettings, SparkSubmitBackend, spark_backend
from geneva_provider.pipeline.stages.registry import SparkStage, spark_stage

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import PlanSummary, StageReport
    from geneva_provider.hooks.spark_submit import GenevaSparkSubmitHook


class _GenevaSparkStageOperator(BaseOperator):
    """Runs one Spark stage of a plan (its ``stage``'s registry entry) and returns the stage's JSON result.

    ``ship_package=True`` adds a zip of this package to ``py_files``, for clusters whose Python
    lacks it (pylance, pyarrow and cloudpickle must still be installed there).
    """

    stage: Stage  # the Spark stage this operator runs: everything else comes from its registry entry
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

    @cached_property
    def backend(self) -> SparkBackend:
        """How the stage runs, chosen from the Spark connection (when the task runs: after rendering)."""
        return spark_backend(self.spark_settings(), self.log)

    @property
    def entry(self) -> SparkStage:
        """The stage's entry in the stage registry."""
        return spark_stage(self.stage)

    @property
    def keeps_session(self) -> bool:
        """Over Spark Connect: whether the session stays open for the job's next Spark stage."""
        return self.entry.keeps_session

    def nothing_to_do(self, plan: PlanSummary) -> bool:
        return plan.nothing_to_do

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.core.contracts.models import PlanSummary
        from geneva_provider.core.store.checkpoint import open_store, split_key_uri

        plan = PlanSummary.from_xcom(self.plan)
        if self.nothing_to_do(plan):
            raise AirflowSkipException(f"plan {plan.job_id} has nothing for the {self.stage} stage to do")
        storage_options = LanceHook(self.lance_conn_id).storage_options
        store = open_store(split_key_uri(plan.plan_uri)[0], storage_options)
        run = self.backend.run(self.entry, plan, storage_options, store)  # submit, poll until it ends, result
        if run.succeeded and run.report is not None:
            return run.report.to_xcom()
        raise self._failure(plan.job_id, run.report, run.output_tail) from run.cause

    def spark_settings(self) -> SparkSettings:
        """The operator's (rendered) Spark arguments, as the backends take them."""
        return SparkSettings(conn_id=self.spark_conn_id, conf=self.conf, py_files=self.py_files,
                             env_vars=self.env_vars, spark_binary=self.spark_binary, ship_package=self.ship_package,
                             cluster_credentials=self.cluster_credentials,
                             submitter=f"{type(self).__name__} '{self.task_id}'")

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

    def on_kill(self) -> None:
        if "backend" in self.__dict__:  # chosen: the stage may be running
            self.backend.on_kill()


class GenevaSparkApplyOperator(_GenevaSparkStageOperator):
    """Apply stage on Spark: computes every planned range not yet checkpointed (a retry resumes)."""

    stage = Stage.APPLY

    def nothing_to_do(self, plan: PlanSummary) -> bool:
        return plan.nothing_to_do or not plan.tasks


class GenevaSparkWriteCommitOperator(_GenevaSparkStageOperator):
    """Write+commit stage on Spark: one column file per fragment, DataReplacement commits."""

    stage = Stage.WRITE_COMMIT

