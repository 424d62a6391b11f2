"""The typed contracts between stages: plan, fragment plan, task, summary, checkpoints, results.

Each model has one JSON encoding (pydantic's), used in the checkpoint store, in Spark task
results and, for :class:`PlanSummary` and the stage results, in XCom (as plain dicts, which
Airflow serialises without an allow-list).  A stored plan carries its format number, and a
plan of another format is refused with :class:`PlanFormatError` instead of being misread.
"""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from geneva_provider.core.errors import InvalidArgumentError, PlanFormatError

PLAN_FORMAT = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Action(StrEnum):
    """What the planner decided for a fragment."""

    COMPUTE = "compute"  # run the UDF on the missing ranges, then write and commit
    REUSE = "reuse"      # a fragment checkpoint holds a valid staged file: commit it, compute nothing
    DONE = "done"        # the fragment checkpoint's file is already the committed column file
    EMPTY = "empty"      # no row selected: nothing to compute or commit


class DataFileRef(_Model):
    """A Lance ``DataFile`` (a staged column file) in JSON form."""

    path: str
    fields: list[int]
    column_indices: list[int]
    file_major_version: int
    file_minor_version: int
    file_size_bytes: int | None = None
    base_id: int | None = None

    @classmethod
    def from_lance(cls, datafile: Any) -> DataFileRef:
        d = dataclasses.asdict(datafile)
        d["path"] = d.pop("_path")
        return cls.model_validate(d)

    def to_lance(self) -> Any:
        from lance.fragment import DataFile

        return DataFile(**self.model_dump())


class FragmentPlan(_Model):
    """The plan of one fragment: its decision, and what its result depends on."""

    id: int
    physical_rows: int
    rows: int
    action: Action
    src_files: list[str]          # files (and deletion markers) the fragment's result is computed from
    base_file: str | None = None  # the output column's committed file when planned
    prefix: str | None = None     # batch checkpoint key prefix (COMPUTE)
    file: DataFileRef | None = None  # the staged file to commit (REUSE / DONE)


class Task(_Model):
    """One apply task: a fragment-local range ``[start, end)`` and its checkpoint key prefix."""

    frag: int
    start: int
    end: int
    prefix: str

    @property
    def rows(self) -> int:
        return self.end - self.start


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


class PlanSettings(_Model):
    """The job options as resolved by the planner (defaults filled in)."""

    checkpoint_size: int
    min_checkpoint_size: int
    max_checkpoint_size: int
    task_size: int | None = None
    commit_granularity: int | None = None
    concurrency: int | None = None
    parallelism: int


class JobSpec(_Model):
    """What a job computes and where: everything a stage needs except the per-fragment plan."""

    kind: Literal["backfill", "refresh"]
    table: str
    table_uri: str
    column: str | None = None
    output_columns: list[str]
    input_columns: list[str] = Field(default_factory=list)
    where: str | None = None
    read_version: int
    output_field_ids: list[int]
    column_uid: str
    data_storage_version: str
    job_prefix: str
    udf: UdfRef | None = None
    source: SourceSpec | None = None
    rows_appended: int = 0

    def label(self) -> str:
        """How logs and errors name the job."""
        if self.kind == "refresh":
            return f"refresh of view '{self.table}'"
        return f"backfill of column '{self.column}' in table '{self.table}'"


