"""The checkpoint store's layout: every key a job writes, one typed record kind per key family (core).

Stages talk through the checkpoint store, and its keys are file names that outlive the code that
wrote them: a store written by an older version must still be read.  So this module alone knows the
key grammar -- how each key is built (``key()``) and read back (:func:`parse_key`, one tagged union) --
and :class:`JobStore` gives the stages typed reads and writes, so no caller builds a key by hand.

The families (``<id>`` is a job id, :func:`new_job_id`)::

    plan-<id>                           PlanKey           the plan document
    plan-<id>-committed                 CommittedKey      left when the job's commits are done
    plan-<id>-<stage>-result            StageResultKey    a Spark stage's report
    plan-<id>-<stage>-lease             StageLeaseKey     who runs a detached Spark stage, and its heartbeat
    plan-<id>-connect-session           ConnectSessionKey the job's Spark Connect session id
    plan-<id>-appended                  AppendedKey       a UDTF refresh's written fragments, before their commit
    plan-<id>-origin                    OriginKey         the request a job was planned for (an up-to-date check)
    job-<id>                            JobRecordKey      the job's record (status, progress)
    ledger-<md5(job prefix)>            LedgerKey         fragments known valid
    uptodate-<md5(request)>             UpToDateKey       a request found up to date at a table state
    <batch prefix>_frag-N_range-a-b[_partial]  BatchKey   one batch checkpoint
    <job prefix>_staged-<hex32>         StagedKey         one writer's staged-files record
    running-<id>-p<partition>           RunningKey        the UDF call a Spark partition is running, its rows so far
    index-<hash(name)>-artifacts        IndexArtifactsKey an index's trained IVF centroids / PQ codebook
    index-<hash(name)>-<build>-plan     IndexPlanKey      an index build's plan (pinned version, fragment groups)
    index-<hash(name)>-<build>-seg-<g>  IndexSegmentKey   a finished, uncommitted segment of group g of a build

A job prefix is ``udf-{name}_ver-{version}_col-{column}_where-{md5}_uri-{md5}`` and a batch prefix adds
``_srcfiles-{md5(input files)}``.  User strings are hashed, never used raw, and keys are parsed from
the right, where their structure is fixed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from geneva_provider.core.contracts.index_models import IndexArtifacts, IndexBuildPlan, SegmentRecord
    from geneva_provider.core.contracts.models import AppendedFragments, CommitRecord, JobRecord, Ledger, StagedFiles
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.core.table_state import PlanOrigin, UpToDate

H = TypeVar("H", bound="BaseModel")

JOB_ID = r"\d{8}T\d{6}-[0-9a-f]{8}"  # what new_job_id() makes: sortable by creation time, unique
PARTIAL = "_partial"  # the suffix of a batch checkpoint holding rows the UDF's error policy skipped
_PLAN = "plan-"
_JOB = "job-"
_LEDGER = "ledger-"
_UPTODATE = "uptodate-"
_RUNNING = "running-"
_INDEX = "index-"
_SRCFILES = "_srcfiles-"
_PLAN_RE = re.compile(rf"^{_PLAN}(?P<id>{JOB_ID})(?:(?P<committed>-committed)|-(?P<stage>[a-z_]+)-result"
                      r"|-(?P<leased>[a-z_]+)-lease"
                      r"|(?P<session>-connect-session)|(?P<appended>-appended)|(?P<cancel>-cancel)"
                      r"|(?P<origin>-origin))?$")
_BATCH_RE = re.compile(r"^(?P<prefix>.+)_frag-(?P<frag>\d+)_range-(?P<start>\d+)-(?P<end>\d+)(?P<partial>_partial)?$")
_STAGED_RE = re.compile(r"^(?P<prefix>.+)_staged-(?P<token>[0-9a-f]{32})$")
_RUNNING_RE = re.compile(rf"^{_RUNNING}(?P<id>.+)-p(?P<partition>\d+)$")
_INDEX_RE = re.compile(rf"^{_INDEX}(?P<name>[0-9a-f]{{16}})-(?:(?P<artifacts>artifacts)"
                       r"|(?P<build>[0-9a-f]{16})-(?:(?P<plan>plan)|seg-(?P<group>\d+)))$")
_PLAIN_VERSION = re.compile(r"[0-9A-Za-z]{1,16}")


def new_job_id(now: dt.datetime | None = None) -> str:
    """A new job's id: its creation time (UTC, to the second) and 8 random hex digits."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ hashing of user strings
