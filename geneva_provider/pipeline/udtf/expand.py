"""The UDTF kind's apply: the planned parents of a chunker (or partitions of a batch UDTF) expanded into rows.

A chunker's parents are expanded in checkpoints sized by the UDTF's measured speed (a few seconds of
work each, a small probe first).  A checkpoint writes its rows once, as new fragments of the view that
write+commit only commits (:mod:`geneva_provider.pipeline.udtf.write`), and records in the store every
parent it expanded, with how many rows each has there -- none, or skipped by the error policy -- and the
fragments' metadata; so a killed run loses at most the checkpoint in flight (its fragment files are left
to Lance's clean-up) and a rerun takes every parent a checkpoint holds, however its parts are cut.  Each
call is marked while it runs, so a chunker that kills its Python worker is named with the source rows it
was expanding, as a UDF is.  The generic driver is :mod:`geneva_provider.pipeline.stages.apply`.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.contracts.models import (
    ApplyTaskResult,
    ExpandedFragments,
    ExpandPart,
    ExpandPlan,
    ExpandTask,
    RowError,
    TaskError,
    UdtfWork,
)
from geneva_provider.core.errors import CheckpointMissingError, CorruptCheckpointError
from geneva_provider.core.fingerprints import digest_fingerprints
from geneva_provider.core.functions.udf import UDFCallError
from geneva_provider.core.functions.udtf import UDTF, UDTFKind, load_udtf
from geneva_provider.core.ranges import positions_of
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import BatchKey, JobStore, batch_prefix
from geneva_provider.core.views.meta import SOURCE_ROW_ID
from geneva_provider.core.views.udtf_meta import (
    CHUNK_INDEX,
    PARTITION,
    PARTITION_FP,
    SOURCE_FP,
    udtf_view_state,
)
from geneva_provider.pipeline.spark.worker_deaths import CallWatch
from geneva_provider.pipeline.stages.checkpoint_sizing import job_sizer
from geneva_provider.pipeline.stages.context import StageContext
from geneva_provider.pipeline.stages.job_records import update_record
from geneva_provider.pipeline.stages.kinds import StageProgress

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

_UDTFS: dict[tuple[str, int], UDTF] = {}  # one unpickled UDTF (and stateful instance) per worker process
# A checkpoint is a table of the parents it expanded (SOURCE_ROW_ID, ascending) and of the rows each has in
# its fragments (PARENT_ROWS; SKIPPED for a parent the error policy skipped), whose schema metadata holds
# the fragments (FRAGMENTS: an ExpandedFragments).  A batch UDTF's checkpoint lists no parent.
PARENT_ROWS = "__rows"
SKIPPED = -1
FRAGMENTS = "geneva::udtf::fragments"
CHECKPOINT_SCHEMA = pa.schema([pa.field(SOURCE_ROW_ID, pa.int64()), pa.field(PARENT_ROWS, pa.int32())])


def checkpoint_table(parents: np.ndarray, rows: np.ndarray, written: ExpandedFragments) -> pa.Table:
    """What a checkpoint stores: its parents, the rows of each, and the fragments holding those rows."""
    return pa.table([pa.array(parents, pa.int64()), pa.array(rows, pa.int32())],
                    schema=CHECKPOINT_SCHEMA.with_metadata({FRAGMENTS: written.model_dump_json()}))


def fragments_of(checkpoint: pa.Table, key: str) -> ExpandedFragments:
    """The fragments a checkpoint wrote; CorruptCheckpointError when it does not say (not one of this kind's)."""
    text = (checkpoint.schema.metadata or {}).get(FRAGMENTS.encode())
    if text is None:
        raise CorruptCheckpointError(f"checkpoint {key} names no fragments: it is not a UDTF refresh's checkpoint")
    return ExpandedFragments.model_validate_json(text)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off while a chunker runs: the rows it yields (a tuple or an object per row,
    all kept until they become Arrow columns) would make the collector scan the growing list again and
    again -- a third of the calls' time -- and find no garbage.  Cycles the calls leave behind are
    collected once it is back on, at the end of the checkpoint."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def udtf_work(plan_or_ctx: ExpandPlan | StageContext) -> UdtfWork:
    job = plan_or_ctx.job if isinstance(plan_or_ctx, StageContext) else plan_or_ctx
    if job.udtf is None:
        raise CheckpointMissingError(f"plan of view '{job.table}' is a UDTF refresh without its source")
    return job.udtf


def part_prefix(job_prefix: str, part: ExpandPart) -> str:
    return batch_prefix(job_prefix, src_key=part.src_key)


def part_key(job_prefix: str, part: ExpandPart, partial_: bool = False) -> str:
    """A batch UDTF partition's checkpoint key: the partition's rows and fingerprint name it."""
    start, end = (part.start, part.end) if part.ranges else (0, 0)  # an empty selection: one call over no rows
    return BatchKey(part_prefix(job_prefix, part), part.partition or 0, start, end, partial=partial_).key()


def chunk_key(job_prefix: str, part: ExpandPart, ids: np.ndarray, partial_: bool = False) -> str:
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

    def keys_for(self, part: ExpandPart) -> list[str]:
        """The checkpoints that may hold the part's rows, in the order the writer takes them."""
        keys = self.keys.get(part_prefix(self.job_prefix, part), [])
        if self.chunker:
            return [k.key() for k in keys if k.start < part.end and k.end > part.start]
        return [k.key() for k in keys if k.frag_id == (part.partition or 0)][:1]

    def todo(self, part: ExpandPart) -> np.ndarray:
        """The chunker part's parents no checkpoint has expanded yet, ascending."""
        ids = positions_of(part.ranges)
        keys = self.keys_for(part)
        if not keys:
            return ids
        done = np.concatenate([self.store.get_columns(k, [SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_numpy()
                               for k in keys])
        return ids[~np.isin(ids, done)]

    def done(self, part: ExpandPart) -> bool:
        """Whether the part is expanded (a batch UDTF's partition -- even one of no rows -- runs whole)."""
        return not len(self.todo(part)) if self.chunker else bool(self.keys_for(part))


# ---------------------------------------------------------------------- executor side
class Expander:
    """What one Spark partition opens once: the UDTF, the source at the plan's version, the store."""

    def __init__(self, ctx: StageContext) -> None:
        import lance

        self.ctx, self.job, self.work = ctx, ctx.job, udtf_work(ctx)
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
        self.watch = CallWatch.here(self.store, ctx.job, ctx.job_id)
        # A later task of the job in this worker starts at the size learnt; its first, at the UDTF's last speed here.
        self.sizer = job_sizer(ctx.job_id, ctx.settings, function=(self.fn.name, self.fn.version))
        self.label = (f"{self.fn.label} expanding rows of table '{self.spec.base_table}' into view "
                      f"'{self.job.table}'")

    def run(self, task: ExpandTask) -> ApplyTaskResult:
        """Expands the task's parts: a chunker's parents in checkpoints sized by its measured speed, a batch
        UDTF's partition whole, in one call; parents (or partitions) a checkpoint holds are skipped."""
        result = ApplyTaskResult(rows_computed=task.rows if self.fn.kind is not UDTFKind.CHUNKER else 0)
        error = None
        for part in task.parts:
            if self.fn.kind is not UDTFKind.CHUNKER:  # a partition runs whole, in one call
                if not self.held.done(part):
                    n, error = self._checkpoint(part, positions_of(part.ranges), result.failures)
                    result.calls, result.checkpoints = result.calls + n, result.checkpoints + (error is None)
                if error is not None:
                    break
                continue
            todo, i = self.held.todo(part), 0
            while i < len(todo) and error is None:
                ids = todo[i:i + self.sizer.size]
                t0 = time.perf_counter()
                n, error = self._checkpoint(part, ids, result.failures)
                if error is None:
                    self.sizer.observe(len(ids), time.perf_counter() - t0)
                    result.calls, result.checkpoints, i = result.calls + n, result.checkpoints + 1, i + len(ids)
                    result.rows_computed += len(ids)
            if error is not None:
                break
        result.error = error
        return result

    def _columns(self) -> list[str]:
        return self.spec.fragment_columns(self.fn.output_schema.names)

    def _checkpoint(self, part: ExpandPart, ids: np.ndarray, failures: list[RowError]) -> tuple[int, TaskError | None]:
        """Expands the parents ``ids`` of a part (a batch UDTF: runs its partition) into one checkpoint;
        returns (UDTF calls, error)."""
        addrs = np.zeros(0, np.uint64)
        if len(ids):  # with their addresses, which name the source fragments a call that kills its worker was on
            rows = self.src._take_rows(pa.array(ids, pa.uint64()), columns=[*self.work.read_columns, "_rowaddr"])
            addrs = rows.column("_rowaddr").to_numpy()
            rows = rows.drop_columns(["_rowaddr"])
        else:
            rows = pa.schema([self.src.schema.field(c) for c in self.work.read_columns]).empty_table()
        if rows.num_rows != len(ids):
            raise RuntimeError(f"view '{self.job.table}': {len(ids) - rows.num_rows} of {len(ids)} source rows are "
                               f"missing at the pinned source version {self.work.source_version}")
        found: list[Any] = []
        watching = self.watch.calling(self.job.table, self.fn.name, addrs, label=self.label) \
            if self.watch is not None and len(addrs) else nullcontext()
        chunker = self.fn.kind is UDTFKind.CHUNKER
        try:
            with watching, gc_paused():
                if chunker:
                    (table, counts), calls = self._expand(rows, ids, found), len(ids)
                else:
                    table, counts, calls = self._partition(part, rows), np.zeros(0, np.int32), 1
        except UDFCallError as exc:
            return 0, self._error(exc, ids)
        finally:
            failures += [RowError(column=self.fn.name, frag=0, row_address=int(ids[f.index]) if f.index >= 0 else None,
                                  error_type=f.error_type, message=f.message, traceback=f.traceback,
                                  attempts=f.attempts, outcome=f.outcome) for f in found]
        skipped = any(f.outcome == RowOutcome.SKIPPED for f in found)
        key = chunk_key(self.job.job_prefix, part, ids, skipped) if chunker else part_key(
            self.job.job_prefix, part, skipped)
        self.store[key] = checkpoint_table(ids if chunker else np.zeros(0, np.int64), counts, self._write(table))
        return calls, None

    def _write(self, table: pa.Table) -> ExpandedFragments:
        """The rows as new fragments of the view, not committed: write+commit commits them as they are."""
        import lance

        if not table.num_rows:
            return ExpandedFragments(fragments=[], rows=0)
        kwargs: dict[str, Any] = {"max_rows_per_file": self.work.max_rows_per_fragment} \
            if self.work.max_rows_per_fragment else {}
        written = lance.fragment.write_fragments(table, self.job.table_uri, mode="append",
                                                 storage_options=self.ctx.storage_options, **kwargs)
        return ExpandedFragments(fragments=[json.dumps(f.to_json()) for f in written], rows=table.num_rows)

    def _error(self, exc: UDFCallError, ids: np.ndarray) -> TaskError:
        where = (f"source row {int(ids[exc.index])} (__source_row_id) of table '{self.spec.base_table}'"
                 if exc.index is not None and exc.index < len(ids) else
                 f"source rows {int(ids[0])}..{int(ids[-1])} of table '{self.spec.base_table}'" if len(ids) else
                 f"an empty selection of table '{self.spec.base_table}'")
        original = exc.original
        return TaskError(message=f"{self.fn.label} failed at {where}, refreshing view '{self.job.table}': {exc}",
                         exception=type(original).__name__ if original is not None else "UDFCallError", frag=0)

    def _expand(self, rows: pa.Table, ids: np.ndarray, found: list[Any]) -> tuple[pa.Table, np.ndarray]:
        """The chunker's rows of parents ``ids`` (``rows``), in the view's columns; and how many rows each
        parent has (SKIPPED: the error policy skipped it)."""
        out, parents = self.fn.expand(rows, found)
        order = np.argsort(parents, kind="stable")
        if len(order) and np.any(np.diff(parents) < 0):
            out, parents = out.take(pa.array(order)), parents[order]
        fps = digest_fingerprints([rows.column(c) for c in self.work.read_columns], self.job.column_uid,
                                  rows.num_rows, scheme=self.work.fingerprints)
        take = pa.array(parents, pa.int64())
        columns: dict[str, Any] = {name: rows.column(src).take(take) for name, src in self.spec.columns.items()}
        columns.update({name: out.column(name) for name in out.column_names})
        columns[SOURCE_ROW_ID] = pa.array(ids[parents], pa.int64())
        counts = np.bincount(parents, minlength=len(ids)).astype(np.int32)
        first = np.repeat(np.cumsum(counts) - counts, counts)  # each row's parent's first row
        columns[CHUNK_INDEX] = pa.array(np.arange(len(parents)) - first, pa.int32())
        columns[SOURCE_FP] = fps.take(take)
        counts[[f.index for f in found if f.outcome == RowOutcome.SKIPPED and f.index >= 0]] = SKIPPED
        return pa.table(columns).cast(self.schema), counts

    def _partition(self, part: ExpandPart, rows: pa.Table) -> pa.Table:
        inputs = self.spec.input_columns
        out = self.fn.run_partition(rows.select(inputs))
        key, fp = self.work.partitions[part.partition or 0]
        columns = {name: out.column(name) for name in out.column_names}
        columns[PARTITION] = pa.array([key] * out.num_rows, pa.uint64())
        columns[PARTITION_FP] = pa.array([fp] * out.num_rows, pa.uint64())
        return pa.table(columns).cast(self.schema)


# ---------------------------------------------------------------------- driver side
class ExpandProgress(StageProgress):
    """Parents expanded so far (from the checkpoints' keys in the store), for the log and the job's record."""

    def __init__(self, plan: ExpandPlan, store: CheckpointStore) -> None:
        self.plan, self.store, self.t0 = plan, store, time.perf_counter()
        self.prefixes = {part_prefix(plan.job_prefix, p) for t in plan.tasks for p in t.parts}
        self.ids = np.sort(positions_of([r for t in plan.tasks for p in t.parts for r in p.ranges]))
        self.rows = {(part_prefix(plan.job_prefix, p), p.partition or 0): p.rows for t in plan.tasks for p in t.parts}
        self.before = self._done()

    def _done(self) -> int:
        keys = [k for k in JobStore(self.store).batches(self.plan.job_prefix) if k.prefix in self.prefixes]
        if not is_chunker(self.plan):
            return sum(self.rows.get((k.prefix, k.frag_id), 0) for k in keys)
        counted = sum(int(np.searchsorted(self.ids, k.end) - np.searchsorted(self.ids, k.start)) for k in keys)
        return min(counted, self.plan.rows_to_compute)

    def __call__(self) -> str:
        done = self._done()
        update_record(self.store, self.plan.job_id, rows_checkpointed=done)
        elapsed = time.perf_counter() - self.t0
        return (f"apply {self.plan.job_id} ({self.plan.label()}): {done:,} of {self.plan.rows_to_compute:,} source "
                f"rows expanded, {(done - self.before) / elapsed if elapsed else 0:,.0f} rows/s")


def is_chunker(plan: ExpandPlan) -> bool:
    return not udtf_work(plan).partitions and not udtf_work(plan).partition_state




def pending_tasks(plan: ExpandPlan, store: CheckpointStore) -> list[ExpandTask]:
    """The plan's tasks with a part no checkpoint holds yet."""
    held = Held(store, plan.job_prefix, is_chunker(plan))
    return [t for t in plan.tasks if any(not held.done(p) for p in t.parts)]
