"""The spark-submit hook of the geneva stage programs: the Spark provider's ``SparkSubmitHook``, and what a stage adds.

The provider resolves the Spark connection (master, deploy mode, binary, Kerberos ...), builds
and masks the command line and kills what it started; this subclass only adds the stage's
environment -- the storage options, never on a command line; the package's quiet log4j2
configuration -- and keeps the last lines spark-submit printed for the stage's failure message.
It hooks into the provider where the provider's own subclass (``SparkPipelinesHook``) does:
``_resolve_connection``, and the per-line ``_process_spark_submit_log``; and after
``_build_spark_submit_command``, where the provider decides which environment spark-submit gets.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.pipeline.spark.jvm_logs import quiet_log_environment
from geneva_provider.spark_apps._runner import STORAGE_OPTIONS_ENV

TAIL_LINES = 20  # what a failure message quotes of spark-submit's output ...
TAIL_LINES_AFTER_EXCEPTION = 500  # ... and, from a JVM exception on, its whole trace
_JVM_EXCEPTION = re.compile(r'Exception in thread "[^"]*"')  # how the JVM's uncaught-exception handler starts


class GenevaSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` for a stage program: storage options in its environment only, its output's tail kept.

    Storage options travel in the spark-submit process's environment.  On YARN and Kubernetes
    (and standalone cluster mode) the provider can only pass environment variables as ``--conf``
    arguments, so there they are refused -- with :class:`InvalidArgumentError`, before anything
    starts -- unless ``cluster_credentials=True`` says the cluster reaches the tables with its
    own credentials (then they are not passed at all).  A local master gets ``SPARK_LOCAL_IP``
    (loopback) unless ``env_vars`` sets it.  ``submitter`` names the task in messages.

    The Spark connection's extras may hold a ``spark_conf`` dict of Spark settings the cluster
    needs for every stage -- GPU discovery (``spark.executor.resource.gpu.amount``,
    ``spark.executor.resource.gpu.discoveryScript``), ``spark.dynamicAllocation.enabled=false`` --
    passed as ``--conf``: over ``conf_defaults`` (the package's own), under ``conf`` (the operator's).

    A driver that runs in the spark-submit process (client mode, a local master) logs with the package's
    quiet configuration (:mod:`~geneva_provider.pipeline.spark.jvm_logs`): every spark-submit output line
    lands in the task log, and Spark's INFO lines would drown the stage's own (two thirds of a stage's log).
    It is named in spark-submit's environment (``LOG4J_CONFIGURATION_FILE``), not in ``spark.driver.extraJavaOptions``,
    so no Java option of the user's (operator, connection, ``spark-defaults.conf``) is replaced, and
    their own ``-Dlog4j.configurationFile`` wins.  Cluster mode keeps Spark's INFO: the driver runs
    elsewhere, and the provider reads the application id / driver pod from spark-submit's INFO lines.
    """

    def __init__(self, *, storage_options: dict[str, str] | None = None, cluster_credentials: bool = False,
                 submitter: str = "a geneva stage", env_vars: dict[str, str] | None = None,
                 conf_defaults: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.conf_defaults = dict(conf_defaults or {})
        self.storage_options = storage_options
        self.cluster_credentials = cluster_credentials
        self.submitter = submitter
        # The provider keeps this very dict as its env_vars: the stage's variables join it once the
        # connection is resolved (in _resolve_connection, which the provider's __init__ calls).
        self.environment: dict[str, str] = dict(env_vars or {})
        self.output_lines: deque[str] = deque(maxlen=TAIL_LINES)
        super().__init__(env_vars=self.environment, **kwargs)

    def _resolve_connection(self) -> dict[str, Any]:
        self._conf = {**self.conf_defaults, **self._connection_spark_conf(), **self._conf}
        connection = super()._resolve_connection()
        self.environment.update(self._stage_environment(connection["master"], connection["deploy_mode"]))
        return connection

    def _connection_spark_conf(self) -> dict[str, str]:
        """The ``spark_conf`` dict of the Spark connection's extras ({} without one, or without the connection)."""
        from airflow.exceptions import AirflowException

        try:
            extra = self.get_connection(self._conn_id).extra_dejson
        except AirflowException:  # no such connection: the provider falls back to its defaults (yarn)
            return {}
        spark_conf = extra.get("spark_conf") or {}
        if isinstance(spark_conf, str):  # the extras' JSON may hold it as a JSON string
            try:
                spark_conf = json.loads(spark_conf)
            except ValueError:
                spark_conf = None
        if not isinstance(spark_conf, dict) or not all(
                isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in spark_conf.items()):
            raise InvalidArgumentError(
                f"{self.submitter}: the Spark connection '{self._conn_id}' has a spark_conf extra that is not a "
                "dict of Spark settings to values (e.g. {\"spark.executor.resource.gpu.amount\": \"1\"})")
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in spark_conf.items()}

    def _stage_environment(self, master: str, deploy_mode: str | None) -> dict[str, str]:
        """What the stage program needs in its environment on ``master``; refuses to put secrets on a command line."""
        env: dict[str, str] = {}
        env_on_command_line = "yarn" in master or "k8s" in master or (
            master.startswith("spark://") and deploy_mode == "cluster")
        if self.storage_options and not (env_on_command_line and self.cluster_credentials):
            if env_on_command_line:
                raise InvalidArgumentError(
                    f"{self.submitter}: the Spark connection '{self._conn_id}' "
                    f"(master {master}, deploy mode {deploy_mode}) would put the lance connection's storage options "
                    "on the spark-submit command line; give the cluster its own credentials (instance roles, "
                    "spark-defaults) and set cluster_credentials=True, or use client mode / a local master")
            env[STORAGE_OPTIONS_ENV] = json.dumps(self.storage_options)
        if master.startswith("local") and "SPARK_LOCAL_IP" not in self.environment:
            env["SPARK_LOCAL_IP"] = "127.0.0.1"  # local Spark listens on loopback only
        return env

    def _build_spark_submit_command(self, application: str) -> list[str]:
        command = super()._build_spark_submit_command(application)
        deploy_mode = self._connection["deploy_mode"] or self._conf.get("spark.submit.deployMode")
        if deploy_mode != "cluster":
            # Into the environment the provider gives spark-submit itself (set once the command is built, so
            # not a --conf of the cluster's, as env_vars become on YARN and Kubernetes).
            self._env = {**(self._env or {}), **quiet_log_environment({**os.environ, **self.environment})}
        return command

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(self._keeping_tail(itr))

    def _keeping_tail(self, lines: Iterator[Any]) -> Iterator[Any]:
        for line in lines:
            text = str(line).strip()
            if self.output_lines.maxlen == TAIL_LINES and _JVM_EXCEPTION.search(text):
                self.output_lines = deque(maxlen=TAIL_LINES_AFTER_EXCEPTION)  # the banner before it is noise
            self.output_lines.append(text)
            yield line

    @property
    def output_tail(self) -> str:
        """The last lines spark-submit printed, masked as the provider masks its command line ("" before any)."""
        if not self.output_lines:
            return ""
        return "\nLast spark-submit output:\n" + "\n".join(self._mask_cmd([line]) for line in self.output_lines)
