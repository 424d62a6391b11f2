r"""The job-kind protocol and its registry: the one place that tells one kind of job from another.

Every kind of job -- a UDF column's backfill, a view's refresh, a UDTF view's refresh, a compaction -- is a
:class:`KindSpec` registered in ``_KINDS``: what a live plan of it holds (the table's fragments a compaction
leaves alone, the checkpoints clean-up keeps), its planner, and the Spark stages its jobs run.  The kinds that
compute (plan, apply on Spark, write+commit, verify) are :class:`JobKindSpec`\ s: the generic drivers in this
package hold what they share, and what differs is asked of the kind -- the executor a Spark partition opens once
for all its tasks, which tasks are still to run, the progress line, write+commit, verify.

A new job kind is one more spec registered in ``_KINDS`` (the checklist is in docs/ARCHITECTURE.md, "Adding a job
kind"); no stage, operator, compaction or clean-up learns its name or its plan's type.
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

from geneva_provider.core.contracts.kinds import JobKind, Stage

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import (
        ApplyTaskResult,
        JobPlan,
        PlanBase,
        PlanSummary,
        VerifyResult,
        WriteResult,
    )
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.core.store.layout import BatchKey
    from geneva_provider.pipeline.spark.task_runner import TaskRunner
    from geneva_provider.pipeline.spark.worker_deaths import RunningCall, WorkerDeath
    from geneva_provider.pipeline.stages.context import StageContext

log = logging.getLogger(__name__)

P = TypeVar("P", bound="PlanBase")
JP = TypeVar("JP", bound="JobPlan")
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


class KindSpec(ABC, Generic[P]):
    """One kind of job, whatever stages it runs: what clean-up, compaction and the stage programs ask of it.

    ``P`` is the kind's plan model (one branch of :data:`~geneva_provider.core.contracts.models.Plan`, a
    :class:`~geneva_provider.core.contracts.models.PlanBase`).
    """

    kinds: ClassVar[tuple[JobKind, ...]]

    @property
    @abstractmethod
    def planner(self) -> Callable[..., PlanSummary]:
        """The kind's plan stage function (``plan_backfill``, ``plan_refresh``'s body, ``plan_compaction`` ...)."""

    @abstractmethod
    def held_fragments(self, plan: P) -> set[int]:
        """The table's fragments a live plan will still commit into (a compaction leaves them alone)."""

    def checkpoint_prefix(self, plan: P) -> str | None:
        """The job prefix of the batch checkpoints a live plan may still read (None: it reads none)."""
        return None

    def keeps_checkpoint(self, plan: P, key: BatchKey) -> bool:
        """Whether a live plan still needs this batch checkpoint of its job prefix (clean-up keeps it)."""
        return key.frag_id in self.held_fragments(plan)


class JobKindSpec(KindSpec[JP], Generic[JP, T]):
    """One kind of job that computes: everything the generic stage drivers (apply, write+commit, verify) ask of it.

    ``JP`` is the kind's plan model (a column kind's) and ``T`` its task model (what one apply task is sent).
    """

    computed_noun: ClassVar[str] = "rows checkpointed"  # what apply's count of computed work is, in its log line
    counts_calls: ClassVar[bool] = False  # apply reports the function's calls (a UDTF's: parents, partitions)
    # Its job computes the table's UDF columns from another table's rows (a query view's refresh): how stale their
    # values are is the view's lag, not their fingerprints.
    computes_udf_columns: ClassVar[bool] = False

    # ------------------------------------------------------------------ apply
    @abstractmethod
    def pending_tasks(self, plan: JP, store: CheckpointStore) -> list[T]:
        """The plan's tasks that checkpoints do not cover whole yet (a retried apply runs only these)."""

    @abstractmethod
    def executor(self, ctx: StageContext) -> TaskExecutor[T]:
        """Executor side: what a Spark partition opens once for all its tasks."""

    @abstractmethod
    def progress(self, plan: JP, store: CheckpointStore, tasks: list[T]) -> StageProgress:
        """The apply stage's progress line, from the checkpoints written since it began."""

    @abstractmethod
    def death_fallback(self, plan: JP, tasks: Sequence[T]) -> str | None:
        """Who died, when a dead Python worker left no marker of the call it was in (the tasks Spark named)."""

    def locate(self, runner: TaskRunner, ctx: StageContext, store: CheckpointStore, call: RunningCall,
               tasks: list[T], profile: Any | None) -> tuple[RunningCall, WorkerDeath] | None:
        """Narrows a dead call over several fragments down to one (None: the call's own marker is all we know)."""
        return None

    # ------------------------------------------------------------------ write+commit
    @abstractmethod
    def check_applied(self, plan: JP, store: CheckpointStore) -> None:
        """Refuses, before any Spark job and changing nothing, a plan whose apply stage has not ended."""

    @abstractmethod
    def write_commit(self, plan: JP, store: CheckpointStore, runner: TaskRunner,
                     storage_options: dict[str, str] | None) -> WriteResult:
        """Writes the checkpoints as table data and commits it (inside the stage's record)."""

    # ------------------------------------------------------------------ verify
    @abstractmethod
    def verify(self, plan: JP, store: CheckpointStore, storage_options: dict[str, str] | None) -> VerifyResult:
        """Checks the committed result; VerificationError naming what is missing or wrong."""

    # ------------------------------------------------------------------ clean-up
    def checkpoint_prefix(self, plan: JP) -> str | None:
        return plan.job_prefix

    @abstractmethod
    def checkpoint_families(self, ds: Dataset, table: TableRef) -> dict[str, CheckpointFamily]:
        """By job prefix, the checkpoints the table's current jobs of this kind would plan with."""

    # ------------------------------------------------------------------ status
    def held_source(self, ds: Dataset, table: TableRef) -> HeldSource | None:
        """A view's source and the version its rows hold (what ``Table.status()`` measures its lag from); None
        for a kind whose table is no view (a backfill's)."""
        return None


