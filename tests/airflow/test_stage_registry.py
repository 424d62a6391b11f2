"""The stage registry and the Spark backends: what each Spark stage is, derived once; how it runs, chosen once.

The part that needs Airflow's DB, its programs or Spark; the rest is in tests/unit/test_stage_registry.py.
"""

from __future__ import annotations

import sys

import pytest
from airflow.sdk.exceptions import AirflowException

from geneva_provider.hooks.spark_submit import TAIL_LINES, GenevaSparkSubmitHook
from tests.conftest import FAKE_SECRET


def test_the_hook_keeps_the_masked_tail_of_what_spark_submit_printed(monkeypatch, tmp_path, spark_submit):
    """A failing program's last lines reach the stage's failure message, secrets masked; a JVM exception's whole
    trace is kept, not only its last lines."""
    program = tmp_path / "fails.py"
    program.write_text(
        "import sys\n"
        "for i in range(40):\n    print(f'banner line {i}')\n"
        "print('Exception in thread \"main\" java.lang.IllegalStateException: boom')\n"
        "for i in range(30):\n    print(f'\\tat frame {i}')\n"
        f"print('connecting with password={FAKE_SECRET}')\n"
        "sys.stdout.flush()\nsys.exit(3)\n")
    env = {}
    from geneva_provider.operators.spark_backends import _spark_submit_binary

    hook = GenevaSparkSubmitHook(conn_id="spark_default", env_vars=env, spark_binary=_spark_submit_binary(env),
                                 conf={"spark.ui.enabled": "false", "spark.pyspark.python": sys.executable,
                                       "spark.pyspark.driver.python": sys.executable})
    assert hook.output_tail == ""
    assert hook.environment["SPARK_LOCAL_IP"] == "127.0.0.1"  # a local master: loopback
    with pytest.raises(AirflowException, match="Error code is: 3"):
        hook.submit(str(program))
    tail = hook.output_tail
    assert tail.startswith("\nLast spark-submit output:\n")
    assert FAKE_SECRET not in tail and "password=******" in tail
    assert "banner line 39" not in tail and 'Exception in thread "main"' in tail  # the noise before it is dropped
    assert all(f"at frame {i}" in tail for i in range(30)) and len(tail.splitlines()) > TAIL_LINES


def test_a_users_own_log4j_configuration_wins_over_the_packaged_quiet_one(tmp_path, spark_submit, capfd):
    """The package keeps Spark's INFO out of a client-mode stage's task log; a user's own driver log4j2 configuration
    (here in the operator's conf, ``spark.driver.extraJavaOptions``) still rules what the driver logs."""
    mine = tmp_path / "log4j2.properties"
    mine.write_text("rootLogger.level = info\nrootLogger.appenderRef.stdout.ref = console\n"
                    "appender.console.type = Console\nappender.console.name = console\n"
                    "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                    "appender.console.layout.pattern = MINE %p %c{1}: %m%n\n")
    program = tmp_path / "starts_spark.py"
    program.write_text("from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().stop()\n")
    env: dict[str, str] = {}
    from geneva_provider.operators.spark_backends import _spark_submit_binary

    hook = GenevaSparkSubmitHook(conn_id="spark_default", env_vars=env, spark_binary=_spark_submit_binary(env),
                                 conf={"spark.ui.enabled": "false", "spark.pyspark.python": sys.executable,
                                       "spark.pyspark.driver.python": sys.executable,
                                       "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile={mine.as_uri()}"})
    hook.submit(str(program))
    logs = "".join(capfd.readouterr())
    assert "MINE INFO SparkContext: Running Spark version" in logs
