"""The typed contracts between stages: plan, fragment plan, task, summary, checkpoints, results.

Each model has one JSON encoding (pydantic's), used in the checkpoint store, in Spark task
results and, for :class:`PlanSummary` and the stage results, in XCom (as plain dicts, which
Airflow serialises without an allow-list).  A stored plan carries its format number, and a
plan of another format is refused with :class:`PlanFormatError` instead of being misread.
"""

from __future__ import annotations

import datetime as dt
import json
import typing
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from geneva_provider.core.contracts.error_payload import ErrorPayload
from geneva_provider.core.contracts.index_models import IndexBuildPlan, IndexBuildResult, IndexRefresh, IndexSpec
from geneva_provider.core.contracts.kinds import DigestScheme, EventStatus, JobKind, RowOutcome, Stage
from geneva_provider.core.contracts.lineage_models import Committed, JobLineage
from geneva_provider.core.errors import InvalidArgumentError, PlanFormatError
from geneva_provider.core.resources import ResourceAsk
from geneva_provider.core.wording import counted, skipped_rows

PLAN_FORMAT = 4  # 4: plans are a union discriminated by kind; a UDTF refresh's tasks are ExpandTasks; outputs in groups


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Action(StrEnum):
    """What the planner decided for a fragment."""

    COMPUTE = "compute"  # some rows need their value: compute those not checkpointed yet, then write and commit
    REUSE = "reuse"      # a staged-files record holds a file that covers the job: commit it, compute nothing
    DONE = "done"        # every row's value is valid (its fingerprint matches its inputs): nothing to do
    EMPTY = "empty"      # no selected row needs a value: nothing to compute or commit


class DataFileRef(_Model):
    """A Lance ``DataFile`` (a staged column file) in JSON form."""

    path: str
    fields: list[int]
    column_indices: list[int]
    file_major_version: int
    file_minor_version: int
    file_size_bytes: int | None = None
    base_id: int | None = None

    def to_lance(self) -> Any:
        from geneva_provider.core.data_files import PlainPathDataFile

        return PlainPathDataFile(**self.model_dump())


class FragmentPlan(_Model):
    """The plan of one fragment: its decision, the rows that need values, and what its result depends on.

    About 230 bytes of JSON for a fragment with one input file (fields that are None are left out).
    """

    id: int
    physical_rows: int
    rows: int                     # rows needing a value (COMPUTE), held by the staged file (REUSE), valid (DONE)
    action: Action
    src_files: list[str]          # files the fragment's values are computed from
    base_file: str | None = None  # the output's committed files when planned (kept for rows not recomputed)
    src_key: str | None = None    # names the batch checkpoints of these inputs (COMPUTE)
    needed: list[tuple[int, int]] = Field(default_factory=list)  # live-row positions needing a value (runs)
    complete: bool = False        # after this job every live row of the fragment holds a valid value
    file: DataFileRef | None = None  # the staged file to commit (REUSE)


class _Runs(_Model):
    """Runs ``[start, end)`` of row positions or row ids that a task part covers, and the key of its checkpoints."""

    ranges: list[tuple[int, int]]
    src_key: str

    @property
    def rows(self) -> int:
        return sum(e - s for s, e in self.ranges)

    @property
    def start(self) -> int:
        return self.ranges[0][0]

    @property
    def end(self) -> int:
        return self.ranges[-1][1]


class FileTarget(_Model):
    """What a task that computes every planned row of a fragment needs to write the fragment's column file itself.

    Set on a task part that holds all of its fragment's rows to compute (none checkpointed before): the apply
    then stages the fragment's final file straight from the rows it computed, and write+commit only commits
    it -- no batch checkpoint is written and read back, and no writer task runs for the fragment.
    """

    physical_rows: int
    src_files: list[str]
    base_file: str | None = None
    complete: bool = False

    @classmethod
    def of(cls, entry: FragmentPlan) -> FileTarget:
        # Not validated again: the fields are a validated FragmentPlan's (one target a fragment of a large plan).
        return cls.model_construct(physical_rows=entry.physical_rows, src_files=entry.src_files,
                                   base_file=entry.base_file, complete=entry.complete)


class TaskPart(_Runs):
    """The share of one fragment in a task: runs of its live-row positions."""

    frag: int
    target: FileTarget | None = None  # this part is every row of the fragment to compute: apply writes its file


class ExpandPart(_Runs):
    """The share of a UDTF view refresh in a task: parents to expand (a chunker) or one partition (a batch UDTF).

    ``ranges`` are runs of source row ids: the parents a chunker expands, or the rows of the partition a
    batch UDTF runs over (``partition`` indexes ``UdtfWork.partitions``). ``src_key`` names the
    checkpoints of what the part is expanded from.
    """

    partition: int | None = None


class _PartsTask(_Model):
    parts: Sequence[_Runs]

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)


class Task(_PartsTask):
    """One apply task: parts of one or more fragments (small fragments are packed together), sized by rows."""

    parts: list[TaskPart]


class ExpandTask(_PartsTask):
    """One apply task of a UDTF view refresh: parts of parents (or partitions)."""

    parts: list[ExpandPart]


class UdfRef(_Model):
    """Which UDF a backfill runs (its pickled code stays in the column's field metadata)."""

    name: str
    version: str
    kind: str


