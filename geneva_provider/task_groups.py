"""Task-group factories wiring a job's stages, reusable inside any team DAG.

The factories take the same arguments in the same way: the job's options (declared once in
:mod:`geneva_provider.core.contracts.options`) go to the plan task, the Spark options to the Spark
tasks, and everything else (``pool``, ``queue``, ``execution_timeout``, ``priority_weight``,
``retries`` ...) to every task of the group, as any ``BaseOperator`` argument.

After verify comes the index stage (``refresh_indexes=True``, the default, as the notebook's jobs): a plan task
finding the indexes the commit left behind (on the backfilled column; on the columns a view's refresh writes) and
planning an add-only refresh of each with fragments to index, then one Spark index task per plan (dynamic task
mapping; none: skipped), each emitting its index's Asset event when it committed.  A compaction's group
(:func:`compaction_task_group`) ends with the same stage over every index of the table.
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
from geneva_provider.operators.indexes import (
    GenevaPlanIndexRefreshesOperator,
    GenevaRefreshIndexOperator,
    GenevaSparkIndexOperator,
)
from geneva_provider.operators.maintenance import GenevaPlanCompactionOperator, GenevaSparkCompactOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.operators.views import GenevaPlanRefreshOperator

PLAN_ARGUMENTS = ("parallelism",)
BACKFILL_PLAN_ARGUMENTS = (*PLAN_ARGUMENTS, "partition_where")
INDEX_PLAN_ARGUMENTS = ("retrain", "target_groups")
COMPACTION_PLAN_ARGUMENTS = ("target_rows_per_fragment", "options", "exclude_live_jobs")
CHANGE_DAG_START = datetime(2024, 1, 1)


def backfill_task_group(group_id: str, table: str, column: str, *, refresh_indexes: bool = True,
                        **kwargs: Any) -> TaskGroup:
    """plan -> Spark apply -> Spark write+commit -> verify of ``column`` -> plan_indexes -> Spark index, each task
    retried on its own.

    When the plan has nothing to compute, the Spark tasks and verify are skipped (no Asset event);
    when the group's upstream is skipped, the whole group is skipped.  ``partition_where`` (e.g.
    ``"date = {{ partition_key }}"``) limits each run to its partition's rows
    (:class:`~geneva_provider.operators.backfill.GenevaPlanBackfillOperator`).  With ``refresh_indexes`` (default
    True), the indexes on the column index add-only what they do not cover (also after a run with nothing to
    compute: an append another writer made); no index, or nothing to index: the Spark index task is skipped.
    """
    with TaskGroup(group_id=group_id, tooltip=f"backfill {table}.{column}") as group:
        _wire(group, GenevaPlanBackfillOperator, BackfillOptions, {"table": table, "column": column}, table, column,
              kwargs, BACKFILL_PLAN_ARGUMENTS, refresh_indexes)
    return group


def refresh_task_group(group_id: str, view: str, *, refresh_indexes: bool = True, **kwargs: Any) -> TaskGroup:
    """plan refresh -> Spark apply -> Spark write+commit -> verify (emits the view's Asset) -> plan_indexes ->
    Spark index (a materialized view's or a chunker view's refresh).

    With no new or stale rows, the Spark tasks are skipped.  With ``refresh_indexes`` (default True), the indexes
    on the columns the refresh writes index add-only what it added or rewrote (one on a UDF column added to the
    view waits for that column's backfill, whose own index stage refreshes it).
    """
    with TaskGroup(group_id=group_id, tooltip=f"refresh view {view}") as group:
        _wire(group, GenevaPlanRefreshOperator, RefreshOptions, {"view": view}, view, None, kwargs,
              refresh_indexes=refresh_indexes)
    return group


def index_refresh_task_group(group_id: str, table: str, index: str, **kwargs: Any) -> TaskGroup:
    """plan -> Spark index: an add-only refresh of the index ``index`` of ``table`` (``retrain=True``: built again
    from a new training); the Spark task is skipped when the index covers every fragment, and emits
    :func:`~geneva_provider.assets.index_asset` when it committed.  ``target_groups`` and ``retrain`` go to the
    plan task, the Spark options to the Spark task, the rest to both.
    """
    from geneva_provider.assets import index_asset

    kwargs = _group_defaults(kwargs)
    with TaskGroup(group_id=group_id, tooltip=f"refresh index {index} of {table}") as group:
        plan_kwargs, spark_kwargs = _split_arguments(group, "index_refresh_task_group", GenevaRefreshIndexOperator,
                                                     INDEX_PLAN_ARGUMENTS, kwargs)
        plan = GenevaRefreshIndexOperator(task_id="plan", table=table, index_name=index, **plan_kwargs, **kwargs)
        plan >> GenevaSparkIndexOperator(task_id="index", plan=plan.output, table=table,
                                         outlets=[index_asset(table, index, kwargs["lance_conn_id"])],
                                         **spark_kwargs, **kwargs)
    return group


def compaction_task_group(group_id: str, table: str, *, refresh_indexes: bool = True, **kwargs: Any) -> TaskGroup:
    """plan_compaction -> Spark compact -> plan_indexes -> Spark index: a compaction that keeps the table's indexes
    whole.

    ``target_rows_per_fragment``, ``options`` and ``exclude_live_jobs`` go to the plan task
    (:class:`~geneva_provider.operators.maintenance.GenevaPlanCompactionOperator`), the Spark options to the Spark
    tasks, the rest to every task.  With ``refresh_indexes`` (default True, as ``Table.compact``), the plan first
    drops the small segments index refreshes left, which would keep Lance from coalescing their fragments, and
    the index stage then indexes add-only whatever fragment no segment covers (what the compaction made of them);
    nothing to compact: the compact task is skipped, the index stage still runs (and is skipped with nothing to
    index).
    """
    if not isinstance(refresh_indexes, bool):
        raise InvalidArgumentError(f"compaction_task_group {group_id!r}: refresh_indexes must be True or False, "
                                   f"got {refresh_indexes!r}")
    kwargs = _group_defaults(kwargs)
    with TaskGroup(group_id=group_id, tooltip=f"compact {table}") as group:
        plan_kwargs, spark_kwargs = _split_arguments(group, "compaction_task_group", GenevaPlanCompactionOperator,
                                                     COMPACTION_PLAN_ARGUMENTS, kwargs)
        plan = GenevaPlanCompactionOperator(task_id="plan", table=table, release_index_segments=refresh_indexes,
                                            **plan_kwargs, **kwargs)
        compact = GenevaSparkCompactOperator(task_id="compact", plan=plan.output, **spark_kwargs, **kwargs)
        plan >> compact
        if refresh_indexes:
            _index_stage([plan, compact], table, None, spark_kwargs, kwargs, all_indexes=True)
    return group


def _split_arguments(group: TaskGroup, factory: str, plan_cls: type, plan_arguments: Sequence[str],
                     kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pops from ``kwargs`` the plan task's arguments and the Spark tasks' options, leaving what every task takes;
    an argument no task of the group takes is refused naming the group's plan task and every option the group
    accepts (not just the plan operator's)."""
    plan_kwargs = {k: kwargs.pop(k) for k in plan_arguments if k in kwargs}
    spark_kwargs = {k: kwargs.pop(k) for k in SPARK_OPTIONS if k in kwargs}
    reject_unknown_kwargs(plan_cls, kwargs, valid=(*plan_arguments, *SPARK_OPTIONS, "lance_conn_id"),
                          subject=f"{factory} {group.group_id!r} (task {group.child_id('plan')!r})")
    return plan_kwargs, spark_kwargs


def _group_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every group's defaults: two retries 30 s apart, the default Lance connection."""
    kwargs = {"retries": 2, "retry_delay": timedelta(seconds=30), **kwargs}
    kwargs.setdefault("lance_conn_id", LanceHook.default_conn_name)
    return kwargs


def _wire(group: TaskGroup, plan_cls: type, options: type[JobOptions], target: dict[str, str], table: str,
          column: str | None, kwargs: dict[str, Any], plan_arguments: Sequence[str] = PLAN_ARGUMENTS,
          refresh_indexes: bool = True) -> None:
    """The plan task and the stages after it: Spark apply, Spark write+commit, verify (emitting the Asset), then
    the index stage (:func:`_index_stage`) with ``refresh_indexes``; the arguments split by
    :func:`_split_arguments`.
    """
    factory = "backfill_task_group" if column is not None else "refresh_task_group"
    if not isinstance(refresh_indexes, bool):
        raise InvalidArgumentError(f"{factory} {group.group_id!r}: refresh_indexes must be True or False, "
                                   f"got {refresh_indexes!r}")
    kwargs = _group_defaults(kwargs)
    plan_kwargs, spark_kwargs = _split_arguments(group, factory, plan_cls, (*options.names(), *plan_arguments),
                                                 kwargs)
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
    if refresh_indexes:
        _index_stage([plan, verify], table, column, spark_kwargs, kwargs)


def _index_stage(after: list[Any], table: str, column: str | None, spark_kwargs: dict[str, Any],
                 kwargs: dict[str, Any], *, all_indexes: bool = False) -> None:
    """plan_indexes -> Spark index, mapped over the plans (one task per index with fragments to index; none:
    skipped).  plan_indexes runs after verify, and also when verify was skipped for lack of work (an index may
    still lack fragments another writer added), not when the group's plan was skipped or anything failed."""
    from geneva_provider.assets import index_alias

    plan = GenevaPlanIndexRefreshesOperator(task_id="plan_indexes", table=table, column=column,
                                            all_indexes=all_indexes, trigger_rule="none_failed_min_one_success",
                                            **kwargs)
    after >> plan
    outlets = [index_alias(table, kwargs["lance_conn_id"])]
    GenevaSparkIndexOperator.partial(task_id="index", table=table, outlets=outlets, **spark_kwargs,
                                     **kwargs).expand(plan=plan.output)


def table_change_dag(table: str, lance_conn_id: str = LanceHook.default_conn_name, *, dag_id: str | None = None,
                     poll_interval: float = 10.0, columns: Sequence[str] | None = None,
                     views: Sequence[tuple[str, str]] | None = None,
                     view_columns: Sequence[tuple[str, str]] | None = None, dag_kwargs: dict[str, Any] | None = None,
                     **kwargs: Any) -> DAG:
    """The DAG that follows ``table``'s changes: scheduled on ``lance_table_asset(table)`` (a watcher), each run
    backfills every ``auto_backfill`` column of the table, then refreshes the views made with
    ``refresh_on_change=True`` over it, and those over them (source -> view -> view), each after its source,
    and backfills each such view's own ``auto_backfill`` columns (a chunk view's embedding) after its refresh,
    and refreshes add-only each index those left behind (``index_<name>``: :func:`index_refresh_task_group`)
    after every group writing its table.

    Its tasks are the follower graph's steps (:func:`~geneva_provider.pipeline.followers.followers_of` of the
    table's change), each a task group made by its kind's factory (:func:`follower_group`), after the groups it
    waits for, read when the DAG file is parsed: the DAG's shape follows a new ``auto_backfill`` column or view at
    the next parse.  Pass ``columns`` and ``views`` ((view, source) pairs, each after its source; and
    ``view_columns``, (view, column) pairs, else none) to parse without opening the database: then those are the
    followers, and no others (and each backfill or refresh group refreshes its indexes itself, as
    ``refresh_indexes=True`` does).  ``kwargs`` go to every task group (job and Spark options, ``retries`` ...);
    ``dag_kwargs`` to the DAG (``max_active_runs`` is 1: runs queue behind one another, each picking up
    what the one before left).  The runs' own commits do not start another run: the watcher leaves them out.
    """
    from geneva_provider.assets import lance_table_asset
    from geneva_provider.pipeline.followers import BackfillColumn, RefreshIndex, RefreshView

    if "partition_where" in kwargs:  # each run would fail its plan: the watcher's runs have no partition key
        raise InvalidArgumentError(
            f"table_change_dag({table!r}): partition_where needs runs with a partition key, and the table "
            "watcher's asset events carry none (Airflow's event triggers cannot set one); put "
            "backfill_task_group(..., partition_where=...) in a DAG on a partitioned timetable instead")

    plan = _followers(table, lance_conn_id, columns, views, view_columns)
    options = {"start_date": CHANGE_DAG_START, "catchup": False, "max_active_runs": 1,
               "tags": ["geneva", "on-change"], **(dag_kwargs or {})}
    backfilled = [s.column for s in plan.of_kind(BackfillColumn) if s.table == table]
    # Walked from the database, the graph's index steps refresh each index after every step writing its table (an
    # index made later joins at the next parse, as a new column does); steps given by name carry no index steps,
    # so each group runs its own index stage.
    kwargs.setdefault("refresh_indexes", columns is not None or views is not None)
    with DAG(dag_id=dag_id or f"geneva_on_change_{table}",
             schedule=[lance_table_asset(table, lance_conn_id, poll_interval=poll_interval)],
             doc_md=f"Follows changes of table `{table}`: backfills {backfilled}, refreshes "
                    f"{[s.view for s in plan.of_kind(RefreshView)]}, indexes "
                    f"{[s.index for s in plan.of_kind(RefreshIndex)]}.", **options) as dag:
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


@follower_group("refresh_index")
def _refresh_index(step: Any, group_id: str, **kwargs: Any) -> TaskGroup:
    """The other steps' job options (a backfill's, a refresh's, their index stage's) are not an index refresh's:
    left out here."""
    skipped = {*BackfillOptions.names(), *RefreshOptions.names(), *BACKFILL_PLAN_ARGUMENTS, "refresh_indexes"}
    return index_refresh_task_group(group_id, step.table, step.index,
                                    **{k: v for k, v in kwargs.items() if k not in skipped})


def follower_groups(plan: Any, root: str, **kwargs: Any) -> list[TaskGroup]:
    """One task group per step of ``plan`` (a ``FollowerPlan`` of a change of ``root``), each after the groups it
    waits for through a join task (``trigger_rule="none_failed"``: a step runs when those before it had nothing to
    do, and not after one failed), in the DAG being built; ``kwargs`` go to every factory."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    groups: list[TaskGroup] = []
    joins: dict[tuple[str, tuple[int, ...]], Any] = {}  # one join per cause and groups waited for
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
            # Steps of one cause share its join unless one waits for more (an index refresh after both a view's
            # refresh and the backfill that refresh caused): that one gets a join of its own, or the shared join
            # would wait for a group that waits for it.
            key = (join_id, follower.after)
            if key not in joins:
                taken = any(j == join_id for j, _ in joins)
                joins[key] = EmptyOperator(task_id=f"before_{step.label(root)}" if taken else join_id,
                                           trigger_rule="none_failed")
            upstream >> joins[key]
            joins[key] >> group
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
