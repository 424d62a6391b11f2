"""A whole job in one process: plan -> apply -> write+commit -> verify, with one SparkSession.

``Table.backfill`` and ``View.refresh`` (the notebook API and the test harness) run the very
same stage functions the Airflow operators and ``spark_apps`` call one per task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from geneva_provider.core.catalog import TableResolver
from geneva_provider.core.checkpoint import CheckpointStore
from geneva_provider.core.models import BackfillResult, PlanSummary
from geneva_provider.core.options import BackfillOptions, RefreshOptions
from geneva_provider.core.refs import TableRef
from geneva_provider.pipeline.apply import run_apply
from geneva_provider.pipeline.plan_backfill import plan_backfill
from geneva_provider.pipeline.plan_refresh import plan_refresh
from geneva_provider.pipeline.runner import default_parallelism, local_session
from geneva_provider.pipeline.verify import verify
from geneva_provider.pipeline.write import run_write_commit

log = logging.getLogger(__name__)


def backfill(table: TableRef, column: str, options: BackfillOptions | None = None, *, spark: Any = None,
             store: CheckpointStore | None = None) -> BackfillResult:
    """Runs every stage of a backfill of ``column`` in this process, on ``spark`` or a local session."""
    return run_job(table, column, lambda parallelism: plan_backfill(
        table, column, options, store=store, parallelism=parallelism), spark)


def refresh(view: TableRef, options: RefreshOptions | None = None, *, resolve: TableResolver | None = None,
            spark: Any = None, store: CheckpointStore | None = None) -> BackfillResult:
    """Refreshes a materialized view in this process: new source rows, then every stale fragment."""
    return run_job(view, "*", lambda parallelism: plan_refresh(
        view, options, resolve=resolve, store=store, parallelism=parallelism), spark)


def run_job(table: TableRef, column: str, plan: Callable[[int | None], PlanSummary], spark: Any) -> BackfillResult:
    """plan -> apply -> write+commit -> verify with one SparkSession (started only if there is work)."""
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    # Plan first: bad input fails before any JVM starts.
    summary = plan(default_parallelism(spark) if spark is not None else None)
    seconds["plan"] = time.perf_counter() - t0
    so = table.storage_options
    if summary.nothing_to_do:
        log.info("job %s on table '%s': up to date", summary.job_id, table.name)
        verify(summary.plan_uri, so)
        seconds["total"] = time.perf_counter() - t0
        return BackfillResult(job_id=summary.job_id, column=column, rows_computed=0, rows_reused=summary.rows_reused,
                              fragments_committed=0, fragments_reused=0, version=table.dataset().version,
                              seconds=_rounded(seconds))
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # a notebook's session is used, never stopped
    owns_session = spark is None
    if owns_session:
        t = time.perf_counter()
        spark = local_session(app_name=f"geneva-{table.name}-{column}")
        seconds["session"] = time.perf_counter() - t
    try:
        t = time.perf_counter()
        applied = run_apply(summary.plan_uri, spark, so)
        seconds["apply"] = time.perf_counter() - t
        t = time.perf_counter()
        written = run_write_commit(summary.plan_uri, spark, so)
        seconds["write_commit"] = time.perf_counter() - t
    finally:
        if owns_session:
            spark.stop()
    t = time.perf_counter()
    verify(summary.plan_uri, so)
    seconds["verify"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    result = BackfillResult(
        job_id=summary.job_id, column=column, rows_computed=applied.rows_computed, rows_reused=applied.rows_reused,
        fragments_committed=written.fragments_committed, fragments_reused=summary.fragments_reused,
        version=written.version, fragments_vanished=written.fragments_vanished, seconds=_rounded(seconds))
    log.info("job %s on table '%s' (%s): %d rows computed, %d reused, %d fragments committed, version %d",
             result.job_id, table.name, column, result.rows_computed, result.rows_reused,
             result.fragments_committed, result.version)
    return result


def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in seconds.items()}
