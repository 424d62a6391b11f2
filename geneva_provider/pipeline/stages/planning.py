"""Planning shared by backfills and view refreshes: decide each fragment, cut tasks, store the plan.

A value is valid while its stored fingerprint equals the fingerprint of the row's current inputs
(:mod:`geneva_provider.core.fingerprints`), so the planner decides row by row, wherever rows now
live -- after appends, deletes, updates, merges and compactions alike.  To keep a plan proportional
to what changed, a fragment whose files are those of a fragment already known valid (the job's
:class:`~geneva_provider.core.contracts.models.Ledger`) is not read at all; the others are examined by the
job's :class:`Examiner`, which reads inputs and fingerprints but runs no UDF.

The plan is stored as a :class:`~geneva_provider.core.contracts.models.Plan` in the checkpoint store; XCom
carries only its :class:`~geneva_provider.core.contracts.models.PlanSummary`.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from geneva_provider.core.contracts.models import (
    Action,
    AnyPlan,
    ExpandTask,
    FileTarget,
    FragmentCheckpoint,
    FragmentPlan,
    JobPlan,
    JobRecord,
    JobSpec,
    Ledger,
    PlanSettings,
    PlanSummary,
    StagedFiles,
    Task,
    TaskPart,
    plan_from_json,
    plan_of,
)
from geneva_provider.core.contracts.options import JobOptions, check_count
from geneva_provider.core.errors import CorruptCheckpointError, InvalidArgumentError
from geneva_provider.core.fingerprints import is_fingerprint_column
from geneva_provider.core.fragments import files_holding, live_row_addresses, output_files
from geneva_provider.core.ranges import count_of, runs_of, slice_runs
from geneva_provider.core.store.checkpoint import ROWADDR, CheckpointStore, open_store, split_key_uri
from geneva_provider.core.store.layout import BatchKey, JobStore, batch_prefix, new_job_id, src_files_key
from geneva_provider.pipeline.stages.checkpoint_sizing import function_row_seconds, remember_row_seconds
from geneva_provider.pipeline.stages.collector import keep_collections_small
from geneva_provider.pipeline.stages.job_records import check_leases, start_record, take_over
from geneva_provider.pipeline.stages.kinds import registered_kinds
from geneva_provider.pipeline.stages.parsed_docs import ParsedDocs
from geneva_provider.pipeline.stages.task_cuts import cut_tasks

if TYPE_CHECKING:
    from geneva_provider.core.catalog import TableResolver
    from geneva_provider.core.lib_types import Dataset, Fragment, FragmentMeta
    from geneva_provider.core.refs import TableRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanCall:
    """How a plan stage was called, apart from what it plans: where the plan is stored, how wide it is cut,
    which Airflow run asked, and (for a view) how its source table is found.  Every planner takes one."""

    store: CheckpointStore
    parallelism: int
    airflow_run_id: str | None = None
    resolve: TableResolver | None = None  # a view's source from its metadata; None: a directory database
    # Only to learn whether there is anything to do: a plan with work is neither stored nor given a record (no job
    # is started); a no-op one is stored as always (it starts none).
    dry: bool = False

    @classmethod
    def of(cls, ref: TableRef, job: str, *, store: CheckpointStore | None = None, parallelism: int | None = None,
           airflow_run_id: str | None = None, resolve: TableResolver | None = None, dry: bool = False) -> PlanCall:
        """The call's settings checked (``job`` names it in an error), with their defaults: the table's own
        checkpoint store, one task per core."""
        width = check_count(parallelism, "parallelism", job) or os.cpu_count() or 1
        keep_collections_small()
        return cls(store or ref.checkpoint_store(), width, airflow_run_id, resolve, dry)


@dataclass
class Exam:
    """Which live rows of a fragment need a value (in scan order), and how many hold none valid at all."""

    needed: np.ndarray  # bool per live row: selected by the job and without a valid value
    invalid: int        # live rows without a valid value, selected or not


class Examiner(Protocol):
    """How a kind of job judges a fragment."""

    def src_files(self, frag: Fragment) -> list[str]:
        """The files the fragment's values are computed from (what batch checkpoints are keyed by)."""

    def examine(self, frag: Fragment) -> Exam:
        """Reads inputs and fingerprints (no UDF) and says which rows need a value."""