class Plan(JobSpec):
    """The plan document stored in the checkpoint store; its URI is what later stages take."""

    format: int = PLAN_FORMAT
    job_id: str
    created_at: str
    store_uri: str
    settings: PlanSettings
    fragments: list[FragmentPlan]
    tasks: list[Task]
    rows_to_compute: int
    rows_reused: int

    @classmethod
    def from_json(cls, text: str, where: str) -> Plan:
        """Parses a stored plan, refusing another format with a clear error."""
        try:
            fmt = json.loads(text).get("format")
        except (ValueError, AttributeError) as exc:
            raise InvalidArgumentError(f"{where} is not a plan document: {exc}") from exc
        if fmt != PLAN_FORMAT:
            raise PlanFormatError(f"{where} has plan format {fmt}, expected {PLAN_FORMAT}: it was written by "
                                  "another version of airflow-provider-geneva; plan the job again")
        return cls.model_validate_json(text)

    def job(self) -> JobSpec:
        """The plan without its fragments and tasks: what executors are sent."""
        return JobSpec.model_validate(self.model_dump(include=set(JobSpec.model_fields)))

    def count(self, action: Action) -> int:
        return sum(1 for f in self.fragments if f.action is action)

    def summary(self, plan_uri: str) -> PlanSummary:
        """The XCom-sized view of the plan."""
        return PlanSummary(
            job_id=self.job_id, plan_uri=plan_uri, kind=self.kind, table=self.table, column=self.column,
            read_version=self.read_version, rows_to_compute=self.rows_to_compute, rows_reused=self.rows_reused,
            rows_appended=self.rows_appended, tasks=len(self.tasks),
            fragments_to_compute=self.count(Action.COMPUTE), fragments_reused=self.count(Action.REUSE),
            fragments_done=self.count(Action.DONE),
            nothing_to_do=not self.tasks and not self.count(Action.REUSE) and not self.count(Action.COMPUTE))


class PlanSummary(_Model):
    """What the plan stage returns (XCom): a reference to the plan and its counts."""

    job_id: str
    plan_uri: str
    kind: Literal["backfill", "refresh"] = "backfill"
    table: str
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

    @classmethod
    def from_xcom(cls, value: Any) -> PlanSummary:
        """Accepts the summary as a dict, a model, or its JSON text (a rendered template)."""
        if isinstance(value, PlanSummary):
            return value
        try:
            if isinstance(value, str):
                return cls.model_validate_json(value)
            return cls.model_validate(value)
        except ValueError as exc:
            raise InvalidArgumentError(f"expected the plan summary returned by the plan task, got {value!r:.200}"
                                       ) from exc

    def to_xcom(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class FragmentCheckpoint(_Model):
    """The staged column file written for one fragment, and what it was computed from."""

    file: DataFileRef
    src_data_files: list[str]
    output_field_ids: list[int]
    column_uid: str
    base_file: str | None = None
    rows: int


class TaskError(_Model):
    """A UDF failure inside an apply task, returned as data so Spark does not retry it."""

    message: str
    exception: str
    frag: int


class ApplyTaskResult(_Model):
    """What one apply task did."""

    frag: int
    start: int
    end: int
    rows_computed: int = 0
    rows_skipped: int = 0
    checkpoints: int = 0
    udf_seconds: float = 0.0
    error: TaskError | None = None


class WrittenFragment(_Model):
    """What one writer task staged for one fragment."""

    frag: int
    file: DataFileRef
    rows: int


class ApplyResult(_Model):
    """The apply stage's counts."""

    stage: Literal["apply"] = "apply"
    job_id: str
    tasks_run: int
    rows_computed: int
    rows_reused: int
    checkpoints_written: int
    errors: int
    seconds: float


class WriteResult(_Model):
    """The write+commit stage's outcome."""

    stage: Literal["write_commit"] = "write_commit"
    job_id: str
    version: int
    fragments_committed: int
    rows_committed: int
    fragments_vanished: list[int]
    commit_retries: int
    seconds: float


class StageReport(_Model):
    """What a spark-submit program leaves beside the plan for the operator that launched it."""

    status: Literal["success", "failed"]
    error: str | None = None
    result: ApplyResult | WriteResult | None = Field(default=None, discriminator="stage")

    def to_xcom(self) -> dict[str, Any]:
        return {"status": self.status, **(self.result.model_dump(mode="json") if self.result else {})}


class VerifyResult(_Model):
    """The verify stage's outcome: every planned fragment holds its computed value."""

    job_id: str
    table: str
    column: str | None = None
    version: int
    fragments_verified: int
    rows_verified: int


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
    seconds: dict[str, float] = Field(default_factory=dict)
