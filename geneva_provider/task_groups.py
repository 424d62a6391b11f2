"""Task-group factories wiring a job's stages, reusable inside any team DAG.

Both factories take the same arguments in the same way: the job's options (declared once in
:mod:`geneva_provider.core.contracts.options`) go to the plan task, the Spark options to the two Spark
tasks, and everything else (``pool``, ``queue``, ``execution_timeout``, ``priority_weight``,
``retries`` ...) to every task of the group, as any ``BaseOperator`` argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    Its tasks are the follower graph's steps (:func:`~geneva_provider.pipeline.followers.followers_of` of the
    table's change), each a task group made by its kind's factory (:func:`follower_group`), after the groups it
    waits for, read when the DAG file is parsed: the DAG's shape follows a new ``auto_backfill`` column or view at
    the next parse.  Pass ``columns`` and ``views`` ((view, source) pairs, each after its source; and
    ``view_columns``, (view, column) pairs, else none) to parse without opening the database: then those are the
    followers, and no others.  ``kwargs`` go to every task group (job and Spark options, ``retries`` ...);
    ``dag_kwargs`` to the DAG (``max_active_runs`` is 1: runs queue behind one another, each picking up
    what the one before left).  The runs' own commits do not start another run: the watcher leaves them out.
    """
    from geneva_provider.assets import lance_table_asset
    from geneva_provider.pipeline.followers import BackfillColumn, RefreshView

    if "partition_where" in kwargs:  # each run would fail its plan: the watcher's runs have no partition key
        raise InvalidArgumentError(
            f"table_change_dag({table!r}): partition_where needs runs with a partition key, and the table "
            "watcher's asset events carry none (Airflow's event triggers cannot set one); put "
            "backfill_task_group(..., partition_where=...) in a DAG on a partitioned timetable instead")

    plan = _followers(table, lance_conn_id, columns, views, view_columns)
    options = {"start_date": CHANGE_DAG_START, "catchup": False, "max_active_runs": 1,
               "tags": ["geneva", "on-change"], **(dag_kwargs or {})}
    backfilled = [s.column for s in plan.of_kind(BackfillColumn) if s.table == table]
    with DAG(dag_id=dag_id or f"geneva_on_change_{table}",
             schedule=[lance_table_asset(table, lance_conn_id, poll_interval=poll_interval)],
             doc_md=f"Follows changes of table `{table}`: backfills {backfilled}, refreshes "
                    f"{[s.view for s in plan.of_kind(RefreshView)]}.", **options) as dag:
        follower_groups(plan, table, lance_conn_id=lance_conn_id, **kwargs)
    return dag


FollowerGroupFactory = Callable[..., TaskGroup]
_FOLLOWER_GROUPS: dict[str, FollowerGroupFactory] = {}


def follower_group(kind: str) -> Callable[[FollowerGroupFactory], FollowerGroupFactory]:
    """Decorator: the task-group factory of the follower steps of ``kind`` (their ``kind`` tag), called as
    ``factory(step, group_id, lance_conn_id=..., **kwargs)`` inside the DAG being built."""
    def register(factory: FollowerGroupFactory) -> FollowerGroupFactory:
        _FOLLOWER_GROUPS[kind] = factory
        return factory
    return register


@follower_group("backfill_column")
def _backfill_column(step: Any, group_id: str, **kwargs: Any) -> TaskGroup:
    return backfill_task_group(group_id, step.table, step.column, **kwargs)


@follower_group("refresh_view")
def _refresh_view(step: Any, group_id: str, **kwargs: Any) -> TaskGroup:
    return refresh_task_group(group_id, step.view, **kwargs)


def follower_groups(plan: Any, root: str, **kwargs: Any) -> list[TaskGroup]:
    """One task group per step of ``plan`` (a ``FollowerPlan`` of a change of ``root``), each after the groups it
    waits for through a join task (``trigger_rule="none_failed"``: a step runs when those before it had nothing to
    do, and not after one failed), in the DAG being built; ``kwargs`` go to every factory."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    groups: list[TaskGroup] = []
    joins: dict[str, Any] = {}
    for i, follower in enumerate(plan.followers):
        step = follower.step
        factory = _FOLLOWER_GROUPS.get(step.kind)
        if factory is None:
            raise InvalidArgumentError(f"follower step {step!r} of table {root!r} has no task-group factory; "
                                       f"register one with @follower_group({step.kind!r})")
        cause = plan.cause_of(i)
        join_id = step.join_label(root, plan.followers[cause].step.label(root) if cause is not None else None)
        upstream = [groups[j] for j in follower.after]
        group = factory(step, step.label(root), **kwargs)
        if join_id is not None:
            if join_id not in joins:
                joins[join_id] = EmptyOperator(task_id=join_id, trigger_rule="none_failed")
            upstream >> joins[join_id]
            joins[join_id] >> group
        else:
            upstream >> group
        groups.append(group)
    return groups


def _followers(table: str, lance_conn_id: str, columns: Sequence[str] | None, views: Sequence[tuple[str, str]] | None,
               view_columns: Sequence[tuple[str, str]] | None) -> Any:
    """What follows a change of ``table``: the steps given by name, else (in part or whole) the follower graph's
    walk of the connection's database, read from every table's schema (at parse time)."""
    from geneva_provider.pipeline.followers import BackfillColumn, RefreshView, TableChange, change_steps, followers_of

    if columns is not None and views is not None:
        return change_steps(table, columns, views, view_columns or [])
    from geneva_provider.facade.followers import table_facts

    db = LanceHook(lance_conn_id).database
    db.open_table(table)  # TableNotFoundError naming it
    plan = followers_of(TableChange(table=table), table_facts(db))
    if columns is None and views is None:
        return plan
    found = plan.of_kind(BackfillColumn)
    return change_steps(
        table, [s.column for s in found if s.table == table] if columns is None else columns,
        [(s.view, s.source) for s in plan.of_kind(RefreshView)] if views is None else views,
        [(s.table, s.column) for s in found if s.table != table] if view_columns is None else view_columns)
