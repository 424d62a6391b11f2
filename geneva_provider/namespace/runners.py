"""Where a :class:`GenevaNamespace` runs the jobs it accepts (its ``job_runner`` property).

``in_process``: the front door's ``submit`` in a background thread of this process; ``spark``: the same on a Spark
session the namespace opens (``spark.remote`` for Spark Connect, else ``spark.master``); ``airflow``: a run of the
``geneva_namespace_jobs`` DAG triggered through Airflow's REST API with the request as its conf, the job id being
the DAG run's id.  Each answers ``submit(operation) -> job id`` and ``describe(job id) -> JobRecord | None`` (None:
not a job it knows, look in the tables' records).
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from geneva_provider.core.errors import InvalidArgumentError, JobNotFoundError

if TYPE_CHECKING:
    from geneva_provider.core.catalog import Catalog
    from geneva_provider.core.contracts.models import JobRecord
    from geneva_provider.core.contracts.operations import Operation
    from geneva_provider.namespace.config import AirflowRunnerConfig, NamespaceConfig
    from geneva_provider.operations import JobHandle


class JobRunner(Protocol):
    def submit(self, operation: Operation, catalog: Catalog | None = None) -> str: ...

    def describe(self, job_id: str) -> JobRecord | None: ...


class InProcessRunner:
    """Jobs in background threads of this process (on ``spark``, or the package's local session); their handles
    answer for a job whose record is not in its table's store yet (or, having had nothing to do, never is)."""

    def __init__(self, catalog: Catalog, spark: Any = None) -> None:
        self.catalog, self.spark = catalog, spark
        self._handles: dict[str, JobHandle] = {}

    def submit(self, operation: Operation, catalog: Catalog | None = None) -> str:
        """Starts the job; its table is in ``catalog`` (a child namespace's), else in this runner's."""
        from geneva_provider.operations.dispatch import prepare, start

        handle = start(prepare(operation, catalog or self.catalog, spark=self.spark))
        job_id = handle.wait_for_id()
        self._handles[job_id] = handle
        return job_id

    def describe(self, job_id: str) -> JobRecord | None:
        handle = self._handles.get(job_id)
        return handle.status() if handle is not None else None


def spark_session(settings: dict[str, str]) -> Any:
    """The session of the ``spark.*`` properties: ``remote`` (Spark Connect) or ``master``, the rest as Spark
    configuration (``spark.conf.<key>``)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if "remote" in settings:
        builder = builder.remote(settings["remote"])
    elif "master" in settings:
        builder = builder.master(settings["master"])
    else:
        raise InvalidArgumentError("GenevaNamespace: job_runner 'spark' needs spark.remote (a Spark Connect URL) or "
                                   "spark.master")
    for key, value in settings.items():
        if key.startswith("conf."):
            builder = builder.config(key[len("conf."):], value)
    return builder.getOrCreate()


class AirflowRunner:
    """Each job a run of the namespace's DAG, triggered through Airflow's REST API (``/api/v2``)."""

    def __init__(self, config: AirflowRunnerConfig, root: str) -> None:
        self.config, self.root = config, root
        self._token: str | None = config.token.get_secret_value() if config.token else None

    def submit(self, operation: Operation, catalog: Catalog | None = None) -> str:
        """Triggers the DAG run of ``operation``; its table, in the root or a child namespace (``catalog``, already
        found there), is named by the request's ``id``, which the run's plan task resolves the same way."""
        from geneva_provider.core.contracts.operations import RemoteJob, request

        job = request(RemoteJob, request=operation, db=self.root, db_conn_id=self.config.db_conn_id)
        run_id = f"geneva_{operation.op}_{uuid.uuid4().hex[:12]}"
        self._call("POST", f"dags/{self.config.dag_id}/dagRuns",
                   {"dag_run_id": run_id, "logical_date": None, "conf": job.model_dump(mode="json")})
        return run_id

    def describe(self, job_id: str) -> JobRecord | None:
        from geneva_provider.core.contracts.kinds import JobKind, Stage
        from geneva_provider.core.contracts.models import JobRecord, JobStatus
        from geneva_provider.core.contracts.operations import RemoteJob

        try:
            run = self._call("GET", f"dags/{self.config.dag_id}/dagRuns/{urllib.parse.quote(job_id, safe='')}")
        except JobNotFoundError:
            return None
        state = str(run.get("state") or "queued")
        status = {"success": JobStatus.DONE, "failed": JobStatus.FAILED, "running": JobStatus.RUNNING}.get(
            state, JobStatus.PENDING)
        try:
            request = RemoteJob.of(run.get("conf"), f"DAG run {job_id!r}").request
        except InvalidArgumentError:  # a run of that DAG not triggered with a job's conf: no job of the namespace
            return None
        now = dt.datetime.now(dt.UTC).isoformat()
        return JobRecord(job_id=job_id, kind=JobKind(_KINDS[request.op]), table=request.table,
                         column=getattr(request, "column", None), status=status,
                         stage="done" if status in (JobStatus.DONE, JobStatus.FAILED) else Stage.PLAN,
                         created_at=run.get("queued_at") or now, updated_at=now, finished_at=run.get("end_date"),
                         airflow_run_id=job_id)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.config.url.rstrip('/')}/api/v2/{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {self._bearer()}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return dict(json.loads(response.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method == "GET":
                run_id = path.rsplit("/", 1)[-1]
                raise JobNotFoundError(f"no DAG run {run_id!r} of DAG '{self.config.dag_id}'") from None
            raise InvalidArgumentError(f"Airflow API {method} {path} answered {exc.code}: "
                                       f"{exc.read()[:500].decode(errors='replace')}") from None
        except urllib.error.URLError as exc:
            raise InvalidArgumentError(f"Airflow API at {self.config.url} cannot be reached: {exc.reason}") from None

    def _bearer(self) -> str:
        """The token given, or one the API's ``/auth/token`` issues for the user and password."""
        if self._token is None:
            if not self.config.username or self.config.password is None:
                raise InvalidArgumentError("GenevaNamespace: job_runner 'airflow' needs airflow.token or "
                                           "airflow.username + airflow.password")
            body = json.dumps({"username": self.config.username,
                               "password": self.config.password.get_secret_value()}).encode()
            request = urllib.request.Request(f"{self.config.url.rstrip('/')}/auth/token", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    self._token = str(json.loads(response.read())["access_token"])
            except (urllib.error.URLError, KeyError, ValueError) as exc:
                raise InvalidArgumentError(f"Airflow API at {self.config.url}: no token for user "
                                           f"{self.config.username!r} ({type(exc).__name__})") from None
        return self._token


_KINDS = {"backfill_column": "backfill", "refresh_materialized_view": "refresh", "create_index": "index"}


def runner_for(config: NamespaceConfig, catalog: Catalog) -> JobRunner:
    if config.job_runner == "airflow":
        assert config.airflow is not None  # NamespaceConfig.of checked it
        return AirflowRunner(config.airflow, config.root)
    if config.job_runner == "spark":
        return InProcessRunner(catalog, spark_session(config.spark))
    return InProcessRunner(catalog)
