"""The backfill job: plan -> apply -> write+commit -> verify, in-process or one stage at a time.

``Table.backfill`` runs every stage here with one SparkSession; the Airflow operators and
``spark_apps`` call the same stage functions one per task, handing over only the plan URI.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geneva_provider.apply import run_apply
from geneva_provider.checkpoint import CheckpointStore, fragment_key
from geneva_provider.errors import VerificationError
from geneva_provider.fragments import column_file
from geneva_provider.plan import COMPUTE, DONE, REUSE, BackfillOptions, load_plan, plan_backfill
from geneva_provider.spark import default_parallelism, local_session
from geneva_provider.writer import run_write_commit

if TYPE_CHECKING:
    from geneva_provider.table import Table

log = logging.getLogger(__name__)

__all__ = ["BackfillOptions", "BackfillResult", "backfill", "plan_backfill", "run_apply", "run_write_commit",
           "verify_backfill"]


@dataclass
class BackfillResult:
    """What a backfill did: rows the UDF ran on, rows taken from checkpoints, the new version."""

    job_id: str
    column: str
    rows_computed: int
    rows_reused: int
    fragments_committed: int
    fragments_reused: int
    version: int
    fragments_vanished: list[int] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def verify_backfill(plan_uri: str, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    """Verify stage: every planned fragment's committed column file is the one the job staged."""
    import lance

    plan, store = load_plan(plan_uri, storage_options)
    ds = lance.dataset(plan["table_uri"], storage_options=storage_options)
    live = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    problems, rows_ok, frags_ok = [], 0, 0
    for entry in plan["fragments"]:
        if entry["action"] not in (COMPUTE, REUSE, DONE):
            continue
        fid = entry["id"]
        meta = live.get(fid)
        if meta is None:
            problems.append(f"fragment {fid} ({entry['rows']} rows) no longer exists")
            continue
        key = fragment_key(plan["job_prefix"], fid)
        staged = store.get_json(key)["file"]["path"] if key in store else None
        if staged is None or column_file(meta, plan["output_field_ids"]) != staged:
            problems.append(f"fragment {fid}: {entry['rows']} rows lack their computed value")
            continue
        rows_ok += entry["rows"]
        frags_ok += 1
    if problems:
        raise VerificationError(
            f"job {plan['job_id']} ({_label(plan)}) is incomplete at "
            f"version {ds.version}: " + "; ".join(problems) + ". Rerun the backfill to finish it.")
    log.info("verify %s: %d fragments, %d rows of %s committed at version %d",
             plan["job_id"], frags_ok, rows_ok, _label(plan), ds.version)
    return {"job_id": plan["job_id"], "table": plan["table"], "column": plan.get("column"), "version": ds.version,
            "fragments_verified": frags_ok, "rows_verified": rows_ok}


def _label(plan: dict[str, Any]) -> str:
    if plan["kind"] == "refresh":
        return f"refresh of view '{plan['table']}'"
    return f"backfill of column '{plan['column']}' in table '{plan['table']}'"


def backfill(
    table: Table,
    column: str,
    options: BackfillOptions | None = None,
    *,
    spark: Any = None,
    store: CheckpointStore | None = None,
) -> BackfillResult:
    """Runs every stage of a backfill in this process, on ``spark`` or a local session."""
    options = options or BackfillOptions()
    options.validate(table.name)
    return run_job(table, column, lambda parallelism: plan_backfill(table, column, options, store=store,
                                                                    parallelism=parallelism), spark)


def refresh(
    view: Table,
    src_version: int | None = None,
    max_rows_per_fragment: int | None = None,
    options: BackfillOptions | None = None,
    *,
    spark: Any = None,
    store: CheckpointStore | None = None,
) -> BackfillResult:
    """Refreshes a materialized view in this process: new source rows, then every stale fragment."""
    from geneva_provider.views import plan_refresh

    return run_job(view, "*", lambda parallelism: plan_refresh(
        view, src_version, max_rows_per_fragment, options, store=store, parallelism=parallelism), spark)


def run_job(table: Table, column: str, plan: Callable[[int | None], dict[str, Any]], spark: Any) -> BackfillResult:
    """plan -> apply -> write+commit -> verify with one SparkSession (started only if there is work)."""
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    # Plan first: bad input fails before any JVM starts.
    summary = plan(default_parallelism(spark) if spark is not None else None)
    seconds["plan"] = time.perf_counter() - t0
    plan_uri = summary["plan_uri"]
    so = table.storage_options
    if summary["nothing_to_do"]:
        log.info("job %s on table '%s': up to date", summary["job_id"], table.name)
        verify_backfill(plan_uri, so)
        seconds["total"] = time.perf_counter() - t0
        return BackfillResult(summary["job_id"], column, 0, summary["rows_reused"], 0, 0, table.version,
                              seconds={k: round(v, 3) for k, v in seconds.items()})
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
        applied = run_apply(plan_uri, spark, so)
        seconds["apply"] = time.perf_counter() - t
        t = time.perf_counter()
        written = run_write_commit(plan_uri, spark, so)
        seconds["write_commit"] = time.perf_counter() - t
    finally:
        if owns_session:
            spark.stop()
    t = time.perf_counter()
    verify_backfill(plan_uri, so)
    seconds["verify"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    result = BackfillResult(
        job_id=summary["job_id"],
        column=column,
        rows_computed=applied["rows_computed"],
        rows_reused=applied["rows_reused"],
        fragments_committed=written["fragments_committed"],
        fragments_reused=summary["fragments_reused"],
        version=written["version"],
        fragments_vanished=written["fragments_vanished"],
        seconds={k: round(v, 3) for k, v in seconds.items()},
    )
    log.info("job %s on table '%s' (%s): %d rows computed, %d reused, %d fragments committed, version %d",
             result.job_id, table.name, column, result.rows_computed, result.rows_reused,
             result.fragments_committed, result.version)
    return result