MEASURED_ROWS_MIN = 10_000  # rows an apply must compute for its cost per row to be kept


def validity_signature(src_files: list[str], fragment_meta: FragmentMeta, out_leaves: list[int]) -> list[str]:
    """Every file that decides a fragment's validity: what its values are computed from, and the values."""
    return sorted(set(src_files) | set(files_holding(fragment_meta, out_leaves)))


def load_ledger(store: CheckpointStore, job: str) -> Ledger:
    jobs = JobStore(store)
    if not jobs.has_ledger(job):
        return Ledger()
    try:
        return jobs.ledger(job)
    except (ValueError, KeyError, OSError):  # a cache: an unreadable one is simply rebuilt
        return Ledger()


def record_valid(store: CheckpointStore, job: str, signatures: dict[int, list[str]]) -> None:
    """Adds fragments known fully valid to the job's ledger (read, merged, written back)."""
    if not signatures:
        return
    ledger = load_ledger(store, job)
    ledger.fragments.update(signatures)
    JobStore(store).put_ledger(job, ledger)


def measured_row_seconds(store: CheckpointStore, job: JobSpec) -> float | None:
    """What a row of the job's column cost: its ledger's measure (the column's last apply), else what the same UDF
    (name and version) last cost in this process on another table; None when neither was measured."""
    measured = load_ledger(store, job.job_prefix).row_seconds
    if measured is None and job.udf is not None:
        measured = function_row_seconds((job.udf.name, job.udf.version))
    return measured


def record_row_seconds(store: CheckpointStore, plan: JobPlan, rows: int, seconds: float) -> None:
    """Keeps what ``rows`` rows cost an apply (reading, UDF, fingerprints) in the job's ledger, for the next plan
    to judge whether splitting a fragment pays (:mod:`~geneva_provider.pipeline.stages.task_cuts`) and whether its
    apply is cheaper on the driver (:mod:`~geneva_provider.pipeline.stages.on_driver`).

    Fewer than :data:`MEASURED_ROWS_MIN` rows make no measurement (a task's fixed costs would be counted as the
    rows') and change nothing; a store that cannot be written loses only the hint.
    """
    if rows < MEASURED_ROWS_MIN:
        return
    job = plan.job_prefix
    ledger = load_ledger(store, job)
    ledger.row_seconds = seconds / rows
    if plan.udf is not None:  # and for the same UDF's next table in this process
        remember_row_seconds((plan.udf.name, plan.udf.version), ledger.row_seconds)
    try:
        JobStore(store).put_ledger(job, ledger)
    except OSError as exc:  # a hint for the next plan: never a reason to fail the job that measured it
        log.warning("could not keep the measured cost of a row in the ledger of %s: %s", job, exc)