JOB_STAGES = (Stage.APPLY, Stage.WRITE_COMMIT)  # the Spark stages of a kind that computes (verify runs in the task)


@dataclass(frozen=True)
class KindEntry:
    """A registered kind: its spec, as ``"module:attribute"`` (imported on first use), and the Spark stages its jobs
    run (a stage program refuses a plan of any other kind before Spark starts)."""

    spec: str
    spark_stages: tuple[Stage, ...] = JOB_STAGES

    @property
    def computes(self) -> bool:
        """Its jobs run apply, write+commit and verify (its spec is a :class:`JobKindSpec`)."""
        return self.spark_stages == JOB_STAGES


# The registry: one line per kind.
_KINDS: dict[JobKind, KindEntry] = {
    JobKind.BACKFILL: KindEntry("geneva_provider.pipeline.columns.kind:BACKFILL"),
    JobKind.REFRESH: KindEntry("geneva_provider.pipeline.columns.kind:REFRESH"),
    JobKind.UDTF: KindEntry("geneva_provider.pipeline.udtf.kind:UDTF"),
    JobKind.COMPACTION: KindEntry("geneva_provider.pipeline.maintenance.compaction:COMPACTION", (Stage.COMPACT,)),
    JobKind.INDEX: KindEntry("geneva_provider.pipeline.indexes.kind:INDEX", (Stage.INDEX,)),
}
_LOADED: dict[JobKind, KindSpec[Any]] = {}


def registered_kinds() -> list[JobKind]:
    """The job kinds that run the apply, write+commit and verify stages."""
    return [kind for kind, entry in _KINDS.items() if entry.computes]


def every_kind() -> list[JobKind]:
    """Every registered job kind."""
    return list(_KINDS)


def kinds_running(stage: Stage) -> tuple[JobKind, ...]:
    """The kinds whose jobs run the Spark stage ``stage`` (the plans its program accepts)."""
    return tuple(kind for kind, entry in _KINDS.items() if stage in entry.spark_stages)


def kind_of(of: JobKind | str | PlanBase) -> KindSpec[Any]:
    """The spec of any registered kind: by its member, its word, or one of its plans; KeyError otherwise."""
    word = of if isinstance(of, str) else of.kind
    try:
        member = JobKind(word)
        path = _KINDS[member].spec
    except (ValueError, KeyError):
        raise KeyError(f"no job kind '{word}' is registered; the kinds are {', '.join(_KINDS)}") from None
    if member not in _LOADED:
        module, _, name = path.partition(":")
        _LOADED[member] = getattr(importlib.import_module(module), name)
    return _LOADED[member]


def job_kind(kind: JobKind | str) -> JobKindSpec[Any, Any]:
    """The spec of a job kind that computes (its member or its word); KeyError naming those kinds otherwise."""
    entry = _KINDS.get(JobKind(kind)) if kind in set(JobKind) else None
    spec = kind_of(kind) if entry is not None and entry.computes else None
    if not isinstance(spec, JobKindSpec):
        raise KeyError(f"no job kind '{kind}' runs the apply, write+commit and verify stages; those that do are "
                       f"{', '.join(registered_kinds())}")
    return spec


def view_kind(schema_metadata: dict[Any, Any] | None) -> JobKindSpec[Any, Any]:
    """The kind of job that refreshes the view with this schema metadata: a UDTF view's, or a query view's."""
    from geneva_provider.core.views.udtf_meta import is_udtf_view  # Arrow: not loaded by reading the registry

    return job_kind(JobKind.UDTF if is_udtf_view(schema_metadata) else JobKind.REFRESH)


def table_kind(schema_metadata: dict[Any, Any] | None) -> JobKindSpec[Any, Any]:
    """The kind of job a table's checkpoints come from: its view's refresh, or its UDF columns' backfills."""
    metadata = schema_metadata or {}
    is_view = any((k.decode() if isinstance(k, bytes) else k).startswith("geneva::view::") for k in metadata)
    return view_kind(metadata) if is_view else job_kind(JobKind.BACKFILL)