def md5_hex(text: str) -> str:
    """The full md5 hex digest of ``text`` (used for where, uri and source files)."""
    return hashlib.md5(text.encode()).hexdigest()


def short_hash(text: str) -> str:
    """A 16-hex-digit hash for user names, short enough to keep keys under file name limits."""
    return md5_hex(text)[:16]


def job_prefix(udf_name: str, udf_version: str, column: str, where: str | None, table_uri: str) -> str:
    """The part of every key shared by one column's backfills with the same UDF and filter."""
    # A version is the user's string (a uuid, "v2-experimental"...): kept as is only while short and plain.
    version = udf_version if _PLAIN_VERSION.fullmatch(udf_version) else short_hash(udf_version)
    return (
        f"udf-{short_hash(udf_name)}_ver-{version}_col-{short_hash(column)}"
        f"_where-{md5_hex(where or '')}_uri-{md5_hex(table_uri)}"
    )


def src_files_key(src_files: list[str]) -> str:
    """Names a set of source files (what batch checkpoints are computed from) in a key."""
    return md5_hex(json.dumps(sorted(src_files)))


def batch_prefix(job: str, src_files: list[str] | None = None, *, src_key: str | None = None) -> str:
    """The key prefix of batch checkpoints computed from exactly these source files."""
    return f"{job}{_SRCFILES}{src_key or src_files_key(src_files or [])}"


def job_of_batch_prefix(prefix: str) -> str:
    """The job prefix a batch prefix was made from (:func:`batch_prefix` read back)."""
    return prefix.rsplit(_SRCFILES, 1)[0]


# ------------------------------------------------------------------ record kinds
@dataclass(frozen=True)
class _JobKey:
    """A key made of a job id between a fixed head and tail (the record kinds below only name theirs)."""

    job_id: str
    head: ClassVar[str] = _PLAN
    tail: ClassVar[str] = ""

    def key(self) -> str:
        return f"{self.head}{self.job_id}{self.tail}"


class PlanKey(_JobKey):
    """A job's plan document."""

    kind: ClassVar[Literal["plan"]] = "plan"

    @classmethod
    def of(cls, plan_key: str) -> PlanKey:
        """The plan a key names (any job id, so that a hand-made plan key keeps working).

        InvalidArgumentError (a ValueError) for a key that names no plan: a plan reference is always the
        plan stage's ``plan_uri``.
        """
        if not plan_key.startswith(_PLAN):
            raise InvalidArgumentError(f"not a plan reference: {plan_key!r} (pass the plan stage's plan_uri)")
        return cls(plan_key[len(_PLAN):])


class AppendedKey(_JobKey):
    """The fragments a UDTF view refresh wrote, recorded before they are committed (a retry commits them)."""

    kind: ClassVar[Literal["appended"]] = "appended"
    tail: ClassVar[str] = "-appended"


class OriginKey(_JobKey):
    """The request a job was planned for, which its verify task plans again (dry) once the job is done: a no-op
    then is recorded, so the next plan of that request at that state does not open the table."""

    kind: ClassVar[Literal["origin"]] = "origin"
    tail: ClassVar[str] = "-origin"


class CommittedKey(_JobKey):
    """The marker the write+commit stage leaves when a job's commits are done (the job is no longer live)."""

    kind: ClassVar[Literal["committed"]] = "committed"
    tail: ClassVar[str] = "-committed"


class ConnectSessionKey(_JobKey):
    """The id of the job's Spark Connect session, so later stages and retries find it."""

    kind: ClassVar[Literal["connect_session"]] = "connect_session"
    tail: ClassVar[str] = "-connect-session"