def plan_fragments(
    ds: Dataset,
    store: CheckpointStore,
    job: str,
    examiner: Examiner,
    out_leaves: list[int],
    column_uid: str,
    where: str | None,
    limit: int | None = None,
) -> tuple[list[FragmentPlan], list[tuple[int, list[tuple[int, int]]]]]:
    """Decides each fragment, and the runs of live-row positions still to compute per fragment.

    Rows whose value a batch checkpoint of the same inputs already holds are not planned again,
    whatever filter the job that computed them had.  With ``limit`` (a backfill's ``num_frags``) only
    the first ``limit`` fragments to compute are planned; the fragments after them are left out of the
    plan, untouched, for the next job.
    """
    ledger = load_ledger(store, job)
    keys_by_frag: dict[tuple[str, int], list[BatchKey]] = {}
    for bk in JobStore(store).batches(job):
        keys_by_frag.setdefault((bk.prefix, bk.frag_id), []).append(bk)
    staged = staged_files(store, job)

    fragments: list[FragmentPlan] = []
    work: list[tuple[int, list[tuple[int, int]]]] = []
    newly_valid: dict[int, list[str]] = {}
    computing = 0  # fragments planned for computing
    for frag in ds.get_fragments():
        if limit is not None and computing >= limit:
            break
        fid = frag.fragment_id
        src_files = examiner.src_files(frag)
        meta = frag.metadata  # built anew at each ask
        signature = validity_signature(src_files, meta, out_leaves)
        out_file = output_files(meta, out_leaves)
        common = {"id": fid, "physical_rows": frag.physical_rows, "src_files": src_files, "base_file": out_file}
        if ledger.fragments.get(fid) == signature:
            fragments.append(FragmentPlan(**common, rows=frag.count_rows(), action=Action.DONE))
            continue
        reusable = next((c for c in staged.get(fid, ()) if _reusable(c, src_files, out_leaves, column_uid,
                                                                       out_file, where)), None)
        if reusable is not None:
            fragments.append(FragmentPlan(**common, rows=reusable.rows, action=Action.REUSE, file=reusable.file,
                                          complete=reusable.complete))
            continue
        exam = examiner.examine(frag)
        if exam.invalid == 0:
            newly_valid[fid] = signature
            fragments.append(FragmentPlan(**common, rows=len(exam.needed), action=Action.DONE))
            continue
        needed = int(np.count_nonzero(exam.needed))
        if needed == 0:
            fragments.append(FragmentPlan(**common, rows=0, action=Action.EMPTY))
            continue
        src_key = src_files_key(src_files)
        needed_runs = runs_of(exam.needed)
        todo = exam.needed
        keys = of_current_types(store, keys_by_frag.get((batch_prefix(job, src_key=src_key), fid), []), ds)
        if keys:
            todo = todo & ~np.isin(live_row_addresses(frag), checkpointed_addresses(store, keys))
        computing += 1
        fragments.append(FragmentPlan(**common, rows=needed, action=Action.COMPUTE, src_key=src_key,
                                      needed=needed_runs, complete=needed == exam.invalid))
        todo_runs = needed_runs if todo is exam.needed else runs_of(todo)
        if todo_runs:
            work.append((fid, todo_runs))
    record_valid(store, job, newly_valid)
    return fragments, work


def of_current_types(store: CheckpointStore, keys: list[BatchKey], ds: Dataset) -> list[BatchKey]:
    """The checkpoints among ``keys`` whose columns have the types they have in ``ds``; the others are removed.

    Checkpoints are keyed by the UDF's name and version, not by the column's incarnation: a column dropped
    and added again with another type under the same UDF name and version (a version the user gave) finds
    the values computed for the old type.  They are never written into the new column (a cast would keep
    values the new UDF did not compute): removed here, their rows are computed again.
    """
    kept = []
    for bk in keys:
        try:
            schema = store.schema(bk.key())
        except KeyError:
            continue
        except CorruptCheckpointError as exc:
            discard_corrupt(store, bk.key(), exc)
            continue
        other = [f"{f.name}: {f.type}, now {ds.schema.field(f.name).type}" for f in schema
                 if f.name in ds.schema.names and not f.type.equals(ds.schema.field(f.name).type)]
        if other:
            log.warning("checkpoint %s holds values of other types than the table's columns (%s): the column was "
                        "re-created with another type; removing it: its rows will be computed again", bk.key(),
                        "; ".join(other))
            store.delete(bk.key())
            continue
        kept.append(bk)
    return kept


def checkpointed_addresses(store: CheckpointStore, keys: list[BatchKey]) -> np.ndarray:
    """Row addresses the batch checkpoints ``keys`` hold a value for (a skipped row holds none)."""
    parts = []
    for bk in keys:
        try:
            if not bk.partial:
                parts.append(store.get_columns(bk.key(), [ROWADDR]).column(ROWADDR).to_numpy())
                continue
            table = store[bk.key()]
        except CorruptCheckpointError as exc:
            discard_corrupt(store, bk.key(), exc)
            continue
        # The job's own fingerprint comes last (a view's row fingerprint follows its UDF columns' ones).
        fp = [name for name in table.column_names if is_fingerprint_column(name)][-1]
        parts.append(table.filter(table.column(fp).is_valid()).column(ROWADDR).to_numpy())
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def discard_corrupt(store: CheckpointStore, key: str, exc: Exception) -> None:
    """Removes a truncated or unreadable checkpoint, so its rows are planned and computed again."""
    log.warning("%s; removing it: its rows will be computed again", exc)
    store.delete(key)


