"""The column job kinds' specs: a UDF column's backfill and a view's refresh, for the generic stage drivers.

Both compute values per fragment and write them as column files, so they share everything but their
planner and the checkpoints a table's current jobs would plan with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from geneva_provider.core.column_paths import missing_paths
from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.models import Action, ColumnPlan, PlanSummary, Task, VerifyResult, WriteResult
from geneva_provider.core.fingerprints import fingerprint_column
from geneva_provider.core.fragments import column_field_ids, column_leaf_ids
from geneva_provider.core.listing import shortened
from geneva_provider.pipeline.columns import compute, verify, write
from geneva_provider.pipeline.columns.inputs import CopyInput, InputFactory, ScanInput
from geneva_provider.pipeline.stages.kinds import CheckpointFamily, HeldSource, JobKindSpec, StageProgress

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.spark.task_runner import TaskRunner
    from geneva_provider.pipeline.spark.worker_deaths import RunningCall, WorkerDeath
    from geneva_provider.pipeline.stages.context import StageContext


class _ColumnKind(JobKindSpec[ColumnPlan, Task]):
    """What a backfill and a view refresh share: fragments' values computed, written and committed as column files.

    They differ in what a task reads and computes (``job_input``): a backfill scans the table's own rows,
    a refresh copies the source rows a view fragment names.
    """

    def __init__(self, job_input: InputFactory) -> None:
        self.job_input = job_input

    def pending_tasks(self, plan: ColumnPlan, store: CheckpointStore) -> list[Task]:
        return compute.remaining_tasks(plan, store)

    def executor(self, ctx: StageContext) -> compute.ColumnExecutor:
        return compute.ColumnExecutor(ctx, self.job_input)

    def progress(self, plan: ColumnPlan, store: CheckpointStore, tasks: list[Task]) -> StageProgress:
        return compute.ApplyProgress(plan, store, tasks)

    def death_fallback(self, plan: ColumnPlan, tasks: Sequence[Task]) -> str | None:
        columns = plan.source.udf_columns if plan.source is not None else plan.row_group.columns
        udf = f"UDF '{plan.udf.name}'" if plan.udf is not None else "a UDF"
        frags = sorted({p.frag for t in tasks for p in t.parts})
        shown = f"fragment {frags[0]}" if len(frags) == 1 else f"fragments {shortened(frags)}"
        return f"{udf} killed its Python worker computing column(s) {columns} of table '{plan.table}' at {shown}" \
            if frags else None

    def locate(self, runner: TaskRunner, ctx: StageContext, store: CheckpointStore, call: RunningCall,
               tasks: list[Task], profile: Any | None) -> tuple[RunningCall, WorkerDeath] | None:
        return compute.locate(runner, ctx, self.job_input, store, call, tasks, profile)

    def check_applied(self, plan: ColumnPlan, store: CheckpointStore) -> None:
        write.check_applied(plan, store)

    def write_commit(self, plan: ColumnPlan, store: CheckpointStore, runner: TaskRunner,
                     storage_options: dict[str, str] | None) -> WriteResult:
        return write.write_commit(plan, runner, storage_options)

    def verify(self, plan: ColumnPlan, store: CheckpointStore, storage_options: dict[str, str] | None
               ) -> VerifyResult:
        return verify.verify_columns(plan, store, storage_options)

    def held_fragments(self, plan: ColumnPlan) -> set[int]:
        return {f.id for f in plan.fragments if f.action in (Action.COMPUTE, Action.REUSE)}


class BackfillKind(_ColumnKind):
    """A UDF column's backfill: the table's own rows read, the column's UDF run over those that need it."""

    kinds = (JobKind.BACKFILL,)

    @property
    def planner(self) -> Callable[..., PlanSummary]:
        from geneva_provider.pipeline.columns.plan_backfill import plan_backfill

        return plan_backfill

    def checkpoint_families(self, ds: Dataset, table: TableRef) -> dict[str, CheckpointFamily]:
        from geneva_provider.core.functions.udf import udf_column_info
        from geneva_provider.pipeline.columns.plan_backfill import backfill_prefix

        families: dict[str, CheckpointFamily] = {}
        names = ds.schema.names
        for column in names:
            udf = udf_column_info(ds.schema.field(column).metadata)
            fp = fingerprint_column(column)
            if udf is None or fp not in names or missing_paths(ds.schema, udf.input_columns or []):
                continue
            read_ids = sorted({i for c in udf.input_columns or [] for i in column_field_ids(ds, c)})
            if any(c not in names for c in udf.columns(column)):
                continue
            out = [i for c in [*udf.columns(column), fp] for i in column_leaf_ids(ds, c)]
            families[backfill_prefix(udf, column, table.uri)] = CheckpointFamily(read_ids, out)
        return families


class RefreshKind(_ColumnKind):
    """A query view's refresh: the source rows the view names copied, its UDF columns computed."""

    kinds = (JobKind.REFRESH,)
    computes_udf_columns = True

    @property
    def planner(self) -> Callable[..., PlanSummary]:
        from geneva_provider.pipeline.columns.plan_refresh import plan_query_refresh

        return plan_query_refresh

    def checkpoint_families(self, ds: Dataset, table: TableRef) -> dict[str, CheckpointFamily]:
        from geneva_provider.core.views.meta import view_info
        from geneva_provider.pipeline.columns.plan_refresh import refresh_identity

        info = view_info(ds.schema.metadata or {}, table.name)
        outputs = info.query.output_columns()
        if not all(c in ds.schema.names for c in outputs):
            return {}
        prefix, _ = refresh_identity(ds, info, table)
        return {prefix: CheckpointFamily(None, [i for c in outputs for i in column_leaf_ids(ds, c)])}

    def held_source(self, ds: Dataset, table: TableRef) -> HeldSource:
        from geneva_provider.core.views.meta import view_info

        info = view_info(ds.schema.metadata or {}, table.name)
        return HeldSource(info.base_table_db_uri, info.base_table, info.base_table_version)


BACKFILL = BackfillKind(ScanInput)
REFRESH = RefreshKind(CopyInput)
