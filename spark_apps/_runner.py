"""The shared main() of the spark-submit programs: arguments, session, stage report, exit code."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

STORAGE_OPTIONS_ENV = "GENEVA_STORAGE_OPTIONS"


def run_stage(name: str, stage: Callable[[str, Any, dict[str, str] | None], Any], argv: list[str] | None = None
              ) -> int:
    """Runs ``stage(plan_uri, spark, storage_options)`` and reports its result.

    Storage options come from the ``GENEVA_STORAGE_OPTIONS`` environment variable (JSON) so
    that secrets never appear on a command line.  Exit code 0 on success; on failure the
    reason goes to stderr (and to the report) and the exit code is 1.
    """
    parser = argparse.ArgumentParser(prog=f"geneva-{name}", description=f"Run the geneva {name} stage of a plan")
    parser.add_argument("--plan-uri", required=True, help="the plan reference returned by the plan stage")
    parser.add_argument("--result-file", help="a local file to write the stage's JSON report to")
    parser.add_argument("--result-key", help="a key to store the JSON report under, beside the plan")
    args = parser.parse_args(argv)
    if not args.result_file and not args.result_key:
        parser.error("one of --result-file or --result-key is required: the report is how the caller learns "
                     "what the stage did")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    from geneva_provider.core.models import StageReport
    from geneva_provider.pipeline.runner import check_versions

    spark = None
    options = None
    try:
        options = json.loads(os.environ.get(STORAGE_OPTIONS_ENV) or "null")
        spark = SparkSession.builder.getOrCreate()  # spark-submit --name (or the file name) names the app
        check_versions(spark)
        report = StageReport(status="success", result=stage(args.plan_uri, spark, options))
        code = 0
    except Exception as exc:  # noqa: BLE001 - every failure becomes an exit code and a message
        traceback.print_exc(file=sys.stderr)
        report = StageReport(status="failed", error=f"{type(exc).__name__}: {exc}")
        print(f"geneva {name} failed: {report.error}", file=sys.stderr)
        code = 1
    finally:
        if spark is not None:
            spark.stop()
    if args.result_file:
        with open(args.result_file, "w") as f:
            f.write(report.model_dump_json())
    if args.result_key:
        _store_report(args.plan_uri, args.result_key, report, options)
    return code


def _store_report(plan_uri: str, key: str, report: Any, options: dict[str, str] | None) -> None:
    """Stores the report beside the plan, where a cluster-mode driver can write and Airflow can read it."""
    from geneva_provider.core.checkpoint import open_store, split_key_uri

    try:
        open_store(split_key_uri(plan_uri)[0], options).put_model(key, report)
    except Exception as exc:  # noqa: BLE001 - the exit code still tells success from failure
        print(f"could not store the report under {key!r}: {exc}", file=sys.stderr)