class SourceSpec(_Model):
    """A refresh's source: the table and version the view's rows are copied and computed from."""

    uri: str
    version: int
    copied: dict[str, str]      # view column -> source column
    udf_columns: list[str]
    read_columns: list[str]


class UdtfWork(_Model):
    """A UDTF view refresh: the source version its rows are expanded from, and what leaves the view.

    The plan's tasks name the parents to expand: each task part's ranges are runs of source row ids
    (a chunker) or a partition's row ids (a batch UDTF, whose ``frag`` indexes ``partitions``).
    """

    source_uri: str
    source_version: int
    base_version: int                   # the source version the view held when planned (-1: never refreshed)
    read_columns: list[str]             # source columns read for each parent
    delete_parents: list[tuple[int, int]] = Field(default_factory=list)  # runs of parent ids whose rows go
    delete_partitions: list[int] = Field(default_factory=list)  # a batch UDTF: partition hashes whose rows go
    partitions: list[tuple[int, int]] = Field(default_factory=list)  # a batch UDTF: (hash, fingerprint) per part
    partition_state: dict[str, int] | None = None  # a batch UDTF: every partition's fingerprint after the refresh
    max_rows_per_fragment: int | None = None
    generation: int = 0                 # the view's refresh generation when planned (this refresh: +1)
    source_transaction: str | None = None  # the uuid of the source version's commit (the source's identity)
    fingerprints: DigestScheme = DigestScheme.BLAKE2B  # the view's fingerprint scheme (a plan without it: BLAKE2b)

    @property
    def deletes(self) -> bool:
        return bool(self.delete_parents or self.delete_partitions)


class PlanSettings(_Model):
    """The job options as resolved by the planner (defaults filled in)."""

    checkpoint_size: int
    min_checkpoint_size: int
    max_checkpoint_size: int
    task_size: int | None = None
    commit_granularity: int | None = None
    concurrency: int | None = None
    parallelism: int
    commit_retries: int | None = None
    commit_timeout: int | None = None
    intra_applier_concurrency: int | None = None  # a backfill's UDF calls in flight per task (None: the UDF's own)
    deadline: float | None = None  # epoch seconds past which apply's tasks stop at their next checkpoint (timeout)
    # Seconds of work per batch checkpoint (batch_checkpoint_flush_interval_seconds; None: the sizer's default,
    # 0: every checkpoint is min_checkpoint_size rows, written at once).
    checkpoint_seconds: float | None = None


class OutputGroup(_Model):
    """Output columns a job writes together, and the fingerprint column that tells while their values are valid.

    A UDF column's group is its column -- N columns for a multi-output UDF -- with the UDF's fingerprint
    column (the fingerprint of the inputs the values were computed from).  A group without a fingerprint
    has none of its own: a view's copied columns are copied again whenever the row's fingerprint says the
    row is stale, a UDTF's rows carry their parent's fingerprint in columns of their own.
    """

    columns: list[str] = Field(min_length=1)
    fingerprint: str | None = None


def output_layout(groups: Sequence[OutputGroup], row_fingerprint: str | None) -> list[str]:
    """The flat list of output columns, in the order a job's column files hold them.

    The value columns of every group, then their fingerprint columns, and the group whose fingerprint
    is the row fingerprint last, whole: ``[column, fingerprint]`` for a backfill; ``[copied..., udf
    columns..., their fingerprints..., __is_set, row fingerprint]`` for a view refresh -- the layout
    of the files already committed, so a later commit replaces them field for field.
    """
    rows = [g for g in groups if row_fingerprint is not None and g.fingerprint == row_fingerprint]
    others = [g for g in groups if g not in rows]
    return [*(c for g in others for c in g.columns), *(g.fingerprint for g in others if g.fingerprint is not None),
            *(c for g in rows for c in g.columns), *(g.fingerprint for g in rows if g.fingerprint is not None)]


class ColumnIncarnation(_Model):
    """Which column of its name a job planned to write into: its incarnation, as the plan saw it.

    Lance may give a column dropped and added again the very field ids it had (the highest ids are
    free again once their column is dropped), so names and field ids alone cannot tell a re-created
    column from the one planned: the package's ``column_uid`` (new at every ``add_columns``) and the
    Arrow type can.  Every commit into an existing column compares them
    (:func:`~geneva_provider.core.incarnations.check_incarnations`).
    """

    column: str
    uid: str = ""          # the package's column_uid on the field ("" for a column that has none)
    field_ids: list[int]   # its leaf field ids
    type: str              # its Arrow type

    def describe(self) -> str:
        """The incarnation as errors name it."""
        return f"column_uid {self.uid or '(none)'}, field ids {self.field_ids}, type {self.type}"


class _TableJob(_Model):
    """What names a job and the table version it works on: every plan holds it, and so does what executors are sent."""

    kind: JobKind
    table: str
    table_uri: str
    read_version: int