class CancelKey(_JobKey):
    """A request to cancel the job, left by another process (``geneva-provider jobs cancel``); the job watches
    for it while it runs.  A key of its own, not a field of the record, which the job rewrites as it runs."""

    kind: ClassVar[Literal["cancel"]] = "cancel"
    tail: ClassVar[str] = "-cancel"


class JobRecordKey(_JobKey):
    """A job's record (:class:`~geneva_provider.core.contracts.models.JobRecord`)."""

    kind: ClassVar[Literal["job_record"]] = "job_record"
    head: ClassVar[str] = _JOB


@dataclass(frozen=True)
class StageResultKey:
    """The report a Spark stage leaves beside its plan (a spark-submit program's ``--result-key``)."""

    kind: ClassVar[Literal["stage_result"]] = "stage_result"
    job_id: str
    stage: Stage

    def key(self) -> str:
        return f"{_PLAN}{self.job_id}-{self.stage}-result"


@dataclass(frozen=True)
class StageLeaseKey:
    """Who runs a Spark stage in a process of its own (deferrable / durable stages), renewed while it runs: a
    retry or a second task finds a live lease and waits for that run instead of starting the stage again."""

    kind: ClassVar[Literal["stage_lease"]] = "stage_lease"
    job_id: str
    stage: Stage

    def key(self) -> str:
        return f"{_PLAN}{self.job_id}-{self.stage}-lease"


@dataclass(frozen=True)
class BatchKey:
    """A batch checkpoint: rows ``[start, end)`` of a fragment (fragment-local, end exclusive).

    A *partial* checkpoint holds some rows without a value (skipped by the UDF's error policy,
    NULL fingerprint): it covers its range for the writer, but not for planning or resuming.
    """

    kind: ClassVar[Literal["batch"]] = "batch"
    prefix: str  # a batch prefix (:func:`batch_prefix`)
    frag_id: int
    start: int
    end: int
    partial: bool = False

    def key(self) -> str:
        return f"{self.prefix}_frag-{self.frag_id}_range-{self.start}-{self.end}{PARTIAL if self.partial else ''}"

    @property
    def job_prefix(self) -> str:
        return job_of_batch_prefix(self.prefix)


@dataclass(frozen=True)
class _DigestKey:
    """A key made of a fixed head and a digest (of something too long or too free to be a key itself)."""

    digest: str
    head: ClassVar[str] = ""

    def key(self) -> str:
        return f"{self.head}{self.digest}"


class LedgerKey(_DigestKey):
    """The ledger of a job prefix: fragments known valid (the prefix is hashed: it is long)."""

    kind: ClassVar[Literal["ledger"]] = "ledger"
    head: ClassVar[str] = _LEDGER

    @classmethod
    def of(cls, job: str) -> LedgerKey:
        """The ledger of the job prefix ``job``."""
        return cls(md5_hex(job))


class UpToDateKey(_DigestKey):
    """A request (its digest) that found its table up to date, and at which state (an UpToDate document)."""

    kind: ClassVar[Literal["uptodate"]] = "uptodate"
    head: ClassVar[str] = _UPTODATE


@dataclass(frozen=True)
class StagedKey:
    """One writer's staged-files record: the data files it staged for some fragments of a job."""

    kind: ClassVar[Literal["staged"]] = "staged"
    job_prefix: str
    token: str = field(default_factory=lambda: uuid.uuid4().hex)  # 32 hex digits, a new one per writer

    def key(self) -> str:
        return f"{self.job_prefix}_staged-{self.token}"


@dataclass(frozen=True)
class RunningKey:
    """The marker of the UDF call a Spark partition of a job is running (removed when the call returns)."""

    kind: ClassVar[Literal["running"]] = "running"
    job_id: str
    partition: int

    @staticmethod
    def prefix(job_id: str) -> str:
        """What the markers of one job's partitions start with."""
        return f"{_RUNNING}{job_id}-p"

    def key(self) -> str:
        return f"{self.prefix(self.job_id)}{self.partition}"


