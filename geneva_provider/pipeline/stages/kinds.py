"""The job-kind protocol and its registry: the one place that tells one kind of job from another.

Every job that computes -- a UDF column's backfill, a view's refresh, a UDTF view's refresh -- runs
the same stages (plan, apply on Spark, write+commit, verify), and the generic drivers in this
package hold what they share.  What differs is asked of the kind's :class:`JobKindSpec`: its planner,
the executor a Spark partition opens once for all its tasks, which tasks are still to run, the
progress line, write+commit, verify, and which checkpoints a live plan still needs.

A new job kind is one more :class:`JobKindSpec` subclass registered in ``_KINDS`` (the checklist is
in docs/ARCHITECTURE.md, "Adding a job kind"); no stage, operator or clean-up learns its name.
Specs are named by ``module:attribute`` and imported on first use, so reading the registry loads
neither Spark nor Lance (the Airflow surface reads it while parsing DAGs).
"""

from __future__ import annotations

import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.views.udtf_meta import is_udtf_view

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import ApplyTaskResult, JobPlan, PlanSummary, VerifyResult, WriteResult
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.core.store.layout import BatchKey
    from geneva_provider.pipeline.spark.task_runner import TaskRunner
    from geneva_provider.pipeline.spark.worker_deaths import RunningCall, WorkerDeath
    from geneva_provider.pipeline.stages.context import StageContext

log = logging.getLogger(__name__)

P = TypeVar("P", bound="JobPlan")
T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class TaskExecutor(Protocol[T_contra]):
    """What one Spark partition opens once (the table, the store, the function) and runs each of its tasks with."""

    def run(self, task: T_contra) -> ApplyTaskResult: ...


class StageProgress(ABC):
    """A stage's progress line, computed from the store every few seconds while its Spark job runs."""

    @abstractmethod
    def __call__(self) -> str:
        """Records the progress in the job's record and returns the line to log."""

    def final(self) -> None:
        """Records the progress when the stage ends -- a failed or cancelled one too, which the periodic call
        may have missed (a rerun starts from it)."""
        try:
            self()
        except Exception as exc:  # noqa: BLE001 - the stage's own outcome (or error) is what matters
            log.warning("could not record the progress of the stage: %s", exc)


@dataclass
class CheckpointFamily:
    """The checkpoints a table's current job of some kind would plan with (clean-up keeps what they can use).

    ``read_ids``: the field ids its values are computed from (None: inputs in another table, a view's);
    ``out_leaves``: the field ids of the columns it writes.
    """

    read_ids: list[int] | None
    out_leaves: list[int]


@dataclass(frozen=True)
class HeldSource:
    """Where a view's rows come from: its source table (by catalog URI and name) and the source version its rows
    hold (None: never refreshed)."""

    db_uri: str
    table: str
    version: int | None