class PlanBase(_TableJob):
    """What every stored job plan holds, whatever its kind: its id, when it was made, the table version it
    pinned and the checkpoint store it lives in.

    A kind's plan is a subclass with ``kind: Literal[JobKind.X]`` (one branch of :data:`Plan`) that adds its own
    fields -- a column kind's outputs and incarnations (:class:`JobSpec`), a compaction's rewrite tasks -- and
    says whether it has anything to do and what its summary is.  What a kind does with its plan is asked of its
    spec in the pipeline's registry of kinds, never of the plan's type.
    """

    format: int = PLAN_FORMAT
    job_id: str
    created_at: str
    store_uri: str

    @property
    def nothing_to_do(self) -> bool:
        """No work for any stage after the plan: each is a no-op, and the job gets no record."""
        raise NotImplementedError

    def summary(self, plan_uri: str) -> PlanSummary:
        """The XCom-sized view of the plan."""
        raise NotImplementedError

    def label(self) -> str:
        """How logs and errors name the job."""
        return f"{self.kind} of table '{self.table}'"

    @classmethod
    def describe_summary(cls, summary: PlanSummary) -> str:
        """What a plan of this kind found, from its summary (:meth:`PlanSummary.describe`)."""
        if summary.nothing_to_do:
            return f"nothing to do at version {summary.read_version}"
        return f"{counted(summary.tasks, 'task')} at version {summary.read_version}"


def _up_to_date(summary: PlanSummary) -> str | None:
    """The column kinds' wording of a plan with nothing to do (None: it has work)."""
    valid = f"{counted(summary.fragments_done, 'fragment')} already valid"
    return f"nothing to do: up to date at version {summary.read_version} ({valid})" if summary.nothing_to_do else None


class JobSpec(_TableJob):
    """What a column kind's job computes and where: everything a stage needs except the per-fragment plan.

    The column kinds (a UDF column's backfill, a view's refresh, a UDTF view's refresh) write output columns
    judged by fingerprints; these are their fields, apart from the kind-neutral :class:`PlanBase`.
    """

    kind: Literal[JobKind.BACKFILL, JobKind.REFRESH, JobKind.UDTF]
    column: str | None = None
    outputs: list[OutputGroup] = Field(min_length=1)  # the columns the job writes, by fingerprint
    row_fingerprint: str | None = None  # the fingerprint the planner checks row by row (a group's); apply writes it
    input_columns: list[str] = Field(default_factory=list)
    where: str | None = None
    output_field_ids: list[int]
    column_uid: str
    data_storage_version: str
    job_prefix: str
    # The output columns' incarnations when planned: a commit into a column re-created since is refused
    # (empty: a plan of an earlier release, whose commits compare field ids alone).
    incarnations: list[ColumnIncarnation] = Field(default_factory=list)
    udf: UdfRef | None = None
    source: SourceSpec | None = None
    rows_appended: int = 0
    max_failed_rows: int | None = None        # the UDFs' skip limits: past them the job fails
    max_failed_fraction: float | None = None  # of rows_total
    rows_total: int = 0                       # live rows of the table at the read version
    resource_asks: list[ResourceAsk] = Field(default_factory=list)  # the UDFs' CPU / GPU / memory needs per task
    udtf: UdtfWork | None = None  # a UDTF view refresh: its source and deletions
    lineage: JobLineage | None = None  # what it reads and writes, column by column (OpenLineage's facts)

    @model_validator(mode="after")
    def _groups_agree(self) -> JobSpec:
        fingerprints = [g.fingerprint for g in self.outputs if g.fingerprint is not None]
        names = [*(c for g in self.outputs for c in g.columns), *fingerprints]
        if len(set(names)) != len(names):
            raise ValueError(f"output groups {[g.model_dump() for g in self.outputs]} name a column twice")
        if self.row_fingerprint is not None and self.row_fingerprint not in fingerprints:
            raise ValueError(f"row fingerprint '{self.row_fingerprint}' is no output group's fingerprint")
        return self

    @property
    def output_columns(self) -> list[str]:
        """Every output column, flat, in the order the job's column files hold them (:func:`output_layout`)."""
        return output_layout(self.outputs, self.row_fingerprint)

    @property
    def row_fingerprint_column(self) -> str:
        """The row fingerprint's column: the planner judges rows by it, apply writes the inputs' fingerprints to it."""
        if self.row_fingerprint is None:
            raise InvalidArgumentError(f"the {self.label()} has no row fingerprint: it computes no column values")
        return self.row_fingerprint

    @property
    def row_group(self) -> OutputGroup:
        """The group whose fingerprint is the row fingerprint (a backfill's: its UDF's columns)."""
        fingerprint = self.row_fingerprint_column
        return next(g for g in self.outputs if g.fingerprint == fingerprint)

    @property
    def value_columns(self) -> list[str]:
        """Every output column that holds values, not fingerprints."""
        return [c for g in self.outputs for c in g.columns]

    def label(self) -> str:
        """How logs and errors name the job."""
        if self.kind in (JobKind.REFRESH, JobKind.UDTF):
            return f"refresh of view '{self.table}'"
        return f"backfill of column '{self.column}' in table '{self.table}'"


class _JobPlan(JobSpec, PlanBase):
    """What every plan of a column kind (backfill, view refresh, UDTF refresh) holds: the kind-neutral base, its
    job, and its settings and counts."""

    settings: PlanSettings
    rows_to_compute: int
    rows_reused: int

    def job(self) -> JobSpec:
        """The plan without its fragments and tasks: what executors are sent."""
        return JobSpec.model_validate(self.model_dump(include=set(JobSpec.model_fields)))

    def _summary(self, plan_uri: str, **counts: Any) -> PlanSummary:
        return PlanSummary(
            job_id=self.job_id, plan_uri=plan_uri, kind=self.kind, table=self.table, column=self.column,
            read_version=self.read_version, rows_to_compute=self.rows_to_compute, rows_reused=self.rows_reused,
            rows_appended=self.rows_appended, nothing_to_do=self.nothing_to_do, lineage=self.lineage, **counts)


