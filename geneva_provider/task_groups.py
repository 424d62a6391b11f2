"""Task-group factories wiring a job's stages, reusable inside any team DAG.

Both factories take the same arguments in the same way: the job's options (declared once in
:mod:`geneva_provider.core.contracts.options`) go to the plan task, the Spark options to the two Spark
tasks, and everything else (``pool``, ``queue``, ``execution_timeout``, ``priority_weight``,
``retries`` ...) to every task of the group, as any ``BaseOperator`` argument.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import TaskGroup

from geneva_provider.core.contracts.options import BackfillOptions, JobOptions, RefreshOptions
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators._common import SPARK_OPTIONS, reject_unknown_kwargs
from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.operators.views import GenevaPlanRefreshOperator

PLAN_ARGUMENTS = ("parallelism",)


def backfill_task_group(group_id: str, table: str, column: str, **kwargs: Any) -> TaskGroup:
    """plan -> Spark apply -> Spark write+commit -> verify of ``column``, each task retried on its own.

    When the plan has nothing to compute, the Spark tasks and verify are skipped (no Asset event);
    when the group's upstream is skipped, the whole group is skipped.
    """
    with TaskGroup(group_id=group_id, tooltip=f"backfill {table}.{column}") as group:
        _wire(group, GenevaPlanBackfillOperator, BackfillOptions, {"table": table, "column": column}, table, column,
              kwargs)
    return group


def refresh_task_group(group_id: str, view: str, **kwargs: Any) -> TaskGroup:
    """plan refresh -> Spark apply -> Spark write+commit -> verify (emits the view's Asset).

    With no new or stale rows, the Spark tasks are skipped.
    """
    with TaskGroup(group_id=group_id, tooltip=f"refresh view {view}") as group:
        _wire(group, GenevaPlanRefreshOperator, RefreshOptions, {"view": view}, view, None, kwargs)
    return group


def _wire(group: TaskGroup, plan_cls: type, options: type[JobOptions], target: dict[str, str], table: str,
          column: str | None, kwargs: dict[str, Any]) -> None:
    """The plan task and the stages after it: Spark apply, Spark write+commit, verify (emitting the Asset).

    An argument no task of the group takes is refused naming the group's plan task and every
    option the group accepts (not just the plan operator's).
    """
    kwargs = {"retries": 2, "retry_delay": timedelta(seconds=30), **kwargs}
    kwargs.setdefault("lance_conn_id", LanceHook.default_conn_name)
    plan_kwargs = {k: kwargs.pop(k) for k in (*options.names(), *PLAN_ARGUMENTS) if k in kwargs}
    spark_kwargs = {k: kwargs.pop(k) for k in SPARK_OPTIONS if k in kwargs}
    factory = "backfill_task_group" if column is not None else "refresh_task_group"
    reject_unknown_kwargs(plan_cls, kwargs, valid=(*options.names(), *PLAN_ARGUMENTS, *SPARK_OPTIONS, "lance_conn_id"),
                          subject=f"{factory} {group.group_id!r} (task {group.child_id('plan')!r})")
    plan = plan_cls(task_id="plan", **target, **plan_kwargs, **kwargs)
    apply = GenevaSparkApplyOperator(task_id="apply", plan=plan.output, **spark_kwargs, **kwargs)
    write = GenevaSparkWriteCommitOperator(task_id="write_commit", plan=plan.output,
                                           trigger_rule="none_failed_min_one_success", **spark_kwargs, **kwargs)
    verify = GenevaVerifyOperator(task_id="verify", plan=plan.output, table=table, column=column,
                                  trigger_rule="none_failed_min_one_success", **kwargs)
    # write and verify also hang off plan: they run when apply is skipped for lack of work,
    # and are skipped with everything else when plan itself is skipped (e.g. by a sensor).
    plan >> apply >> write >> verify
    plan >> [write, verify]
