"""Apply, write+commit and verify of a chunker or batch-UDTF view refresh.

Apply expands the planned parents (or runs the planned partitions) on Spark executors.  A chunker's
parents are expanded in checkpoints sized by the UDTF's measured speed (a few seconds of work each, a
small probe first), and each checkpoint says every parent it expanded -- a parent without rows, or one
the error policy skipped, leaves a marker row -- so a killed run loses at most the checkpoint in flight
and a rerun takes every parent a checkpoint holds, however its parts are cut.  Write+commit turns the
checkpoints into new Lance fragments on the executors (each parent's rows taken from one checkpoint),
records them in the store, then commits them on the driver in one ``Update`` with the deletion of the
rows they replace -- atomic, so a reader never sees a parent's old and new rows at once, nor neither.
The commit carries the job's id as its message, so a retried stage knows when its commit already landed.
Verify checks what the view holds (:mod:`geneva_provider.pipeline.udtf_check`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.checkpoint import CheckpointStore
from geneva_provider.core.error_store import ErrorStore
from geneva_provider.core.errors import (
    CheckpointMissingError,
    ConcurrentOverwriteError,
    UDFExecutionError,
    VerificationError,
)
from geneva_provider.core.fingerprints import digest_fingerprints
from geneva_provider.core.fragments import fragment_of
from geneva_provider.core.functions.udf import UDFCallError
from geneva_provider.core.functions.udtf import UDTF, UDTFKind, load_udtf
from geneva_provider.core.kinds import RowOutcome
from geneva_provider.core.models import (
    AppendedFragments,
    ApplyResult,
    CommitRecord,
    GroupFragments,
    Plan,
    RowError,
    Task,
    TaskError,
    TaskPart,
    UdtfWork,
    VerifyResult,
    WriteResult,
)
from geneva_provider.core.ranges import positions_of
from geneva_provider.core.store_layout import BatchKey, JobStore, batch_prefix
from geneva_provider.core.udtf_view_meta import (
    CHUNK_INDEX,
    PARTITION,
    PARTITION_FP,
    SOURCE_FP,
    udtf_view_state,
)
from geneva_provider.core.view_meta import SOURCE_ROW_ID
from geneva_provider.pipeline.checkpoint_sizing import job_sizer
from geneva_provider.pipeline.commit import CommitPolicy, is_retryable_conflict
from geneva_provider.pipeline.context import StageContext
from geneva_provider.pipeline.job_records import update_record
from geneva_provider.pipeline.runner import describe_profile, job_tag, most_at_once, options_for_tasks, run_tasks
from geneva_provider.pipeline.skip_limits import check_skip_limits
from geneva_provider.pipeline.udtf_check import check_udtf_view
from geneva_provider.pipeline.udtf_lineage import mark_for_rebuild, mark_refreshed

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, SparkSession

log = logging.getLogger(__name__)

_UDTFS: dict[tuple[str, int], UDTF] = {}  # one unpickled UDTF (and stateful instance) per worker process
_SKIPPED = -1  # the __chunk_index of a marker row: a parent whose expansion the error policy skipped
_EMPTY = -2    # ... and of a parent that has no rows: a checkpoint names every parent it expanded


def _work(plan_or_ctx: Plan | StageContext) -> UdtfWork:
    job = plan_or_ctx.job if isinstance(plan_or_ctx, StageContext) else plan_or_ctx
    if job.udtf is None:
        raise CheckpointMissingError(f"plan of view '{job.table}' is a UDTF refresh without its source")
    return job.udtf


def part_prefix(job_prefix: str, part: TaskPart) -> str:
    return batch_prefix(job_prefix, src_key=part.src_key)


def part_key(job_prefix: str, part: TaskPart, partial_: bool = False) -> str:
    """A batch UDTF partition's checkpoint key: the partition's rows and fingerprint name it."""
    start, end = (part.start, part.end) if part.ranges else (0, 0)  # an empty selection: one call over no rows
    return BatchKey(part_prefix(job_prefix, part), part.frag, start, end, partial=partial_).key()


def chunk_key(job_prefix: str, part: TaskPart, ids: np.ndarray, partial_: bool = False) -> str:
    """A chunker checkpoint's key: the refresh's prefix and the first and last parent it expanded."""
    return BatchKey(part_prefix(job_prefix, part), 0, int(ids[0]), int(ids[-1]) + 1, partial=partial_).key()


class Held:
    """The checkpoints a refresh holds, and which of a part's parents (or which partitions) they expanded."""

    def __init__(self, store: CheckpointStore, job_prefix: str, chunker: bool) -> None:
        self.store, self.chunker = store, chunker
        self.keys: dict[str, list[BatchKey]] = {}
        for bk in sorted(JobStore(store).batches(job_prefix), key=lambda k: (k.start, k.end, k.key())):
            self.keys.setdefault(bk.prefix, []).append(bk)
        self.job_prefix = job_prefix

    def keys_for(self, part: TaskPart) -> list[str]:
        """The checkpoints that may hold the part's rows, in the order the writer takes them."""
        keys = self.keys.get(part_prefix(self.job_prefix, part), [])
        if self.chunker:
            return [k.key() for k in keys if k.start < part.end and k.end > part.start]
        return [k.key() for k in keys if k.frag_id == part.frag][:1]

    def todo(self, part: TaskPart) -> np.ndarray:
        """The chunker part's parents no checkpoint has expanded yet, ascending."""
        ids = positions_of(part.ranges)
        keys = self.keys_for(part)
        if not keys:
            return ids
        done = np.concatenate([self.store.get_columns(k, [SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_numpy()
                               for k in keys])
        return ids[~np.isin(ids, done)]

    def done(self, part: TaskPart) -> bool:
        """Whether the part is expanded (a batch UDTF's partition -- even one of no rows -- runs whole)."""
        return not len(self.todo(part)) if self.chunker else bool(self.keys_for(part))


# ---------------------------------------------------------------------- executor side
class _Expander:
    """What one Spark partition opens once: the UDTF, the source at the plan's version, the store."""

    def __init__(self, ctx: StageContext) -> None:
        import lance

        self.ctx, self.job, self.work = ctx, ctx.job, _work(ctx)
        self.store = ctx.store()
        self.view = ctx.dataset()
        state = udtf_view_state(self.view.schema.metadata, self.job.table)
        self.spec = state.spec
        cache = (self.job.table_uri, hash(state.pickle))
        if cache not in _UDTFS:
            _UDTFS[cache] = load_udtf(state.pickle)
        self.fn = _UDTFS[cache]
        self.src = lance.dataset(self.work.source_uri, version=self.work.source_version,
                                 storage_options=ctx.storage_options)
        self.held = Held(self.store, self.job.job_prefix, self.fn.kind is UDTFKind.CHUNKER)
        self.schema = pa.schema([self.view.schema.field(n) for n in self._columns()])

    def _columns(self) -> list[str]:
        fields = [*self.spec.columns, *self.fn.output_schema.names]
        return [*fields, *(f.name for f in self.spec.reserved_fields())]

    def run(self, part: TaskPart, ids: np.ndarray, failures: list[RowError]) -> tuple[int, TaskError | None]:
        """Expands the parents ``ids`` of a part (a batch UDTF: runs its partition) into one checkpoint;
        returns (UDTF calls, error)."""
        rows = self.src._take_rows(pa.array(ids, pa.uint64()), columns=self.work.read_columns) if len(ids) else \
            pa.schema([self.src.schema.field(c) for c in self.work.read_columns]).empty_table()
        if rows.num_rows != len(ids):
            raise RuntimeError(f"view '{self.job.table}': {len(ids) - rows.num_rows} of {len(ids)} source rows are "
                               f"missing at the pinned source version {self.work.source_version}")
        found: list[Any] = []
        try:
            if self.fn.kind is UDTFKind.CHUNKER:
                table, calls = self._expand(rows, ids, found), len(ids)
            else:
                table, calls = self._partition(part, rows), 1
        except UDFCallError as exc:
            return 0, self._error(exc, ids)
        finally:
            failures += [RowError(column=self.fn.name, frag=0, row_address=int(ids[f.index]) if f.index >= 0 else None,
                                  error_type=f.error_type, message=f.message, traceback=f.traceback,
                                  attempts=f.attempts, outcome=f.outcome) for f in found]
        skipped = any(f.outcome == RowOutcome.SKIPPED for f in found)
        chunker = self.fn.kind is UDTFKind.CHUNKER
        key = chunk_key(self.job.job_prefix, part, ids, skipped) if chunker else part_key(
            self.job.job_prefix, part, skipped)
        self.store[key] = table
        return calls, None

    def _error(self, exc: UDFCallError, ids: np.ndarray) -> TaskError:
        where = (f"source row {int(ids[exc.index])} (__source_row_id) of table '{self.spec.base_table}'"
                 if exc.index is not None and exc.index < len(ids) else
                 f"source rows {int(ids[0])}..{int(ids[-1])} of table '{self.spec.base_table}'" if len(ids) else
                 f"an empty selection of table '{self.spec.base_table}'")
        original = exc.original
        return TaskError(message=f"{self.fn.label} failed at {where}, refreshing view '{self.job.table}': {exc}",
                         exception=type(original).__name__ if original is not None else "UDFCallError", frag=0)

    def _expand(self, rows: pa.Table, ids: np.ndarray, found: list[Any]) -> pa.Table:
        out, parents = self.fn.expand(rows, found)
        order = np.argsort(parents, kind="stable")
        if len(order) and np.any(np.diff(parents) < 0):
            out, parents = out.take(pa.array(order)), parents[order]
        first = np.searchsorted(parents, parents, side="left")
        fps = digest_fingerprints([rows.column(c) for c in self.work.read_columns], self.job.column_uid,
                                  rows.num_rows)
        take = pa.array(parents, pa.int64())
        columns: dict[str, Any] = {name: rows.column(src).take(take) for name, src in self.spec.columns.items()}
        columns.update({name: out.column(name) for name in out.column_names})
        columns[SOURCE_ROW_ID] = pa.array(ids[parents], pa.int64())
        columns[CHUNK_INDEX] = pa.array(np.arange(len(parents)) - first, pa.int32())
        columns[SOURCE_FP] = fps.take(take)
        table = pa.table(columns).cast(self.schema)
        skipped = sorted({int(ids[f.index]) for f in found if f.outcome == RowOutcome.SKIPPED and f.index >= 0})
        empty = np.setdiff1d(np.setdiff1d(ids, ids[parents]), np.asarray(skipped, np.int64))
        if skipped or len(empty):  # markers, never committed as rows: parents to expand again, parents without rows
            marks = pa.table({SOURCE_ROW_ID: pa.array([*skipped, *empty.tolist()], pa.int64()),
                              CHUNK_INDEX: pa.array([_SKIPPED] * len(skipped) + [_EMPTY] * len(empty), pa.int32())})
            table = pa.concat_tables([table, marks], promote_options="default").cast(self.schema)
        return table

    def _partition(self, part: TaskPart, rows: pa.Table) -> pa.Table:
        inputs = self.spec.input_columns
        out = self.fn.run_partition(rows.select(inputs))
        key, fp = self.work.partitions[part.frag]
        columns = {name: out.column(name) for name in out.column_names}
        columns[PARTITION] = pa.array([key] * out.num_rows, pa.uint64())
        columns[PARTITION_FP] = pa.array([fp] * out.num_rows, pa.uint64())
        return pa.table(columns).cast(self.schema)


def _expand_partition(ctx: StageContext, tasks: Iterable[Task]) -> Iterator[dict[str, Any]]:
    worker = _Expander(ctx)
    sizer = job_sizer(ctx.job_id, ctx.settings)  # a later task in this worker starts at the learnt size
    for task in tasks:
        calls, checkpoints, error = 0, 0, None
        failures: list[RowError] = []
        for part in task.parts:
            if worker.fn.kind is not UDTFKind.CHUNKER:  # a partition runs whole, in one call
                if not worker.held.done(part):
                    n, error = worker.run(part, positions_of(part.ranges), failures)
                    calls, checkpoints = calls + n, checkpoints + (error is None)
                if error is not None:
                    break
                continue
            todo, i = worker.held.todo(part), 0
            while i < len(todo) and error is None:
                ids = todo[i:i + sizer.size]
                t0 = time.perf_counter()
                n, error = worker.run(part, ids, failures)
                if error is None:
                    sizer.observe(len(ids), time.perf_counter() - t0)
                    calls, checkpoints, i = calls + n, checkpoints + 1, i + len(ids)
            if error is not None:
                break
        yield {"calls": calls, "checkpoints": checkpoints, "parents": sum(p.rows for p in task.parts),
               "failures": [f.model_dump_json() for f in failures],
               "error": error.model_dump_json() if error is not None else None}


# ---------------------------------------------------------------------- driver side: apply
def run_udtf_apply(plan: Plan, store: CheckpointStore, spark: SparkSession, storage_options: dict[str, str] | None,
                   profile: Any | None) -> ApplyResult:
    """Expands every planned part no checkpoint holds yet, on Spark."""
    held = Held(store, plan.job_prefix, _chunker(plan))
    tasks = [t for t in plan.tasks if any(not held.done(p) for p in t.parts)]
    log.info("apply %s: %d of %d tasks still to run (%s)", plan.job_id, len(tasks), len(plan.tasks),
             plan.summary("").describe())
    t0 = time.perf_counter()
    ctx = StageContext.of(plan, options_for_tasks(spark, storage_options) if tasks else storage_options)
    spans: list[tuple[float, float]] = []
    progress = _ExpandProgress(plan, store)
    results = run_tasks(spark, tasks, partial(_expand_partition, ctx), description=f"geneva expand {plan.table}",
                        concurrency=plan.settings.concurrency, progress=progress, tag=job_tag(plan.job_id),
                        profile=profile, spans=spans) if tasks else []
    calls = sum(r["calls"] for r in results)
    failures = [RowError.model_validate_json(f) for r in results for f in r["failures"]]
    errors = [TaskError.model_validate_json(r["error"]) for r in results if r["error"]]
    ErrorStore(plan.table_uri, storage_options).append(plan.job_id, plan.table, failures)
    failed = sum(1 for f in failures if f.outcome == RowOutcome.SKIPPED)
    result = ApplyResult(job_id=plan.job_id, tasks_run=len(tasks), rows_computed=calls if _chunker(plan) else sum(
        r["parents"] for r in results), rows_reused=0, checkpoints_written=sum(r["checkpoints"] for r in results),
        errors=len(errors), rows_failed=failed,
        rows_retried=sum(1 for f in failures if f.outcome == RowOutcome.RECOVERED),
        seconds=round(time.perf_counter() - t0, 3), udtf_calls=calls,
        max_tasks_at_once=most_at_once(spans) if profile is not None and spans else None)
    log.info("apply %s: %d UDTF calls, %d checkpoints, %d rows skipped by the error policy, %.1fs%s", plan.job_id,
             calls, result.checkpoints_written, failed, result.seconds,
             "" if result.max_tasks_at_once is None else
             f"; under the resource profile {describe_profile(profile)}: at most {result.max_tasks_at_once} tasks "
             "ran at once")
    if errors:
        raise UDFExecutionError(errors[0].message + (f" ({len(errors)} tasks failed)" if len(errors) > 1 else ""))
    update_record(store, plan.job_id, rows_checkpointed=plan.rows_to_compute, rows_failed=failed)
    check_skip_limits(plan, failed)
    return result


class _ExpandProgress:
    """Parents expanded so far (from the checkpoints' keys in the store), for the log and the job's record."""

    def __init__(self, plan: Plan, store: CheckpointStore) -> None:
        self.plan, self.store, self.t0 = plan, store, time.perf_counter()
        self.prefixes = {part_prefix(plan.job_prefix, p) for t in plan.tasks for p in t.parts}
        self.ids = np.sort(positions_of([r for t in plan.tasks for p in t.parts for r in p.ranges]))
        self.rows = {(part_prefix(plan.job_prefix, p), p.frag): p.rows for t in plan.tasks for p in t.parts}
        self.before = self._done()

    def _done(self) -> int:
        keys = [k for k in JobStore(self.store).batches(self.plan.job_prefix) if k.prefix in self.prefixes]
        if not _chunker(self.plan):
            return sum(self.rows.get((k.prefix, k.frag_id), 0) for k in keys)
        counted = sum(int(np.searchsorted(self.ids, k.end) - np.searchsorted(self.ids, k.start)) for k in keys)
        return min(counted, self.plan.rows_to_compute)

    def __call__(self) -> str:
        done = self._done()
        update_record(self.store, self.plan.job_id, rows_checkpointed=done)
        elapsed = time.perf_counter() - self.t0
        return (f"apply {self.plan.job_id} ({self.plan.label()}): {done:,} of {self.plan.rows_to_compute:,} source "
                f"rows expanded, {(done - self.before) / elapsed if elapsed else 0:,.0f} rows/s")


def _chunker(plan: Plan) -> bool:
    return not _work(plan).partitions and not _work(plan).partition_state


# ---------------------------------------------------------------------- write+commit
def _rows_to_write(store: CheckpointStore, keys: list[str], ranges: list[tuple[int, int]] | None
                   ) -> tuple[pa.Table, list[int]]:
    """A part's rows from its checkpoints (each parent's from the first checkpoint that expanded it: a
    retried task may have expanded a parent twice), and the parents the error policy skipped."""
    tables, claimed = [], np.zeros(0, np.int64)
    allowed = positions_of(ranges) if ranges is not None else None
    for key in keys:
        table = store[key]
        if allowed is not None:
            parents = table.column(SOURCE_ROW_ID).to_numpy()
            mine = np.setdiff1d(np.intersect1d(parents, allowed), claimed)
            claimed = np.union1d(claimed, mine)
            table = table.filter(pa.array(np.isin(parents, mine)))
        tables.append(table)
    table = pa.concat_tables(tables)
    if CHUNK_INDEX not in table.column_names:
        return table, []
    index = table.column(CHUNK_INDEX)
    pending = table.filter(pc.equal(index, _SKIPPED)).column(SOURCE_ROW_ID).to_pylist()
    return table.filter(pc.greater_equal(index, 0)), pending


def _write_group(ctx: StageContext, slots: Iterable[list[tuple[list[str], list[tuple[int, int]] | None]]]
                 ) -> Iterator[dict[str, Any]]:
    """Writes some parts' checkpoints (``(keys, parent runs)`` each) as new fragments of the view (not committed)."""
    import lance

    store = ctx.store()
    work = _work(ctx)
    for units in slots:
        taken = [_rows_to_write(store, keys, ranges) for keys, ranges in units if keys]
        if not taken:
            continue
        table = pa.concat_tables([t for t, _ in taken])
        fragments = []
        if table.num_rows:
            kwargs: dict[str, Any] = {"max_rows_per_file": work.max_rows_per_fragment} \
                if work.max_rows_per_fragment else {}
            fragments = [json.dumps(f.to_json()) for f in lance.fragment.write_fragments(
                table, ctx.job.table_uri, mode="append", storage_options=ctx.storage_options, **kwargs)]
        yield {"fragments": fragments, "rows": table.num_rows, "pending": [i for _, p in taken for i in p]}


def run_udtf_write_commit(plan: Plan, store: CheckpointStore, spark: SparkSession,
                          storage_options: dict[str, str] | None) -> WriteResult:
    """Writes the expanded rows as new fragments and commits them with the rows they replace deleted.

    One atomic commit by default; with ``commit_granularity=N``, one commit per N checkpoints (each
    deleting the old rows of its own parents), so a killed write keeps what it committed.
    """
    jobs = JobStore(store)
    done = jobs.committed(plan.job_id)
    if done is not None:
        log.info("write %s: committed by an earlier attempt at version %d", plan.job_id, done.result.version)
        return done.result
    t0 = time.perf_counter()
    chunker = _chunker(plan)
    held = Held(store, plan.job_prefix, chunker)
    parts = [p for t in plan.tasks for p in t.parts]
    missing = [p for p in parts if not held.done(p)]
    if missing:
        raise CheckpointMissingError(
            f"write+commit of job {plan.job_id} ({plan.label()}): the apply stage has not finished: {len(missing)} "
            f"of {len(parts)} parts have no checkpoint (first: source rows {missing[0].ranges[0][0]}.."
            f"{missing[0].ranges[-1][1] - 1}); run the apply stage first. Nothing was written or committed")
    size = plan.settings.commit_granularity or max(len(parts), 1)
    groups = [parts[i:i + size] for i in range(0, len(parts), size)] or [[]]
    record = jobs.appended(plan.job_id) or AppendedFragments()
    work = _work(plan)
    ctx = StageContext.of(plan, options_for_tasks(spark, storage_options) if parts else storage_options)
    version, deleted, retries = plan.read_version, 0, 0
    for g, group in enumerate(groups):
        if g in record.committed:
            continue
        if g not in record.groups:
            units = [(held.keys_for(p), p.ranges if chunker else None) for p in group]
            slots = max(1, min(len(units), plan.settings.parallelism))
            written = run_tasks(spark, [units[i::slots] for i in range(slots)], partial(_write_group, ctx),
                                description=f"geneva write {plan.table}", tag=job_tag(plan.job_id)) if units else []
            record.groups[g] = GroupFragments(fragments=[f for r in written for f in r["fragments"]],
                                              rows=sum(r["rows"] for r in written),
                                              pending=sorted(i for r in written for i in r["pending"]))
            jobs.put_appended(plan.job_id, record)  # before the commit: a retry commits these, never writes again
        last = g == len(groups) - 1
        version, n, tries = _commit(plan, record.groups[g], _replaced(work, group, parts if last else None),
                                    f"{_message(plan)} commit {g + 1}/{len(groups)}", storage_options)
        deleted, retries = deleted + n, retries + tries
        record.committed.append(g)
        jobs.put_appended(plan.job_id, record)
        if len(groups) > 1:
            log.info("write %s: commit %d of %d: version %d, %d rows added, %d deleted", plan.job_id, g + 1,
                     len(groups), version, record.groups[g].rows, n)
    pending = sorted(i for grp in record.groups.values() for i in grp.pending)
    mark_refreshed(_open(plan.table_uri, storage_options), work, pending)
    rows = sum(grp.rows for grp in record.groups.values())
    fragments = sum(len(grp.fragments) for grp in record.groups.values())
    result = WriteResult(job_id=plan.job_id, version=_open(plan.table_uri, storage_options).version,
                         fragments_committed=fragments, rows_committed=rows, fragments_vanished=[],
                         commit_retries=retries, seconds=round(time.perf_counter() - t0, 3))
    jobs.put_committed(plan.job_id, CommitRecord(result=result))
    update_record(store, plan.job_id, rows_committed=plan.rows_to_compute)
    log.info("write %s: view '%s' version %d: %d rows added in %d fragments, %d rows deleted, %d parents left to "
             "expand again", plan.job_id, plan.table, result.version, rows, fragments, deleted, len(pending))
    return result


def _open(uri: str, storage_options: dict[str, str] | None) -> Dataset:
    import lance

    return lance.dataset(uri, storage_options=storage_options)


_MESSAGE = "geneva udtf refresh "  # a UDTF refresh's commit message: this and the job's id


def _message(plan: Plan) -> str:
    return f"{_MESSAGE}{plan.job_id}"


def _landed(ds: Dataset, plan: Plan, message: str) -> bool:
    """True when the commit ``message`` names is among the view's versions since the plan read it.

    Raises ConcurrentOverwriteError when another refresh of the view committed since: this plan's rows
    were planned against the view before it, and committing them would expand some parents twice.
    """
    if ds.version <= plan.read_version:
        return False
    mine, others = _message(plan), set()
    landed = False
    for t in ds.get_transactions(ds.version - plan.read_version):
        text = (t.transaction_properties or {}).get("__lance_commit_message", "") if t is not None else ""
        landed = landed or text == message
        if text.startswith(_MESSAGE) and not text.startswith(mine):
            others.add(text.removeprefix(_MESSAGE).split()[0])
    if others and not landed:
        raise ConcurrentOverwriteError(
            f"{plan.label()}: job(s) {sorted(others)} refreshed the view while job {plan.job_id} ran, so its rows "
            "would repeat theirs; nothing of this job was committed: refresh again (a new plan takes what they "
            "committed into account)")
    return landed


def _replaced(work: UdtfWork, group: list[TaskPart], every: list[TaskPart] | None) -> tuple[str, np.ndarray]:
    """The rows a commit deletes: (column, values) -- the old rows of the group's own parents (or
    partitions); the last commit (``every`` given) also those of parents no part expands again."""
    if work.partition_state is not None:  # a batch UDTF: by partition
        column, doomed = PARTITION, np.asarray(work.delete_partitions, np.int64)  # keys are below 2**63
        mine = np.asarray([work.partitions[p.frag][0] for p in group], np.int64)
        others = np.asarray([work.partitions[p.frag][0] for p in every or []], np.int64)
    else:
        column, doomed = SOURCE_ROW_ID, positions_of(work.delete_parents)
        mine = positions_of([r for p in group for r in p.ranges])
        others = positions_of([r for p in every or [] for r in p.ranges])
    if every is None:
        return column, doomed[np.isin(doomed, mine)]
    return column, doomed[np.isin(doomed, mine) | ~np.isin(doomed, others)]


def _commit(plan: Plan, group: GroupFragments, replaced: tuple[str, np.ndarray], message: str,
            storage_options: dict[str, str] | None) -> tuple[int, int, int]:
    """One Update: the group's new fragments, and the rows they replace deleted.  Returns (version, rows
    deleted, retries); a commit that already landed (a retried stage) is not made again."""
    import lance

    new = [lance.fragment.FragmentMetadata.from_json(f) for f in group.fragments]
    policy = CommitPolicy.of(plan.settings)
    state = {"retries": -1, "deleted": 0}
    ds = _open(plan.table_uri, storage_options)
    for attempt in policy.retrying(is_retryable_conflict):
        with attempt:
            state["retries"] += 1
            ds = _open(plan.table_uri, storage_options)
            if _landed(ds, plan, message):
                break
            updated, removed, state["deleted"] = _deletions(ds, *replaced)
            if not (new or updated or removed):
                break
            ds = lance.LanceDataset.commit(
                plan.table_uri, lance.LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated,
                                                            new_fragments=new),
                read_version=ds.version, storage_options=storage_options, commit_message=message)
    return ds.version, state["deleted"], max(state["retries"], 0)


def _deletions(ds: Dataset, column: str, values: np.ndarray) -> tuple[list[Any], list[int], int]:
    """The fragments that lose rows whose ``column`` is in ``values`` (with their deletion files), and those
    that lose all of them; and how many rows go."""
    if not len(values):
        return [], [], 0
    t = ds.to_table(columns=[column], with_row_address=True)
    have = t.column(column).to_numpy(zero_copy_only=False)
    hit = np.isin(have, values.astype(have.dtype))  # one integer type: no float rounding of 64-bit keys
    addrs = t.column("_rowaddr").to_numpy()[hit]
    found = have[hit]
    updated, removed = [], []
    for fid in np.unique(addrs >> np.uint64(32)).tolist():
        mine = np.unique(found[(addrs >> np.uint64(32)) == fid])
        meta = fragment_of(ds, int(fid)).delete(f"{column} IN ({','.join(str(int(v)) for v in mine)})")
        (removed.append(int(fid)) if meta is None else updated.append(meta))
    return updated, removed, int(hit.sum())


# ---------------------------------------------------------------------- verify
def verify_udtf(plan: Plan, store: CheckpointStore, storage_options: dict[str, str] | None) -> VerifyResult:
    """Checks the refresh landed -- its commit recorded, the view holding the planned source version -- and
    that the view is exact: no (parent, chunk index) pair twice, no rows of a parent the source version does
    not select.  A view that is not is marked so the next refresh compares it with its whole source."""
    import lance

    commit = JobStore(store).committed(plan.job_id)
    if commit is None:
        raise VerificationError(f"job {plan.job_id} ({plan.label()}) is not committed: run its write+commit stage")
    ds = lance.dataset(plan.table_uri, storage_options=storage_options)
    state = udtf_view_state(ds.schema.metadata, plan.table)
    work = _work(plan)
    if state.base_version < work.source_version:
        raise VerificationError(f"job {plan.job_id} ({plan.label()}): the view holds source version "
                                f"{state.base_version}, not {work.source_version}, which the job expanded")
    try:
        source = lance.dataset(work.source_uri, version=state.base_version, storage_options=storage_options)
    except (ValueError, OSError):
        log.warning("verify %s: version %d of source table '%s' was cleaned up: the view's rows are not checked "
                    "against it", plan.job_id, state.base_version, state.spec.base_table)
    else:
        check = check_udtf_view(ds, plan.table, state, source)
        problems = check.problems()
        if problems:
            mark_for_rebuild(ds)
            raise VerificationError(f"job {plan.job_id}: {problems}. The next refresh compares the view with its "
                                    "whole source and repairs it")
    log.info("verify %s: view '%s' holds source version %d at version %d (%d rows added; no parent's rows twice, "
             "none of a parent the source does not select)", plan.job_id, plan.table, work.source_version,
             ds.version, commit.result.rows_committed)
    return VerifyResult(job_id=plan.job_id, table=plan.table, column=None, version=ds.version,
                        fragments_verified=commit.result.fragments_committed,
                        rows_verified=commit.result.rows_committed)