class ColumnPlan(_JobPlan):
    """A backfill's or a view refresh's plan: column values computed per fragment, then written as column files."""

    kind: Literal[JobKind.BACKFILL, JobKind.REFRESH]
    fragments: list[FragmentPlan]
    tasks: list[Task]

    def count(self, action: Action) -> int:
        return sum(1 for f in self.fragments if f.action is action)

    @property
    def nothing_to_do(self) -> bool:
        """No task to run and no fragment to write or commit: every stage after the plan is a no-op."""
        return not self.tasks and not self.count(Action.REUSE) and not self.count(Action.COMPUTE)

    def summary(self, plan_uri: str) -> PlanSummary:
        """The XCom-sized view of the plan."""
        return self._summary(plan_uri, tasks=len(self.tasks), fragments_to_compute=self.count(Action.COMPUTE),
                             fragments_reused=self.count(Action.REUSE), fragments_done=self.count(Action.DONE))

    @classmethod
    def describe_summary(cls, summary: PlanSummary) -> str:
        if (nothing := _up_to_date(summary)) is not None:
            return nothing
        appended = f" ({counted(summary.rows_appended, 'source row')} appended)" \
            if summary.kind == JobKind.REFRESH else ""
        return (f"{counted(summary.rows_to_compute, 'row')} to compute{appended} in {counted(summary.tasks, 'task')} "
                f"over "
                f"{counted(summary.fragments_to_compute, 'fragment')} at version {summary.read_version}; "
                f"{counted(summary.fragments_reused, 'staged fragment')} reused, "
                f"{counted(summary.fragments_done, 'fragment')} already valid, "
                f"{counted(summary.rows_reused, 'row')} already computed")


class ExpandPlan(_JobPlan):
    """A UDTF view refresh's plan: parents (or partitions) expanded into new rows, and the rows they replace."""

    kind: Literal[JobKind.UDTF]
    udtf: UdtfWork
    tasks: list[ExpandTask]

    @property
    def nothing_to_do(self) -> bool:
        return not self.tasks and not self.udtf.deletes

    def summary(self, plan_uri: str) -> PlanSummary:
        return self._summary(plan_uri, tasks=len(self.tasks), fragments_to_compute=0, fragments_reused=0,
                             fragments_done=0)

    @classmethod
    def describe_summary(cls, summary: PlanSummary) -> str:
        if (nothing := _up_to_date(summary)) is not None:
            return nothing
        return (f"{counted(summary.rows_to_compute, 'source row')} to expand in {counted(summary.tasks, 'task')} "
                f"(view version {summary.read_version})")


