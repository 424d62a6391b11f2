"""Task-group factories wiring a job's stages, reusable inside any team DAG."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import TaskGroup

from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator

PLAN_OPTIONS = ("where", "read_version", "checkpoint_size", "min_checkpoint_size", "max_checkpoint_size",
                "task_size", "commit_granularity", "concurrency", "parallelism")
SPARK_OPTIONS = ("conf", "py_files", "env_vars", "spark_binary", "ship_package")


def backfill_task_group(
    group_id: str,
    table: str,
    column: str,
    *,
    lance_conn_id: str = LanceHook.default_conn_name,
    spark_conn_id: str = "spark_default",
    retries: int = 2,
    retry_delay: timedelta = timedelta(seconds=30),
    **options: Any,
) -> TaskGroup:
    """plan -> Spark apply -> Spark write+commit -> verify, each task retried on its own.

    ``options`` takes the plan options (``where``, ``read_version``, sizes, ``parallelism``) and
    the Spark options (``conf``, ``py_files``, ``env_vars``, ``spark_binary``).  When the plan has
    nothing to compute, both Spark tasks are skipped and verify still runs (and emits the Asset);
    when the group's upstream is skipped, the whole group is skipped.
    """
    unknown = set(options) - set(PLAN_OPTIONS) - set(SPARK_OPTIONS)
    if unknown:
        raise TypeError(f"backfill_task_group got unknown options {sorted(unknown)}")
    plan_kwargs = {k: v for k, v in options.items() if k in PLAN_OPTIONS}
    spark_kwargs = {k: v for k, v in options.items() if k in SPARK_OPTIONS}
    common = {"lance_conn_id": lance_conn_id, "retries": retries, "retry_delay": retry_delay}
    with TaskGroup(group_id=group_id, tooltip=f"backfill {table}.{column}") as group:
        plan = GenevaPlanBackfillOperator(task_id="plan", table=table, column=column, **plan_kwargs, **common)
        _spark_and_verify(plan, table, column, spark_conn_id, spark_kwargs, common)
    return group


def _spark_and_verify(plan: Any, table: str, column: str | None, spark_conn_id: str, spark_kwargs: dict[str, Any],
                      common: dict[str, Any]) -> None:
    """The stages after any plan: Spark apply, Spark write+commit, verify (emitting the Asset)."""
    apply = GenevaSparkApplyOperator(task_id="apply", plan=plan.output, spark_conn_id=spark_conn_id,
                                     **spark_kwargs, **common)
    write = GenevaSparkWriteCommitOperator(task_id="write_commit", plan=plan.output, spark_conn_id=spark_conn_id,
                                           trigger_rule="none_failed_min_one_success", **spark_kwargs, **common)
    verify = GenevaVerifyOperator(task_id="verify", plan=plan.output, table=table, column=column,
                                  trigger_rule="none_failed_min_one_success", **common)
    # write and verify also hang off plan: they run when apply is skipped for lack of work,
    # and are skipped with everything else when plan itself is skipped (e.g. by a sensor).
    plan >> apply >> write >> verify
    plan >> [write, verify]


def refresh_task_group(
    group_id: str,
    view: str,
    *,
    lance_conn_id: str = LanceHook.default_conn_name,
    spark_conn_id: str = "spark_default",
    retries: int = 2,
    retry_delay: timedelta = timedelta(seconds=30),
    **options: Any,
) -> TaskGroup:
    """plan refresh -> Spark apply -> Spark write+commit -> verify (emits the view's Asset).

    ``options``: ``src_version``, ``max_rows_per_fragment``, ``checkpoint_size``, ``task_size``,
    ``commit_granularity``, ``parallelism``, and the Spark options.  With no new or stale rows,
    the Spark tasks are skipped.
    """
    from geneva_provider.operators.views import GenevaPlanRefreshOperator

    plan_options = {"src_version", "max_rows_per_fragment", "checkpoint_size", "task_size", "commit_granularity",
                    "parallelism"}
    unknown = set(options) - plan_options - set(SPARK_OPTIONS)
    if unknown:
        raise TypeError(f"refresh_task_group got unknown options {sorted(unknown)}")
    common = {"lance_conn_id": lance_conn_id, "retries": retries, "retry_delay": retry_delay}
    with TaskGroup(group_id=group_id, tooltip=f"refresh view {view}") as group:
        plan = GenevaPlanRefreshOperator(task_id="plan", view=view,
                                         **{k: v for k, v in options.items() if k in plan_options}, **common)
        _spark_and_verify(plan, view, None, spark_conn_id, {k: v for k, v in options.items() if k in SPARK_OPTIONS},
                          common)
    return group