@dataclass(frozen=True)
class IndexArtifactsKey:
    """An index's trained artifacts (IVF centroids, PQ codebook), reused by every refresh and resumed build."""

    kind: ClassVar[Literal["index_artifacts"]] = "index_artifacts"
    name_hash: str

    @classmethod
    def of(cls, index_name: str) -> IndexArtifactsKey:
        return cls(short_hash(index_name))

    def key(self) -> str:
        return f"{_INDEX}{self.name_hash}-artifacts"


@dataclass(frozen=True)
class IndexPlanKey:
    """The plan of one index build or refresh (``build_id``: 16 hex digits, a digest of the plan)."""

    kind: ClassVar[Literal["index_plan"]] = "index_plan"
    name_hash: str
    build_id: str

    def key(self) -> str:
        return f"{_INDEX}{self.name_hash}-{self.build_id}-plan"


@dataclass(frozen=True)
class IndexSegmentKey:
    """A finished (uncommitted) segment of one fragment group of a build: a rerun does not build it again."""

    kind: ClassVar[Literal["index_segment"]] = "index_segment"
    name_hash: str
    build_id: str
    group: int

    @staticmethod
    def prefix(name_hash: str, build_id: str) -> str:
        return f"{_INDEX}{name_hash}-{build_id}-seg-"

    def key(self) -> str:
        return f"{self.prefix(self.name_hash, self.build_id)}{self.group}"


IndexKey = IndexArtifactsKey | IndexPlanKey | IndexSegmentKey

# A plan and what is kept beside it.
PlanFamilyKey = (PlanKey | CommittedKey | StageResultKey | StageLeaseKey | ConnectSessionKey | AppendedKey
                 | CancelKey | OriginKey)
StoreKey = (PlanKey | CommittedKey | StageResultKey | StageLeaseKey | ConnectSessionKey | AppendedKey | CancelKey
            | OriginKey | JobRecordKey | LedgerKey | UpToDateKey | BatchKey | StagedKey | RunningKey | IndexArtifactsKey
            | IndexPlanKey | IndexSegmentKey)


def parse_key(key: str) -> StoreKey | None:
    """The record kind ``key`` names, with its parts; None for a key of no known family.

    Staged and batch keys come first (their prefixes are the user's hashed strings); plan keys need a
    job id of :func:`new_job_id`'s format, as clean-up and compaction always required.
    """
    if m := _STAGED_RE.match(key):
        return StagedKey(m["prefix"], m["token"])
    if m := _BATCH_RE.match(key):
        return BatchKey(m["prefix"], int(m["frag"]), int(m["start"]), int(m["end"]), bool(m["partial"]))
    if m := _PLAN_RE.match(key):
        if m["committed"]:
            return CommittedKey(m["id"])
        if m["session"]:
            return ConnectSessionKey(m["id"])
        if m["appended"]:
            return AppendedKey(m["id"])
        if m["origin"]:
            return OriginKey(m["id"])
        if m["cancel"]:
            return CancelKey(m["id"])
        if m["stage"] is not None or m["leased"] is not None:
            try:
                return (StageResultKey(m["id"], Stage(m["stage"])) if m["stage"] is not None
                        else StageLeaseKey(m["id"], Stage(m["leased"])))
            except ValueError:  # not a stage's report or lease
                return None
        return PlanKey(m["id"])
    if key.startswith(_JOB) and len(key) > len(_JOB):
        return JobRecordKey(key[len(_JOB):])
    if key.startswith(_LEDGER) and len(key) > len(_LEDGER):
        return LedgerKey(key[len(_LEDGER):])
    if key.startswith(_UPTODATE) and len(key) > len(_UPTODATE):
        return UpToDateKey(key[len(_UPTODATE):])
    if m := _RUNNING_RE.match(key):
        return RunningKey(m["id"], int(m["partition"]))
    if m := _INDEX_RE.match(key):
        if m["artifacts"]:
            return IndexArtifactsKey(m["name"])
        if m["plan"]:
            return IndexPlanKey(m["name"], m["build"])
        return IndexSegmentKey(m["name"], m["build"], int(m["group"]))
    return None