def store_plan(
    job: JobSpec,
    fragments: list[FragmentPlan],
    work: list[tuple[int, list[tuple[int, int]]]],
    options: JobOptions,
    call: PlanCall,
    label: str,
    *,
    rows_stale: int | None = None,
) -> PlanSummary:
    """Cuts the work into tasks, stores the plan document and the job's record, and returns its summary.

    ``rows_stale``: what the job's record says of the column's stale values when planned (a backfill's)."""
    src_keys = {f.id: f.src_key for f in fragments if f.src_key is not None}
    runs = dict(work)
    counts = [(fid, count_of(r)) for fid, r in work]
    rows_to_compute = sum(n for _, n in counts)
    lo, _ = options.checkpoint_bounds()
    pieces = cut_tasks(counts, call.parallelism, lo, options.task_size,
                       lambda: measured_row_seconds(call.store, job))
    # A part holding every row of its fragment to compute (none checkpointed before) writes the fragment's file.
    entries = {f.id: f for f in fragments}
    whole = {fid for fid, r in work if entries[fid].needed == r}
    counted = dict(counts)

    def part(fid: int, a: int, b: int) -> TaskPart:
        target = FileTarget.of(entries[fid]) if fid in whole and a == 0 and b == counted[fid] else None
        # Built from validated entries and run maths: not validated again (a part a fragment of a large plan).
        return TaskPart.model_construct(frag=fid, ranges=slice_runs(runs[fid], a, b), src_key=src_keys[fid],
                                        target=target)

    # Longest first: Spark launches tasks in partition order, so the big ones start early and
    # the small ones fill the gaps at the end.
    tasks = sorted((Task(parts=[part(*p) for p in piece]) for piece in pieces), key=lambda t: t.rows, reverse=True)
    # Reused: rows already valid, held by a staged file, or checkpointed by an earlier run.
    reused = sum(f.rows for f in fragments if f.action is not Action.EMPTY) - rows_to_compute
    return save_plan(job, fragments, tasks, rows_to_compute, reused, options, call, label, rows_stale=rows_stale)


def save_plan(
    job: JobSpec,
    fragments: list[FragmentPlan] | None,
    tasks: list[Task] | list[ExpandTask],
    rows_to_compute: int,
    reused: int,
    options: JobOptions,
    call: PlanCall,
    label: str,
    *,
    rows_stale: int | None = None,
) -> PlanSummary:
    """Stores a plan of ready-cut tasks and the job's record (a job that is not live gets none); its summary."""
    store = call.store
    if store.uri is None:
        raise InvalidArgumentError("the checkpoint store must be reachable from Spark executors (it has no URI)")
    check_leases()  # before anything is stored
    lo, hi = options.checkpoint_bounds()
    now = dt.datetime.now(dt.UTC)
    job_id = new_job_id(now)
    settings = PlanSettings(checkpoint_size=options.initial_checkpoint_size(), min_checkpoint_size=lo,
                            max_checkpoint_size=hi, task_size=options.task_size,
                            commit_granularity=options.commit_granularity, concurrency=options.concurrency,
                            parallelism=call.parallelism, commit_retries=options.commit_retries,
                            commit_timeout=options.commit_timeout,
                            checkpoint_seconds=options.batch_checkpoint_flush_interval_seconds,
                            **options.task_settings(now.timestamp()))
    planned = {"fragments": fragments} if fragments is not None else {}  # a column kind's fragment plans
    plan = plan_of({**job.model_dump(), "job_id": job_id, "created_at": now.isoformat(), "store_uri": store.uri,
                    "settings": settings, "tasks": tasks, "rows_to_compute": rows_to_compute, "rows_reused": reused,
                    **planned})
    jobs = JobStore(store)
    summary = plan.summary(jobs.plan_uri(job_id))
    if call.dry and not summary.nothing_to_do:  # a question, not a job: nothing stored, nobody takes it over
        log.info("plan (not stored: a dry plan) %s: %s", label, summary.describe())
        return summary
    # Stored even with nothing to do, so every later stage can be handed its URI and be a no-op;
    # it holds no fragment (compaction and clean-up see no live job) and gets no job record.
    jobs.put_plan(job_id, plan.model_dump_json(exclude_none=True))
    if not summary.nothing_to_do:
        record = JobRecord(
            job_id=job_id, kind=job.kind, table=job.table, column=job.column, created_at=plan.created_at,
            updated_at=plan.created_at, read_version=plan.read_version, rows_planned=rows_to_compute,
            rows_checkpointed=max(sum(f.rows for f in fragments or [] if f.action is Action.COMPUTE) - rows_to_compute,
                                  0),
            airflow_run_id=call.airflow_run_id, rows_stale=rows_stale)
        start_record(store, record)
        take_over(store, record)  # a killed run of the same column (or view): this job continues from its checkpoints
    log.info("plan %s: %s: %s", job_id, label, summary.describe())
    return summary