class JobKindSpec(ABC, Generic[P, T]):
    """One kind of job: everything the generic stage drivers ask of it.

    ``P`` is the kind's plan model (one branch of :data:`~geneva_provider.core.contracts.models.Plan`) and ``T``
    its task model (what one apply task is sent).
    """

    kinds: ClassVar[tuple[JobKind, ...]]
    computed_noun: ClassVar[str] = "rows checkpointed"  # what apply's count of computed work is, in its log line
    counts_calls: ClassVar[bool] = False  # apply reports the function's calls (a UDTF's: parents, partitions)
    # Its job computes the table's UDF columns from another table's rows (a query view's refresh): how stale their
    # values are is the view's lag, not their fingerprints.
    computes_udf_columns: ClassVar[bool] = False

    # ------------------------------------------------------------------ plan
    @property
    @abstractmethod
    def planner(self) -> Callable[..., PlanSummary]:
        """The kind's plan stage function (``plan_backfill``, ``plan_refresh``'s body, ...)."""

    # ------------------------------------------------------------------ apply
    @abstractmethod
    def pending_tasks(self, plan: P, store: CheckpointStore) -> list[T]:
        """The plan's tasks that checkpoints do not cover whole yet (a retried apply runs only these)."""

    @abstractmethod
    def executor(self, ctx: StageContext) -> TaskExecutor[T]:
        """Executor side: what a Spark partition opens once for all its tasks."""

    @abstractmethod
    def progress(self, plan: P, store: CheckpointStore, tasks: list[T]) -> StageProgress:
        """The apply stage's progress line, from the checkpoints written since it began."""

    @abstractmethod
    def death_fallback(self, plan: P, tasks: Sequence[T]) -> str | None:
        """Who died, when a dead Python worker left no marker of the call it was in (the tasks Spark named)."""

    def locate(self, runner: TaskRunner, ctx: StageContext, store: CheckpointStore, call: RunningCall,
               tasks: list[T], profile: Any | None) -> tuple[RunningCall, WorkerDeath] | None:
        """Narrows a dead call over several fragments down to one (None: the call's own marker is all we know)."""
        return None

    # ------------------------------------------------------------------ write+commit
    @abstractmethod
    def check_applied(self, plan: P, store: CheckpointStore) -> None:
        """Refuses, before any Spark job and changing nothing, a plan whose apply stage has not ended."""

    @abstractmethod
    def write_commit(self, plan: P, store: CheckpointStore, runner: TaskRunner,
                     storage_options: dict[str, str] | None) -> WriteResult:
        """Writes the checkpoints as table data and commits it (inside the stage's record)."""

    # ------------------------------------------------------------------ verify
    @abstractmethod
    def verify(self, plan: P, store: CheckpointStore, storage_options: dict[str, str] | None) -> VerifyResult:
        """Checks the committed result; VerificationError naming what is missing or wrong."""

    # ------------------------------------------------------------------ clean-up
    @abstractmethod
    def held_fragments(self, plan: P) -> set[int]:
        """The table's fragments a live plan will still commit into (a compaction leaves them alone)."""

    def keeps_checkpoint(self, plan: P, key: BatchKey) -> bool:
        """Whether a live plan still needs this batch checkpoint of its job prefix (clean-up keeps it)."""
        return key.frag_id in self.held_fragments(plan)

    @abstractmethod
    def checkpoint_families(self, ds: Dataset, table: TableRef) -> dict[str, CheckpointFamily]:
        """By job prefix, the checkpoints the table's current jobs of this kind would plan with."""

    # ------------------------------------------------------------------ status
    def held_source(self, ds: Dataset, table: TableRef) -> HeldSource | None:
        """A view's source and the version its rows hold (what ``Table.status()`` measures its lag from); None
        for a kind whose table is no view (a backfill's)."""
        return None


# The registry: each kind's spec, as "module:attribute" (imported on first use).
_KINDS: dict[JobKind, str] = {
    JobKind.BACKFILL: "geneva_provider.pipeline.columns.kind:BACKFILL",
    JobKind.REFRESH: "geneva_provider.pipeline.columns.kind:REFRESH",
    JobKind.UDTF: "geneva_provider.pipeline.udtf.kind:UDTF",
}
_LOADED: dict[JobKind, JobKindSpec[Any, Any]] = {}


def registered_kinds() -> list[JobKind]:
    """The job kinds that run the apply, write+commit and verify stages."""
    return list(_KINDS)


def job_kind(kind: JobKind | str) -> JobKindSpec[Any, Any]:
    """The spec of a job kind (its member or its word); KeyError naming the registered kinds otherwise."""
    try:
        member = JobKind(kind)
        path = _KINDS[member]
    except (ValueError, KeyError):
        raise KeyError(f"no job kind '{kind}' runs the apply, write+commit and verify stages; those that do are "
                       f"{', '.join(_KINDS)}") from None
    if member not in _LOADED:
        module, _, name = path.partition(":")
        _LOADED[member] = getattr(importlib.import_module(module), name)
    return _LOADED[member]


def view_kind(schema_metadata: dict[Any, Any] | None) -> JobKindSpec[Any, Any]:
    """The kind of job that refreshes the view with this schema metadata: a UDTF view's, or a query view's."""
    return job_kind(JobKind.UDTF if is_udtf_view(schema_metadata) else JobKind.REFRESH)


def table_kind(schema_metadata: dict[Any, Any] | None) -> JobKindSpec[Any, Any]:
    """The kind of job a table's checkpoints come from: its view's refresh, or its UDF columns' backfills."""
    metadata = schema_metadata or {}
    is_view = any((k.decode() if isinstance(k, bytes) else k).startswith("geneva::view::") for k in metadata)
    return view_kind(metadata) if is_view else job_kind(JobKind.BACKFILL)