def parse_batch_key(key: str) -> BatchKey | None:
    """The batch checkpoint ``key`` names; None for keys of other kinds."""
    parsed = parse_key(key)
    return parsed if isinstance(parsed, BatchKey) else None


def parse_staged_key(key: str) -> str | None:
    """The job prefix of a staged-files record key (None for keys of other kinds)."""
    parsed = parse_key(key)
    return parsed.job_prefix if isinstance(parsed, StagedKey) else None


# ------------------------------------------------------------------ the repository
class JobStore:
    """The typed reads and writes of a job's documents in a checkpoint store: callers name jobs, not keys."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    # plans
    def plan_uri(self, job_id: str) -> str:
        """The reference to the job's plan that XCom and the Spark programs carry."""
        return self.store.key_uri(PlanKey(job_id).key())

    def put_plan(self, job_id: str, text: str) -> None:
        self.store.put_text(PlanKey(job_id).key(), text)

    def plan_text(self, job_id: str) -> str:
        return self.store.get_text(PlanKey(job_id).key())

    def plans(self) -> list[PlanKey]:
        """Every plan in the store (of job ids :func:`new_job_id` made), oldest first."""
        return [k for key in self.store.list_keys(_PLAN) if isinstance(k := parse_key(key), PlanKey)]

    def plan_keys(self, job_id: str) -> list[str]:
        """The plan's key and every key kept beside it (committed marker, stage results, Connect session)."""
        return [key for key in self.store.list_keys(PlanKey(job_id).key())
                if isinstance(k := parse_key(key), PlanFamilyKey) and k.job_id == job_id]

    def put_appended(self, job_id: str, record: AppendedFragments) -> None:
        self.store.put_model(AppendedKey(job_id).key(), record)

    def put_origin(self, job_id: str, origin: PlanOrigin) -> None:
        self.store.put_model(OriginKey(job_id).key(), origin)

    def origin(self, job_id: str) -> PlanOrigin | None:
        from geneva_provider.core.table_state import PlanOrigin

        return self._hint(OriginKey(job_id).key(), PlanOrigin)

    def appended(self, job_id: str) -> AppendedFragments | None:
        from geneva_provider.core.contracts.models import AppendedFragments

        key = AppendedKey(job_id).key()
        return self.store.get_model(key, AppendedFragments) if key in self.store else None

    def is_committed(self, job_id: str) -> bool:
        return CommittedKey(job_id).key() in self.store

    def put_committed(self, job_id: str, record: CommitRecord) -> None:
        self.store.put_model(CommittedKey(job_id).key(), record)

    def committed(self, job_id: str) -> CommitRecord | None:
        from geneva_provider.core.contracts.models import CommitRecord

        key = CommittedKey(job_id).key()
        return self.store.get_model(key, CommitRecord) if key in self.store else None

    def request_cancel(self, job_id: str, requested_at: str) -> None:
        self.store.put_text(CancelKey(job_id).key(), requested_at)

    def cancel_requested(self, job_id: str) -> bool:
        return CancelKey(job_id).key() in self.store

    # job records
    def has_record(self, job_id: str) -> bool:
        return JobRecordKey(job_id).key() in self.store

    def record(self, job_id: str) -> JobRecord:
        """The job's stored record; KeyError when it has none, CorruptCheckpointError when it does not parse."""
        from geneva_provider.core.contracts.models import JobRecord

        return self.store.get_model(JobRecordKey(job_id).key(), JobRecord)

    def put_record(self, record: JobRecord) -> None:
        self.store.put_model(JobRecordKey(record.job_id).key(), record)

    def delete_record(self, job_id: str) -> None:
        self.store.delete(JobRecordKey(job_id).key())

    def record_ids(self) -> list[str]:
        """The ids of every job with a record in the store."""
        return [k.job_id for key in self.store.list_keys(_JOB) if isinstance(k := parse_key(key), JobRecordKey)]

    # ledgers
    def has_ledger(self, job: str) -> bool:
        return LedgerKey.of(job).key() in self.store

    def ledger(self, job: str) -> Ledger:
        from geneva_provider.core.contracts.models import Ledger

        return self.store.get_model(LedgerKey.of(job).key(), Ledger)

    def put_ledger(self, job: str, ledger: Ledger) -> None:
        self.store.put_model(LedgerKey.of(job).key(), ledger)

    # requests found up to date
    def up_to_date(self, digest: str) -> UpToDate | None:
        """What the request of ``digest`` found up to date last, if anything (an unreadable document: nothing)."""
        from geneva_provider.core.table_state import UpToDate

        return self._hint(UpToDateKey(digest).key(), UpToDate)

    def _hint(self, key: str, model: type[H]) -> H | None:
        """A document that only saves work: missing or unreadable, it is None (the work is done instead)."""
        try:
            return self.store.get_model(key, model) if key in self.store else None
        except (ValueError, KeyError, OSError):
            return None

    def put_up_to_date(self, digest: str, found: UpToDate) -> None:
        self.store.put_model(UpToDateKey(digest).key(), found)

    # batch checkpoints and staged files
    def batches(self, job: str) -> list[BatchKey]:
        """The batch checkpoints of a job prefix (of every set of source files)."""
        return [k for key in self.store.list_keys(job) if isinstance(k := parse_key(key), BatchKey)]

    def staged_keys(self, job: str) -> list[StagedKey]:
        """The staged-files records of exactly this job prefix."""
        return [k for key in self.store.list_keys(job)
                if isinstance(k := parse_key(key), StagedKey) and k.job_prefix == job]

    def put_staged(self, job: str, files: StagedFiles) -> None:
        """Stores one writer's staged-files record under a key of its own."""
        self.store.put_model(StagedKey(job).key(), files)


