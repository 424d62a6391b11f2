"""The shared main() of the spark-submit programs: arguments, plan check, session, stage report, exit code."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

STORAGE_OPTIONS_ENV = "GENEVA_STORAGE_OPTIONS"


def run_stage(name: str, argv: list[str] | None = None) -> int:
    """Runs the Spark stage ``name`` (a ``Stage``) of the stage registry on a plan and reports its result.

    The registry entry gives the function, called as ``function(plan_uri, spark, storage_options)``,
    and the kinds of plan it runs.  Storage options come from the ``GENEVA_STORAGE_OPTIONS``
    environment variable (JSON) so that secrets never appear on a command line.  Bad arguments
    and a plan that is missing, unreadable or of another kind than the entry's fail before the
    Spark session starts.  Exit code 0 on success; on failure the reason goes to stderr (and to
    the report) and the exit code is 1 (2 for bad arguments, as argparse does).
    """
    parser = argparse.ArgumentParser(prog=f"geneva-{name}", description=f"Run the geneva {name} stage of a plan")
    parser.add_argument("--plan-uri", required=True, help="the plan reference returned by the plan stage")
    parser.add_argument("--result-file", help="a local file to write the stage's JSON report to")
    parser.add_argument("--result-key", help="a key to store the JSON report under, beside the plan")
    args = parser.parse_args(argv)
    if not args.result_file and not args.result_key:
        parser.error("one of --result-file or --result-key is required: the report is how the caller learns "
                     "what the stage did")
    if args.result_file:
        _check_result_file(parser, args.result_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from geneva_provider.core.contracts.kinds import EventStatus
    from geneva_provider.core.contracts.models import StageReport
    from geneva_provider.core.errors import GenevaError
    from geneva_provider.pipeline.stages.registry import spark_stage

    entry = spark_stage(name)
    spark = None
    options = None
    try:
        options = _storage_options()
        _check_plan(args.plan_uri, options, name, entry.plan_kinds)
        spark = _session()
        report = StageReport(status=EventStatus.SUCCESS, result=entry.function(args.plan_uri, spark, options))
        code = 0
    except Exception as exc:  # noqa: BLE001 - every failure becomes an exit code and a message
        if not isinstance(exc, GenevaError):  # the package's own errors say what is wrong; others need the trace
            traceback.print_exc(file=sys.stderr)
        report = StageReport.failed(exc)
        print(f"geneva {name} failed: {report.error.describe() if report.error else name}", file=sys.stderr)
        code = 1
    finally:
        if spark is not None:
            spark.stop()
    if args.result_file:
        try:
            with open(args.result_file, "w") as f:
                f.write(report.model_dump_json())
        except OSError as exc:
            print(f"could not write the report to --result-file {args.result_file}: {exc}", file=sys.stderr)
            code = code or 1
    if args.result_key:
        _store_report(args.plan_uri, args.result_key, report, options)
    return code


def _check_result_file(parser: argparse.ArgumentParser, path: str) -> None:
    """Refuses a --result-file that cannot be written, before anything runs (the report would be lost)."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        parser.error(f"--result-file {path}: is a directory")
    if not os.path.isdir(directory):
        parser.error(f"--result-file {path}: no such directory {directory}")
    if not os.access(directory, os.W_OK):
        parser.error(f"--result-file {path}: directory {directory} is not writable")


def _storage_options() -> dict[str, str] | None:
    from geneva_provider.core.errors import InvalidArgumentError

    try:
        options = json.loads(os.environ.get(STORAGE_OPTIONS_ENV) or "null")
    except json.JSONDecodeError:  # the message quotes no part of the value: it holds secrets
        raise InvalidArgumentError(f"{STORAGE_OPTIONS_ENV} is not a JSON object") from None
    if options is not None and not isinstance(options, dict):
        raise InvalidArgumentError(f"{STORAGE_OPTIONS_ENV} must be a JSON object")
    return options


def _check_plan(plan_uri: str, options: dict[str, str] | None, name: str, kinds: Sequence[str]) -> None:
    """Reads the plan before Spark starts: a bad reference or a missing plan fails in a second, not after the JVM."""
    from geneva_provider.core.errors import InvalidArgumentError
    from geneva_provider.pipeline.stages.planning import open_plan

    plan, _ = open_plan(plan_uri, options)
    if plan.kind not in kinds:
        words = [str(k) for k in kinds]
        runs = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
        raise InvalidArgumentError(f"{plan_uri} is a {plan.kind} plan: the {name} stage runs {runs} plans")


def _session() -> Any:
    from pyspark.sql import SparkSession

    from geneva_provider.pipeline.spark.runner import check_versions, quiet_conf, quiet_py4j

    quiet_py4j()  # its INFO lines would reach the task log through spark-submit's output
    builder = SparkSession.builder  # spark-submit --name (or the file name) names the app
    for key, value in quiet_conf().items():  # an Airflow task's log is no terminal: no progress bars
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        check_versions(spark)
    except BaseException:
        spark.stop()
        raise
    return spark


def _store_report(plan_uri: str, key: str, report: Any, options: dict[str, str] | None) -> None:
    """Stores the report beside the plan, where a cluster-mode driver can write and Airflow can read it."""
    from geneva_provider.core.store.checkpoint import open_store, split_key_uri

    try:
        open_store(split_key_uri(plan_uri)[0], options).put_model(key, report)
    except Exception as exc:  # noqa: BLE001 - the exit code still tells success from failure
        print(f"could not store the report under {key!r}: {exc}", file=sys.stderr)