def open_plan(plan_uri: str, storage_options: dict[str, str] | None = None
              ) -> tuple[AnyPlan, CheckpointStore]:
    """Reads a plan document of any kind and opens the store it lives in."""
    keep_collections_small()
    try:
        root, key = split_key_uri(plan_uri)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    store = open_store(root, storage_options)
    if key not in store:
        raise InvalidArgumentError(f"plan not found: {plan_uri}")
    # No stage changes the plan it is handed: the stages of a job run in one process share one parsed plan.
    return _PLANS_PARSED.get(plan_uri, store.get_text(key), lambda t: plan_from_json(t, f"plan {plan_uri}")), store


def load_plan(plan_uri: str, storage_options: dict[str, str] | None = None) -> tuple[JobPlan, CheckpointStore]:
    """Reads the plan of a job that applies, writes and verifies (not a compaction's) and opens its store."""
    if not isinstance(plan_uri, str) or not plan_uri.strip():
        raise InvalidArgumentError(f"load_plan: plan_uri must be a plan URI string (a plan summary's plan_uri), "
                                   f"got {plan_uri!r}")
    plan, store = open_plan(plan_uri, storage_options)
    if plan.kind not in registered_kinds():
        raise InvalidArgumentError(f"{plan_uri} is a {plan.kind} plan, not a plan of a job that applies, writes and "
                                   f"verifies ({', '.join(registered_kinds())})")
    return cast("JobPlan", plan), store


_STAGED_PARSED: ParsedDocs[StagedFiles] = ParsedDocs(512)
_PLANS_PARSED: ParsedDocs[AnyPlan] = ParsedDocs(16)


def staged_records(store: CheckpointStore, job: str) -> dict[str, StagedFiles]:
    """The job's staged-files records by key (an unreadable one is removed: its fragments are written again)."""
    records = {}
    for staged in JobStore(store).staged_keys(job):
        key = staged.key()
        try:
            records[key] = _STAGED_PARSED.read(store, key, partial(_staged_of, key=key))
        except KeyError:
            continue
        except CorruptCheckpointError as exc:
            discard_corrupt(store, key, exc)
    return records


def _staged_of(text: str, key: str) -> StagedFiles:
    """A staged-files record from its text (CorruptCheckpointError when it does not parse, as ``get_model``)."""
    try:
        return StagedFiles.model_validate_json(text)
    except ValueError as exc:
        raise CorruptCheckpointError(f"{key} does not hold a StagedFiles: {str(exc)[:200]}") from None


def staged_files(store: CheckpointStore, job: str) -> dict[int, list[FragmentCheckpoint]]:
    """Every file the job's writers staged, by fragment."""
    files: dict[int, list[FragmentCheckpoint]] = {}
    for record in staged_records(store, job).values():
        for fid, ckpt in record.files.items():
            files.setdefault(fid, []).append(ckpt)
    return files


def _reusable(ckpt: FragmentCheckpoint, src_files: list[str], out_leaves: list[int], column_uid: str,
              out_file: str | None, where: str | None) -> bool:
    """A staged file still to commit, while it matches the inputs, the output and the job's filter."""
    if ckpt.output_field_ids != out_leaves or ckpt.column_uid != column_uid or ckpt.src_data_files != src_files:
        return False
    if out_file == ckpt.file.path or ckpt.base_file != out_file:  # committed already, or staged over another file
        return False
    return ckpt.complete or ckpt.where == where