class PlanSummary(_Model):
    """What the plan stage returns (XCom): a reference to the plan and its counts."""

    job_id: str
    plan_uri: str
    kind: JobKind = JobKind.BACKFILL
    table: str
    namespace: list[str] = Field(default_factory=list)  # the child namespace the table is in ([]: the root's)
    column: str | None = None
    read_version: int
    rows_to_compute: int
    rows_reused: int
    rows_appended: int = 0
    tasks: int
    fragments_to_compute: int
    fragments_reused: int
    fragments_done: int
    nothing_to_do: bool
    fragments_excluded: list[int] = Field(default_factory=list)  # compaction: left alone, held by live jobs
    fragments_held_by: dict[str, list[int]] = Field(default_factory=dict)  # compaction: live job id -> its fragments
    index_name: str | None = None  # an index build: the index it builds or refreshes
    lineage: JobLineage | None = None  # the tables (and a column job's columns) it reads and writes (no secret)

    @classmethod
    def from_xcom(cls, value: Any) -> PlanSummary:
        """Accepts the summary as a dict, a model, or its text from a rendered template.

        ``"{{ ti.xcom_pull(task_ids='plan') }}"`` renders the dict's Python repr (single quotes,
        ``True``/``None``), not JSON, so both are read (the repr as a literal, never evaluated).
        """
        import ast

        if isinstance(value, PlanSummary):
            return value
        if isinstance(value, str):
            for parse in (json.loads, ast.literal_eval):
                try:
                    value = parse(value.strip())
                    break
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    continue
        try:
            return cls.model_validate(value)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"expected the plan summary returned by the plan task, got {value!r:.200}; pass plan=plan.output "
                "(the plan operator's XComArg), or a template rendering it as JSON: "
                "\"{{ ti.xcom_pull(task_ids='plan') | tojson }}\"") from exc

    def to_xcom(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def describe(self) -> str:
        """What the plan found, in the one wording the plan stage, the operators and the DAG logs all use: its
        kind's plan model words it (:meth:`PlanBase.describe_summary`)."""
        return plan_model(self.kind).describe_summary(self)



class FragmentCheckpoint(_Model):
    """The staged column file written for one fragment, and what it was computed from."""

    file: DataFileRef
    src_data_files: list[str]
    output_field_ids: list[int]
    column_uid: str
    base_file: str | None = None
    rows: int
    where: str | None = None  # the filter of the job that staged it
    complete: bool = False    # the staged file holds a valid value for every live row
    job_id: str | None = None  # the plan that staged it: a retry of that plan knows its own earlier commits


class StagedFiles(_Model):
    """What one writer staged: a column file per fragment, not yet known committed (one record, many fragments)."""

    files: dict[int, FragmentCheckpoint]


class TaskError(_Model):
    """A UDF failure inside an apply task, returned as data so Spark does not retry it."""

    message: str
    exception: str
    frag: int


class RowError(_Model):
    """A row a UDF failed on (in at least one attempt): what the error store keeps of it."""

    column: str
    frag: int
    row_address: int | None = None  # None: a whole batch failed and was retried
    error_type: str
    message: str
    traceback: str = ""
    attempts: int = 1
    outcome: RowOutcome


class ApplyTaskResult(_Model):
    """What one apply task did."""

    frag: int = 0
    rows_computed: int = 0
    calls: int = 0  # the function's calls (counted by kinds that report them: a UDTF's)
    rows_skipped: int = 0
    checkpoints: int = 0
    read_seconds: float = 0.0  # reading the inputs of its rows
    udf_seconds: float = 0.0   # calling the UDF and fingerprinting (its read not included)
    error: TaskError | None = None
    failures: list[RowError] = Field(default_factory=list)
    timed_out: bool = False  # the job's deadline passed: the task stopped before its next checkpoint


class WrittenFragment(_Model):
    """What one writer task staged for one fragment."""

    frag: int
    file: DataFileRef
    rows: int
    complete: bool = False  # every live row now holds a valid value (no row was skipped)


class ApplyResult(_Model):
    """The apply stage's counts."""

    stage: Literal[Stage.APPLY] = Stage.APPLY
    job_id: str
    tasks_run: int
    rows_computed: int
    rows_reused: int
    checkpoints_written: int
    errors: int
    rows_failed: int = 0     # rows skipped by the UDF's error policy (NULL, in the error store)
    rows_retried: int = 0    # rows that failed an attempt and then succeeded
    seconds: float
    max_tasks_at_once: int | None = None  # under a UDF's resource profile: most tasks that overlapped in time
    udtf_calls: int | None = None  # a UDTF view refresh: the UDTF's calls (parents expanded, partitions run)
    timed_out: bool = False  # the job's timeout passed: tasks stopped at a checkpoint, rows are left to compute

    def committed(self) -> Committed | None:
        """Nothing: the apply stage commits no version (its write+commit does)."""
        return None


class WriteResult(_Model):
    """The write+commit stage's outcome."""

    stage: Literal[Stage.WRITE_COMMIT] = Stage.WRITE_COMMIT
    job_id: str
    version: int
    fragments_committed: int
    rows_committed: int
    fragments_vanished: list[int]
    commit_retries: int
    seconds: float
    files_written: int = 0  # data files the job's commits added to the table
    bytes_written: int = 0  # ... and their size

    def committed(self) -> Committed:
        """What lineage reports of it: the version left, the rows, bytes and files written."""
        return Committed(version=self.version, rows=self.rows_committed, bytes=self.bytes_written,
                         files=self.files_written)


class GroupFragments(_Model):
    """The fragments a UDTF refresh wrote for one commit (Lance ``FragmentMetadata`` JSON)."""

    fragments: list[str]
    rows: int
    pending: list[int] = Field(default_factory=list)  # parents whose expansion the error policy skipped


class ExpandedFragments(_Model):
    """What one UDTF checkpoint wrote: its rows, as new fragments of the view not yet committed (Lance
    ``FragmentMetadata`` JSON), kept in the checkpoint's schema metadata beside the parents it expanded."""

    fragments: list[str]
    rows: int


class AppendedFragments(_Model):
    """What a UDTF view refresh wrote, by commit group, each recorded before its commit; and which landed."""

    groups: dict[int, GroupFragments] = Field(default_factory=dict)
    committed: list[int] = Field(default_factory=list)


class CommitRecord(_Model):
    """Left beside the plan when its commits are done: the outcome, and the file committed per fragment."""

    result: WriteResult
    staged: dict[int, str] = Field(default_factory=dict)


class Ledger(_Model):
    """Fragments known to hold a valid value in every live row, by the files that made them so.

    A cache that lets a plan skip reading a fragment whose files did not change: an entry names
    files by path, and Lance never rewrites a file in place, so an entry can never be wrong.
    """

    fragments: dict[int, list[str]] = Field(default_factory=dict)
    # What the job prefix's last apply measured a row to cost (reading its inputs, the UDF, fingerprints),
    # in seconds: how the next plan judges whether splitting a fragment over tasks can pay.
    row_seconds: float | None = None


class CompactionPlan(PlanBase):
    """A distributed compaction: Lance's rewrite tasks (pickled), planned on the driver, run on executors."""

    kind: Literal[JobKind.COMPACTION] = JobKind.COMPACTION
    options: dict[str, Any]
    tasks: list[str]               # base64 pickles of lance.optimize.CompactionTask
    fragments: list[int]           # fragments the tasks rewrite
    rows: int                      # live rows they hold
    excluded: list[int]            # fragments left alone: asked for, or held by a live job
    held_by: dict[str, list[int]] = Field(default_factory=dict)  # live job id -> the fragments it holds
    exclude_live_jobs: bool = True  # re-read the holds before committing, and leave held fragments alone
    commit_retries: int | None = None  # the commit's retries (None: the default)
    commit_timeout: int | None = None  # seconds the commit may spend retrying (None: the default)

    @property
    def nothing_to_do(self) -> bool:
        """No fragment to rewrite: the compaction stage is a no-op."""
        return not self.tasks

    def summary(self, plan_uri: str) -> PlanSummary:
        return PlanSummary(job_id=self.job_id, plan_uri=plan_uri, kind=self.kind, table=self.table,
                           read_version=self.read_version, rows_to_compute=0, rows_reused=0, tasks=len(self.tasks),
                           fragments_to_compute=len(self.fragments), fragments_reused=0, fragments_done=0,
                           nothing_to_do=self.nothing_to_do, fragments_excluded=self.excluded,
                           fragments_held_by=self.held_by,
                           lineage=JobLineage.of_table(self.table_uri, self.read_version))

    @classmethod
    def describe_summary(cls, summary: PlanSummary) -> str:
        left = f"; fragments {summary.fragments_excluded} left alone (held by live jobs)" \
            if summary.fragments_excluded else ""
        if summary.nothing_to_do:
            return f"nothing to do: nothing to compact at version {summary.read_version}{left}"
        return (f"{counted(summary.tasks, 'rewrite task')} over {counted(summary.fragments_to_compute, 'fragment')} "
                f"at version {summary.read_version}{left}")


class CompactionResult(_Model):
    """What a compaction did."""

    stage: Literal[Stage.COMPACT] = Stage.COMPACT
    job_id: str
    version: int
    fragments_removed: int
    fragments_added: int
    files_removed: int
    files_added: int
    excluded: list[int] = Field(default_factory=list)
    held_by: dict[str, list[int]] = Field(default_factory=dict)  # live job id -> its fragments, left alone
    seconds: float = 0.0
    indexes: list[IndexBuildResult] = Field(default_factory=list)  # the remap check's refreshes (indexed something)

    def committed(self) -> Committed:
        """What lineage reports of it: the version left and the data files it wrote."""
        return Committed(version=self.version, files=self.files_added)

    def describe(self) -> str:
        """What it rewrote, in the one wording of its log line and the CLI's answer (without the holders' names)."""
        left = f"; fragments {self.excluded} left alone (held by live jobs)" if self.excluded else ""
        return (f"{counted(self.fragments_removed, 'fragment')} rewritten into {self.fragments_added:,} at version "
                f"{self.version}{left}")


class IndexPlan(PlanBase):
    """An index build or add-only refresh as a job: what was asked (``request``) and the build it planned -- one
    pinned version, fragment groups (one segment task each), the artifacts trained once on the driver -- or None
    when there is nothing to index (a refresh of an index covering every fragment)."""

    kind: Literal[JobKind.INDEX] = JobKind.INDEX
    index_name: str
    request: IndexSpec | IndexRefresh  # a build of a spec, or a refresh of an index by name
    build: IndexBuildPlan | None = None
    target_groups: int | None = None  # segment tasks asked for (None: the runner's parallelism)
    max_segments: int

    @property
    def nothing_to_do(self) -> bool:
        """Nothing to index: the index stage is a no-op and the job gets no record."""
        return self.build is None

    @property
    def column(self) -> str | None:
        return self.build.spec.column if self.build is not None else getattr(self.request, "column", None)

    def summary(self, plan_uri: str) -> PlanSummary:
        build = self.build
        fragments = sum(len(g) for g in build.groups) if build is not None else 0
        return PlanSummary(job_id=self.job_id, plan_uri=plan_uri, kind=self.kind, table=self.table, column=self.column,
                           read_version=self.read_version, rows_to_compute=build.rows if build is not None else 0,
                           rows_reused=0, tasks=len(build.groups) if build is not None else 0,
                           fragments_to_compute=fragments, fragments_reused=0, fragments_done=0,
                           nothing_to_do=self.nothing_to_do, index_name=self.index_name,
                           lineage=JobLineage.of_table(self.table_uri, self.read_version))

    @classmethod
    def describe_summary(cls, summary: PlanSummary) -> str:
        if summary.nothing_to_do:
            return (f"nothing to do: index '{summary.index_name}' covers every fragment at version "
                    f"{summary.read_version}")
        return (f"index '{summary.index_name}' on column '{summary.column}': "
                f"{counted(summary.tasks, 'segment task')} over {counted(summary.fragments_to_compute, 'fragment')} "
                f"({counted(summary.rows_to_compute, 'row')}) at version {summary.read_version}")


# Every kind of stored plan, told apart by its ``kind`` (a new kind's plan model is one more member).
AnyPlan = ColumnPlan | ExpandPlan | CompactionPlan | IndexPlan
Plan = Annotated[AnyPlan, Field(discriminator="kind")]
JobPlan = ColumnPlan | ExpandPlan  # the plans of the column kinds: jobs that apply, write+commit and verify
_PLAN: TypeAdapter[AnyPlan] = TypeAdapter(Plan)
# The plan model of each kind, read from the union: what a kind's summary is described by.
_PLAN_MODELS: dict[JobKind, type[PlanBase]] = {
    kind: model for model in typing.get_args(AnyPlan)
    for kind in typing.get_args(model.model_fields["kind"].annotation)}


def plan_model(kind: JobKind | str) -> type[PlanBase]:
    """The plan model of a kind (its member or its word); KeyError naming the kinds otherwise."""
    try:
        return _PLAN_MODELS[JobKind(kind)]
    except (ValueError, KeyError):
        raise KeyError(f"no plan model for job kind '{kind}'; the kinds are {', '.join(_PLAN_MODELS)}") from None


def plan_of(fields: dict[str, Any]) -> AnyPlan:
    """The plan model its ``kind`` names, built from its fields."""
    return _PLAN.validate_python(fields)


def plan_from_json(text: str, where: str) -> AnyPlan:
    """Parses a stored plan of any kind, refusing another format with a clear error."""
    try:
        head = json.loads(text)
        fmt = head.get("format")
    except (ValueError, AttributeError) as exc:
        raise InvalidArgumentError(f"{where} is not a plan document: {exc}") from exc
    if fmt != PLAN_FORMAT:
        raise PlanFormatError(f"{where} has plan format {fmt}, expected {PLAN_FORMAT}: it was written by "
                              "another version of airflow-provider-geneva; plan the job again")
    return _PLAN.validate_json(text)


class StageReport(_Model):
    """What a spark-submit program leaves beside the plan for the operator that launched it."""

    status: Literal[EventStatus.SUCCESS, EventStatus.FAILED]
    error: ErrorPayload | None = None  # FAILED: what the stage raised, and whether a retry can help
    result: ApplyResult | WriteResult | CompactionResult | IndexBuildResult | None = Field(
        default=None, discriminator="stage")

    def to_xcom(self) -> dict[str, Any]:
        return {"status": self.status.value, **(self.result.model_dump(mode="json") if self.result else {})}

    @classmethod
    def failed(cls, exc: BaseException) -> StageReport:
        """The report of a stage that raised ``exc``: the package's errors say whether a retry can help."""
        return cls(status=EventStatus.FAILED, error=ErrorPayload.from_exc(exc))


class VerifyResult(_Model):
    """The verify stage's outcome: every planned fragment holds its computed value."""

    job_id: str
    table: str
    column: str | None = None
    version: int
    fragments_verified: int
    rows_verified: int
    fragments_deleted: list[int] = Field(default_factory=list)
    rows_failed: int = 0  # of the rows verified, those the UDF's error policy skipped (NULL; see the error store)
    written: WriteResult | None = None  # what the job's write+commit stage committed (None: nothing to do)


class ViewCheck(_Model):
    """What a check of a chunker or batch-UDTF view found against the source version it claims to hold.

    A view is exact when each parent's rows are the children of one version of it: no (parent, chunk
    index) pair twice (a batch UDTF: no partition from two fingerprints), no rows of a parent the source
    version does not select, and -- when fingerprints were checked -- no rows of an older version of a
    parent.  The lists hold the first few culprits; the counts are complete.
    """

    view: str
    version: int
    source: str
    source_version: int
    rows: int
    duplicate_count: int = 0
    duplicates: list[tuple[int, int]] = Field(default_factory=list)  # (parent id | partition, chunk index | fp)
    orphan_count: int = 0
    orphans: list[int] = Field(default_factory=list)   # parent ids (a batch UDTF: partition hashes)
    stale_count: int = 0
    stale: list[int] = Field(default_factory=list)     # parent ids whose rows were made from other inputs
    fingerprints_checked: bool = False
    by_partition: bool = False   # a batch-UDTF view: rows are keyed by partition, not by parent

    @property
    def exact(self) -> bool:
        return not (self.duplicate_count or self.orphan_count or self.stale_count)

    def problems(self) -> str | None:
        """The culprits in one message, or None for an exact view."""
        if self.exact:
            return None
        found = []
        if self.duplicate_count:
            found.append(f"{self.duplicate_count:,} duplicate (__source_row_id, __chunk_index) pairs (first: "
                         f"{self.duplicates})" if not self.by_partition else
                         f"{self.duplicate_count:,} partitions held from two inputs (first: {self.duplicates})")
        if self.orphan_count:
            found.append(f"rows of {self.orphan_count:,} parents that source table '{self.source}' at version "
                         f"{self.source_version} does not select (first: {self.orphans})")
        if self.stale_count:
            found.append(f"rows of {self.stale_count:,} parents made from inputs other than those of version "
                         f"{self.source_version} (first: {self.stale})")
        return (f"view '{self.view}' (version {self.version}, {self.rows:,} rows) is not what its UDTF makes of "
                f"source table '{self.source}' at version {self.source_version}: it holds " + "; ".join(found))


class JobStatus(StrEnum):
    """Where a job is: planned, running a stage, finished, failed, cancelled, or abandoned.

    CANCELLED is a job stopped on request (``db.cancel_job``, a handle's ``cancel()``, the CLI's ``jobs
    cancel``, an Airflow task killed while its stage ran), as the reference names it; FAILED is a job whose
    stage raised.  ABANDONED is how a PENDING or RUNNING record reads once its process stopped heartbeating (killed,
    its machine lost) for longer than its lease; the next plan of the same column, view or table
    takes it over and stores the status for good.
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    ABANDONED = "ABANDONED"


class JobRecord(_Model):
    """A job's history and progress, kept in its table's checkpoint store (``db.list_jobs()``).

    Progress has the seed design's three states: rows checkpointed (computed by apply), ready to
    commit (staged by the writer) and committed.
    """

    job_id: str
    kind: JobKind
    table: str
    column: str | None = None
    status: JobStatus = JobStatus.PENDING
    stage: Stage | Literal["done"] = Stage.PLAN  # "done" once the job finished
    created_at: str
    updated_at: str
    finished_at: str | None = None
    read_version: int | None = None
    version: int | None = None          # the version the job's last commit made
    rows_planned: int = 0
    rows_checkpointed: int = 0
    rows_ready: int = 0
    rows_committed: int = 0
    rows_failed: int = 0                # left NULL by the UDF's skip policy
    rows_retried: int = 0               # recovered by a retry
    rows_stale: int | None = None       # a backfill's plan: rows of the column holding a stale value (computed from
                                        # other inputs or by an older UDF version), selected by its where or not
    error: str | None = None
    airflow_run_id: str | None = None
    heartbeat_at: str | None = None     # the last sign of life of the process running the job
    lease_seconds: float | None = None  # live while heartbeat_at + lease_seconds is in the future
    taken_over_by: str | None = None    # ABANDONED: the job whose plan took over its column (or table)
    spark_ui: str | None = None         # the Spark application UI of the job's last Spark stage (its driver's)
    # Measurements (cumulative over tasks, so they may add up to more than the wall time): see ``metrics``.
    tasks: int = 0                      # the apply stage's Spark tasks
    read_seconds: float = 0.0           # apply: reading the UDF's input rows
    udf_seconds: float = 0.0            # apply: the UDF's calls and the rows' fingerprints
    write_seconds: float = 0.0          # write+commit: the writer tasks (the stage's time less its commits)
    commit_seconds: float = 0.0         # write+commit: the commits, on the driver
    commit_conflict_retries: int = 0    # commits retried after a concurrent writer's commit
    segments_planned: int | None = None  # an index build: its segment tasks (fragment groups)
    segments_done: int | None = None     # an index build: the segments finished so far (a rerun's found ones too)

    # -- the reference's (LanceDB Geneva's) names for the same record, read-only --------------------
    @property
    def table_name(self) -> str:
        return self.table

    @property
    def column_name(self) -> str | None:
        return self.column

    @property
    def job_type(self) -> str:
        """``BACKFILL`` or ``REFRESH`` (``COMPACTION``, ``UDTF``), the kind in the reference's spelling."""
        return str(self.kind).upper()

    @property
    def launched_at(self) -> dt.datetime:
        return dt.datetime.fromisoformat(self.created_at)

    @property
    def completed_at(self) -> dt.datetime | None:
        return dt.datetime.fromisoformat(self.finished_at) if self.finished_at else None

    @property
    def rows_ready_for_commit(self) -> int:
        return self.rows_ready

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The job's measurements as the reference lists them: ``{"name", "count", "total"}`` each (a row count
        out of the rows planned, or a cumulative amount whose ``total`` is None; times in milliseconds)."""
        planned = self.rows_planned
        rows = [("rows_checkpointed", self.rows_checkpointed), ("rows_ready_for_commit", self.rows_ready),
                ("rows_committed", self.rows_committed)]
        amounts = [("tasks", self.tasks), ("read_io_time_ms", round(self.read_seconds * 1000)),
                   ("udf_processing_time", round(self.udf_seconds * 1000)),
                   ("writer_write_time", round(self.write_seconds * 1000)),
                   ("commit_time_ms", round(self.commit_seconds * 1000)),
                   ("commit_conflict_retries", self.commit_conflict_retries),
                   ("rows_failed", self.rows_failed), ("rows_retried", self.rows_retried)]
        return ([{"name": n, "count": c, "total": planned} for n, c in rows]
                + [{"name": n, "count": c, "total": None} for n, c in amounts])


class BackfillResult(_Model):
    """What an in-process backfill or refresh did: rows the UDF ran on, rows reused, the new version."""

    job_id: str
    column: str
    rows_computed: int
    rows_reused: int
    fragments_committed: int
    fragments_reused: int
    version: int
    fragments_vanished: list[int] = Field(default_factory=list)
    rows_failed: int = 0   # rows the UDF's error policy skipped (NULL; see the error store)
    rows_retried: int = 0  # rows that failed an attempt and were recovered by a retry
    seconds: dict[str, float] = Field(default_factory=dict)
    # The job's timeout passed: its tasks stopped at a checkpoint and nothing was committed (rows_computed are
    # checkpointed); the next backfill resumes from those checkpoints.
    timed_out: bool = False
    # The index stage: each index on the job's columns (a view's: every index) that it refreshed or retrained.
    indexes: list[IndexBuildResult] = Field(default_factory=list)

    def describe(self) -> str:
        """What the job did, in the one wording of its "done" lines (the notebook's log, the job's own), the rows
        its error policy skipped included when there are any."""
        parts = [f"{counted(self.rows_computed, 'row')} computed", f"{self.rows_reused:,} reused",
                 skipped_rows(self.rows_failed), f"{counted(self.fragments_committed, 'fragment')} committed",
                 f"version {self.version}"]
        parts += [f"index '{i.index_name}' {'retrained' if i.trained else 'refreshed'} "
                  f"({counted(len(i.fragments_indexed), 'fragment')})" for i in self.indexes]
        return ", ".join(part for part in parts if part)
