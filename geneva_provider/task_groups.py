"""Task-group factories wiring a job's stages, reusable inside any team DAG.

Both factories take the same arguments in the same way: the job's options (declared once in
:mod:`geneva_provider.core.contracts.options`) go to the plan task, the Spark options to the two Spark
tasks, and everything else (``pool``, ``queue``, ``execution_timeout``, ``priority_weight``,
``retries`` ...) to every task of the group, as any ``BaseOperator`` argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, TaskGroup

from geneva_provider.core.contracts.options import BackfillOptions, JobOptions, RefreshOptions
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators._common import SPARK_OPTIONS, reject_unknown_kwargs
from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.operators.views import GenevaPlanRefreshOperator

PLAN_ARGUMENTS = ("parallelism",)
BACKFILL_PLAN_ARGUMENTS = (*PLAN_ARGUMENTS, "partition_where")
CHANGE_DAG_START = datetime(2024, 1, 1)


def backfill_task_group(group_id: str, table: str, column: str, **kwargs: Any) -> TaskGroup:
    """plan -> Spark apply -> Spark write+commit -> verify of ``column``, each task retried on its own.

    When the plan has nothing to compute, the Spark tasks and verify are skipped (no Asset event);
    when the group's upstream is skipped, the whole group is skipped.  ``partition_where`` (e.g.
    ``"date = {{ partition_key }}"``) limits each run to its partition's rows
    (:class:`~geneva_provider.operators.backfill.GenevaPlanBackfillOperator`).
    """
    with TaskGroup(group_id=group_id, tooltip=f"backfill {table}.{column}") as group:
        _wire(group, GenevaPlanBackfillOperator, BackfillOptions, {"table": table, "column": column}, table, column,
              kwargs, BACKFILL_PLAN_ARGUMENTS)
    return group


def refresh_task_group(group_id: str, view: str, **kwargs: Any) -> TaskGroup:
    """plan refresh -> Spark apply -> Spark write+commit -> verify (emits the view's Asset).

    With no new or stale rows, the Spark tasks are skipped.
    """
    with TaskGroup(group_id=group_id, tooltip=f"refresh view {view}") as group:
        _wire(group, GenevaPlanRefreshOperator, RefreshOptions, {"view": view}, view, None, kwargs)
    return group


def _wire(group: TaskGroup, plan_cls: type, options: type[JobOptions], target: dict[str, str], table: str,
          column: str | None, kwargs: dict[str, Any], plan_arguments: Sequence[str] = PLAN_ARGUMENTS) -> None:
    """The plan task and the stages after it: Spark apply, Spark write+commit, verify (emitting the Asset).

    An argument no task of the group takes is refused naming the group's plan task and every
    option the group accepts (not just the plan operator's).
    """
    kwargs = {"retries": 2, "retry_delay": timedelta(seconds=30), **kwargs}
    kwargs.setdefault("lance_conn_id", LanceHook.default_conn_name)
    plan_kwargs = {k: kwargs.pop(k) for k in (*options.names(), *plan_arguments) if k in kwargs}
    spark_kwargs = {k: kwargs.pop(k) for k in SPARK_OPTIONS if k in kwargs}
    factory = "backfill_task_group" if column is not None else "refresh_task_group"
    reject_unknown_kwargs(plan_cls, kwargs, valid=(*options.names(), *plan_arguments, *SPARK_OPTIONS, "lance_conn_id"),
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


def table_change_dag(table: str, lance_conn_id: str = LanceHook.default_conn_name, *, dag_id: str | None = None,
                     poll_interval: float = 10.0, columns: Sequence[str] | None = None,
                     views: Sequence[tuple[str, str]] | None = None,
                     view_columns: Sequence[tuple[str, str]] | None = None, dag_kwargs: dict[str, Any] | None = None,
                     **kwargs: Any) -> DAG:
    """The DAG that follows ``table``'s changes: scheduled on ``lance_table_asset(table)`` (a watcher), each run
    backfills every ``auto_backfill`` column of the table, then refreshes the views made with
    ``refresh_on_change=True`` over it, and those over them (source -> view -> view), each after its source,
    and backfills each such view's own ``auto_backfill`` columns (a chunk view's embedding) after its refresh.

    ``columns``, ``views`` ((view, source) pairs, each after its source) and ``view_columns`` ((view, column)
    pairs) default to what the tables say (:func:`~geneva_provider.pipeline.table_changes.change_followers`),
    read when the DAG file is parsed: the DAG's shape follows a new ``auto_backfill`` column or view at the next
    parse.  Pass ``columns`` and ``views`` (and ``view_columns``, else none) to parse without opening the
    database.  ``kwargs`` go to every task group (job and Spark options, ``retries`` ...);
    ``dag_kwargs`` to the DAG (``max_active_runs`` is 1: runs queue behind one another, each picking up
    what the one before left).  The runs' own commits do not start another run: the watcher leaves them out.
    """
    from airflow.providers.standard.operators.empty import EmptyOperator

    from geneva_provider.assets import lance_table_asset

    if "partition_where" in kwargs:  # each run would fail its plan: the watcher's runs have no partition key
        raise InvalidArgumentError(
            f"table_change_dag({table!r}): partition_where needs runs with a partition key, and the table "
            "watcher's asset events carry none (Airflow's event triggers cannot set one); put "
            "backfill_task_group(..., partition_where=...) in a DAG on a partitioned timetable instead")

    if columns is None or views is None:
        found = _followers(table, lance_conn_id)
        columns = found.columns if columns is None else columns
        views = found.views if views is None else views
        view_columns = found.view_columns if view_columns is None else view_columns
    options = {"start_date": CHANGE_DAG_START, "catchup": False, "max_active_runs": 1,
               "tags": ["geneva", "on-change"], **(dag_kwargs or {})}
    with DAG(dag_id=dag_id or f"geneva_on_change_{table}",
             schedule=[lance_table_asset(table, lance_conn_id, poll_interval=poll_interval)],
             doc_md=f"Follows changes of table `{table}`: backfills {list(columns)}, refreshes "
                    f"{[v for v, _ in views]}.", **options) as dag:
        last: dict[str, list[TaskGroup]] = {table: [backfill_task_group(f"backfill_{c}", table, c,
                                                                        lance_conn_id=lance_conn_id, **kwargs)
                                                    for c in columns]}
        for view, source in views:
            # A source with nothing to compute skips its groups: the view is refreshed all the same (a delete).
            join = EmptyOperator(task_id=f"after_{source}_for_{view}", trigger_rule="none_failed")
            group = refresh_task_group(f"refresh_{view}", view, lance_conn_id=lance_conn_id, **kwargs)
            for upstream in last.get(source, []):
                upstream >> join
            join >> group
            last[view] = [group, *_view_columns(view, group, [c for v, c in view_columns or [] if v == view],
                                                lance_conn_id, kwargs)]
    return dag


def _view_columns(view: str, refresh: TaskGroup, columns: list[str], lance_conn_id: str,
                  kwargs: dict[str, Any]) -> list[TaskGroup]:
    """Backfills of a view's own ``auto_backfill`` columns after its refresh, even one with nothing to do
    (rows an earlier run left without a value); none after a failed refresh."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    if not columns:
        return []
    join = EmptyOperator(task_id=f"after_refresh_{view}", trigger_rule="none_failed")
    refresh >> join
    groups = [backfill_task_group(f"backfill_{view}_{c}", view, c, lance_conn_id=lance_conn_id, **kwargs)
              for c in columns]
    join >> groups
    return groups


def _followers(table: str, lance_conn_id: str) -> Any:
    """What follows ``table`` in the connection's database, read from every table's schema (at parse time)."""
    from geneva_provider.pipeline.table_changes import change_followers

    db = LanceHook(lance_conn_id).database
    db.open_table(table)  # TableNotFoundError naming it
    return change_followers(table, {name: db.open_table(name).schema for name in db.table_names()})