class IndexRecords:
    """The typed reads and writes of one index's records in a checkpoint store: artifacts, build plans, segments."""

    def __init__(self, store: CheckpointStore, index_name: str) -> None:
        self.store, self.name_hash = store, short_hash(index_name)

    def artifacts(self) -> IndexArtifacts | None:
        from geneva_provider.core.contracts.index_models import IndexArtifacts

        key = IndexArtifactsKey(self.name_hash).key()
        return self.store.get_model(key, IndexArtifacts) if key in self.store else None

    def put_artifacts(self, artifacts: IndexArtifacts) -> None:
        self.store.put_model(IndexArtifactsKey(self.name_hash).key(), artifacts)

    def plan(self, build_id: str) -> IndexBuildPlan | None:
        from geneva_provider.core.contracts.index_models import IndexBuildPlan

        key = IndexPlanKey(self.name_hash, build_id).key()
        return self.store.get_model(key, IndexBuildPlan) if key in self.store else None

    def put_plan(self, plan: IndexBuildPlan) -> None:
        self.store.put_model(IndexPlanKey(self.name_hash, plan.build_id).key(), plan)

    def segment(self, build_id: str, group: int) -> SegmentRecord | None:
        from geneva_provider.core.contracts.index_models import SegmentRecord

        key = IndexSegmentKey(self.name_hash, build_id, group).key()
        return self.store.get_model(key, SegmentRecord) if key in self.store else None

    def put_segment(self, record: SegmentRecord) -> None:
        self.store.put_model(IndexSegmentKey(self.name_hash, record.build_id, record.group).key(), record)

    def segments(self, build_id: str) -> list[SegmentRecord]:
        """The finished segments of a build, by group."""
        from geneva_provider.core.contracts.index_models import SegmentRecord

        keys = [(k.group, key) for key in self.store.list_keys(IndexSegmentKey.prefix(self.name_hash, build_id))
                if isinstance(k := parse_key(key), IndexSegmentKey)]
        return [self.store.get_model(key, SegmentRecord) for _, key in sorted(keys)]

    def drop_build(self, build_id: str) -> None:
        """Forgets a committed build's plan and segments (the artifacts stay, for refreshes)."""
        for key in self.store.list_keys(f"{_INDEX}{self.name_hash}-{build_id}-"):
            self.store.delete(key)
