"""How a Spark driver JVM the package starts on this machine logs: quietly, unless the user configured it.

Spark's own log4j2 defaults print a banner as every JVM starts ("Using Spark's default log4j
profile", "Setting default log level to "WARN"", "To adjust logging level use sc.setLogLevel",
Hadoop's NativeCodeLoader warning) -- on every local session a notebook or a ``tbl.compact()``
starts, and in every stage's task log.  The package's configuration (:data:`SPARK_LOG_CONFIG`) is
Spark's defaults with the root at WARN and that one harmless Hadoop warning at ERROR: Spark's other
warnings and every error still show.  It is named in log4j2's environment variable, which any
``-Dlog4j.configurationFile`` of the user's (``spark.driver.extraJavaOptions``, ``SPARK_SUBMIT_OPTS``,
``spark-defaults.conf``) wins over, and which a variable the user set is left alone for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

# geneva_provider/spark_log4j2.properties, shipped as package data
SPARK_LOG_CONFIG = Path(__file__).resolve().parents[2] / "spark_log4j2.properties"
LOG_CONFIG_ENV = "LOG4J_CONFIGURATION_FILE"


def quiet_log_environment(environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variable that gives a JVM started with ``environment`` (default: this process's) the quiet configuration;
    {} when the environment names a configuration of its own."""
    named = os.environ if environment is None else environment
    return {} if LOG_CONFIG_ENV in named else {LOG_CONFIG_ENV: SPARK_LOG_CONFIG.as_uri()}


@contextmanager
def quiet_jvm_start() -> Iterator[None]:
    """Within it, a JVM that pyspark launches (it copies ``os.environ`` as it starts one) logs quietly; after it,
    this process's environment is as it was, so other programs it starts are not affected."""
    added = quiet_log_environment()
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
