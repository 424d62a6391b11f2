"""The UDTF job kind's spec: a chunker's or batch UDTF's view refresh, for the generic stage drivers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.models import ExpandPlan, ExpandTask, PlanSummary, VerifyResult, WriteResult
from geneva_provider.core.ranges import positions_of
from geneva_provider.pipeline.stages.kinds import CheckpointFamily, HeldSource, JobKindSpec, StageProgress
from geneva_provider.pipeline.udtf import expand, verify, write

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.core.store.layout import BatchKey
    from geneva_provider.pipeline.spark.task_runner import TaskRunner
    from geneva_provider.pipeline.stages.context import StageContext


class UdtfKind(JobKindSpec[ExpandPlan, ExpandTask]):
    """Parents (or partitions) of a source expanded into a view's rows; the rows they replace deleted at commit."""

    kinds = (JobKind.UDTF,)
    computed_noun = "UDTF calls"
    counts_calls = True

    @property
    def planner(self) -> Callable[..., PlanSummary]:
        from geneva_provider.pipeline.udtf.plan import plan_udtf_refresh

        return plan_udtf_refresh

    def pending_tasks(self, plan: ExpandPlan, store: CheckpointStore) -> list[ExpandTask]:
        return expand.pending_tasks(plan, store)

    def executor(self, ctx: StageContext) -> expand.Expander:
        return expand.Expander(ctx)

    def progress(self, plan: ExpandPlan, store: CheckpointStore, tasks: list[ExpandTask]) -> StageProgress:
        return expand.ExpandProgress(plan, store)

    def death_fallback(self, plan: ExpandPlan, tasks: Sequence[ExpandTask]) -> str | None:
        ids = positions_of([r for t in tasks for p in t.parts for r in p.ranges])
        where = f" at source rows {int(ids.min())}..{int(ids.max())}" if len(ids) else ""
        return f"the UDTF of view '{plan.table}' killed its Python worker expanding rows{where}"

    def check_applied(self, plan: ExpandPlan, store: CheckpointStore) -> None:
        write.check_applied(plan, store)

    def write_commit(self, plan: ExpandPlan, store: CheckpointStore, runner: TaskRunner,
                     storage_options: dict[str, str] | None) -> WriteResult:
        return write.write_commit(plan, store, runner, storage_options)

    def verify(self, plan: ExpandPlan, store: CheckpointStore, storage_options: dict[str, str] | None
               ) -> VerifyResult:
        return verify.verify_udtf(plan, store, storage_options)

    def held_fragments(self, plan: ExpandPlan) -> set[int]:
        return set()  # new fragments are appended, old rows deleted by parent: no fragment of the view is held

    def keeps_checkpoint(self, plan: ExpandPlan, key: BatchKey) -> bool:
        return True  # numbered by part, not by fragment: a live refresh keeps every checkpoint of its prefix

    def checkpoint_families(self, ds: Dataset, table: TableRef) -> dict[str, CheckpointFamily]:
        return {}  # a checkpoint outlives only the live refresh that names it

    def held_source(self, ds: Dataset, table: TableRef) -> HeldSource:
        from geneva_provider.core.views.udtf_meta import udtf_view_state

        state = udtf_view_state(ds.schema.metadata, table.name)
        return HeldSource(state.spec.base_table_db_uri, state.spec.base_table,
                          state.base_version if state.refreshed else None)


UDTF = UdtfKind()
