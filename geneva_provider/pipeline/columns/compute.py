"""The column kinds' apply: UDF values computed over planned ranges of fragments, one batch checkpoint per range.

A task's chunks span the parts of many small fragments (one read and one UDF call per chunk), and
each fragment part still gets its own checkpoint, so resuming, planning and writing keep their
per-fragment meaning.  The generic driver is :mod:`geneva_provider.pipeline.stages.apply`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.contracts.models import ApplyTaskResult, ColumnPlan, RowError, Task, TaskError, TaskPart
from geneva_provider.core.fragments import fragment_of, live_row_addresses
from geneva_provider.core.ranges import positions_of, uncovered
from geneva_provider.core.store.checkpoint import ROWADDR, CheckpointStore
from geneva_provider.core.store.layout import BatchKey, JobStore, batch_prefix
from geneva_provider.pipeline.columns.inputs import ComputeError, Failures, InputFactory, JobInput
from geneva_provider.pipeline.spark.worker_deaths import (
    CallWatch,
    RunningCall,
    WorkerDeath,
    clear_markers,
    memory_limit_mb,
    memory_note,
    read_call,
    worker_death,
)
from geneva_provider.pipeline.stages.checkpoint_sizing import CheckpointSizer, job_sizer
from geneva_provider.pipeline.stages.context import StageContext
from geneva_provider.pipeline.stages.job_records import update_record
from geneva_provider.pipeline.stages.kinds import StageProgress
from geneva_provider.pipeline.stages.planning import checkpointed_addresses

if TYPE_CHECKING:
    from geneva_provider.pipeline.spark.task_runner import TaskRunner

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------- executor side
@dataclass
class _Piece:
    """Some live rows of one fragment that a chunk computes, and the checkpoint prefix they go under."""

    frag: int
    prefix: str
    positions: np.ndarray  # live-row positions, ascending
    addrs: np.ndarray      # their row addresses
    whole: bool            # every live row of the fragment: read with the other whole ones in one scan

    def __len__(self) -> int:
        return len(self.positions)

    def slice(self, start: int, end: int) -> _Piece:
        whole = self.whole and start == 0 and end == len(self)
        return _Piece(self.frag, self.prefix, self.positions[start:end], self.addrs[start:end], whole)


class _Checkpointer:
    """Computes chunks of a task's rows -- one UDF call over the parts of many fragments -- and stores one
    batch checkpoint per fragment part (the chunks are cut by the worker's :class:`CheckpointSizer`)."""

    def __init__(self, ctx: StageContext, store: CheckpointStore, work: JobInput, watch: CallWatch | None = None
                 ) -> None:
        self.ctx, self.store, self.work, self.watch = ctx, store, work, watch
        self.failures: list[RowError] = []

    def save(self, pieces: list[_Piece]) -> tuple[TaskError | None, float]:
        """Computes the pieces' rows and stores each piece under its range; returns (error, seconds).

        A row the UDF's policy skipped is stored with a NULL value and a NULL fingerprint, so it stays
        invalid: the next run computes it again (and the fragment is not recorded as valid).
        """
        t0 = time.perf_counter()
        n = sum(len(p) for p in pieces)
        rows = self.work.read([(p.frag, p.positions, p.whole) for p in pieces])
        if rows.num_rows != n:
            raise RuntimeError(f"fragments {[p.frag for p in pieces]}: read {rows.num_rows} of {n} rows; "
                               "the table changed under a pinned version")
        addrs = np.concatenate([p.addrs for p in pieces])
        address = pa.array(addrs, pa.uint64())
        failures: Failures = []
        watch = self.watch
        try:
            outputs = self.work.compute(rows, failures, None if watch is None else (
                lambda column, udf: watch.calling(column, udf, addrs)))
        except ComputeError as exc:
            return _task_error(self.ctx, exc, address), 0.0
        finally:
            self.failures += [RowError(
                column=col, frag=int(addrs[max(f.index, 0)]) >> 32,
                row_address=int(addrs[f.index]) if f.index >= 0 else None, error_type=f.error_type,
                message=f.message, traceback=f.traceback, attempts=f.attempts, outcome=f.outcome)
                for col, f in failures]
        fingerprints = self.work.fingerprints(rows)
        keep = np.ones(n, bool)
        keep[[f.index for _, f in failures if f.outcome == RowOutcome.SKIPPED]] = False
        if not keep.all():
            fingerprints = pc.if_else(pa.array(keep), fingerprints, pa.scalar(None, fingerprints.type))
        outputs[self.ctx.job.row_fingerprint_column] = fingerprints
        computed = pa.table({ROWADDR: address, **outputs})
        seconds = time.perf_counter() - t0
        offset = 0
        for p in pieces:
            k = len(p)
            key = BatchKey(p.prefix, p.frag, int(p.positions[0]), int(p.positions[-1]) + 1,
                           partial=not keep[offset:offset + k].all()).key()
            self.store[key] = computed.slice(offset, k)
            offset += k
        return None, seconds


class ColumnExecutor:
    """What one Spark partition opens once for all its tasks: the table, the store, and its checkpoint keys."""

    def __init__(self, ctx: StageContext, job_input: InputFactory) -> None:
        self.ctx, self.job_input = ctx, job_input
        self.store = ctx.store()
        self.ds = ctx.dataset()
        self.work = job_input(ctx, self.ds)  # what the job's kind reads and computes: a scan, a copy
        self.watch = CallWatch.here(self.store, ctx.job, ctx.job_id)
        self.sizer = job_sizer(ctx.job_id, ctx.settings)
        self.keys: dict[tuple[str, int], list[BatchKey]] = {}
        for bk in JobStore(self.store).batches(ctx.job.job_prefix):
            self.keys.setdefault((bk.prefix, bk.frag_id), []).append(bk)

    def run(self, task: Task) -> ApplyTaskResult:
        return apply_task(task, self)

    def held(self, prefix: str, part: TaskPart) -> np.ndarray:
        """Row addresses that checkpoints overlapping ``part`` already hold."""
        keys = [k for k in self.keys.get((prefix, part.frag), []) if k.start < part.end and k.end > part.start]
        return checkpointed_addresses(self.store, keys)

    def pieces(self, task: Task) -> tuple[list[_Piece], int]:
        """The task's rows still to compute, part by part; and how many rows checkpoints already hold."""
        pieces, held_rows = [], 0
        for part in task.parts:
            prefix = batch_prefix(self.ctx.job.job_prefix, src_key=part.src_key)
            live = live_row_addresses(fragment_of(self.ds, part.frag))
            positions = positions_of(part.ranges)
            addrs = live[positions]
            held = self.held(prefix, part)
            if len(held):
                keep = ~np.isin(addrs, held)
                positions, addrs = positions[keep], addrs[keep]
            held_rows += part.rows - len(positions)
            if len(positions):
                pieces.append(_Piece(part.frag, prefix, positions, addrs, whole=len(positions) == len(live)))
        return pieces, held_rows


def apply_task(task: Task, worker: ColumnExecutor) -> ApplyTaskResult:
    """Computes the task's rows in checkpointed chunks that span its fragments; skips rows a checkpoint holds.

    Many small fragments cost one read and one UDF call per chunk, not per fragment; each fragment part
    still gets its own checkpoint, so resuming, planning and writing keep their per-fragment meaning.
    """
    ctx = worker.ctx
    result = ApplyTaskResult(frag=task.parts[0].frag)
    pieces, result.rows_skipped = worker.pieces(task)
    ckpt = _Checkpointer(ctx, worker.store, worker.work, worker.watch)
    for chunk in _chunks(pieces, worker.sizer):
        t0 = time.perf_counter()
        error, seconds = ckpt.save(chunk)
        result.failures += ckpt.failures
        ckpt.failures = []
        if error:
            return result.model_copy(update={"error": error, "frag": error.frag})
        result.rows_computed += sum(len(p) for p in chunk)
        result.checkpoints += len(chunk)
        result.udf_seconds += seconds
        # The whole checkpoint's time, its read and stores included: what a kill during the next one loses.
        worker.sizer.observe(sum(len(p) for p in chunk), time.perf_counter() - t0)
    return result


def _chunks(pieces: list[_Piece], sizer: CheckpointSizer) -> Iterator[list[_Piece]]:
    """Consecutive pieces cut into chunks of ``sizer.size`` rows (read anew after each chunk), in order."""
    chunk: list[_Piece] = []
    filled = 0
    for piece in pieces:
        start = 0
        while start < len(piece):
            take = min(sizer.size - filled, len(piece) - start)
            chunk.append(piece.slice(start, start + take))
            filled += take
            start += take
            if filled >= sizer.size:
                yield chunk
                chunk, filled = [], 0
    if chunk:
        yield chunk


def _task_error(ctx: StageContext, exc: ComputeError, addrs: pa.Array) -> TaskError:
    """The failure, named by the failing row's fragment and address -- or, for a failed call over many
    rows, by the fragments its rows came from (a chunk spans the parts of many small fragments)."""
    if exc.error.index is not None:
        addr = addrs[exc.error.index].as_py()
        frag = addr >> 32
        where = f"fragment {frag}, row address {addr} (offset {addr & 0xFFFFFFFF})"
    else:
        frags = sorted({a >> 32 for a in (addrs[0].as_py(), addrs[len(addrs) - 1].as_py())})
        frag = frags[0]
        span = f"fragment {frag}" if len(frags) == 1 else f"fragments {frags[0]} to {frags[-1]}"
        where = f"{span}, rows with addresses {addrs[0].as_py()}..{addrs[len(addrs) - 1].as_py()}"
    original = exc.error.original
    # A UDF over the worker's memory limit gets a MemoryError (the limit is an address-space rlimit).
    memory = memory_note(memory_limit_mb()) if isinstance(original, MemoryError) else ""
    return TaskError(
        message=f"UDF '{exc.udf_name}' failed computing column '{exc.column}' of table '{ctx.job.table}' "
                f"at {where}: {str(exc.error).rstrip(': ')}" + (f" ({memory})" if memory else ""),
        exception=type(original).__name__ if original is not None else "UDFCallError",
        frag=frag)


def _locate_partition(ctx: StageContext, job_input: InputFactory, call: RunningCall, tasks: list[Task],
                      items: Iterable[int]) -> Iterator[int]:
    """Runs a call that killed its worker again, one fragment at a time, each call marked: a worker that
    dies again names the fragment.  Nothing is checkpointed; UDF errors are ignored (only a death counts)."""
    worker = ColumnExecutor(ctx, job_input)
    watch = worker.watch
    for item in items:
        for part in (p for t in tasks for p in t.parts if p.frag in call.fragments):
            positions = positions_of(part.ranges)
            addrs = live_row_addresses(fragment_of(worker.ds, part.frag))[positions]
            keep = (addrs >= call.first_address) & (addrs <= call.last_address)
            positions, addrs = positions[keep], addrs[keep]
            if not len(positions):
                continue
            rows = worker.work.read([(part.frag, positions, False)])
            try:
                worker.work.compute(rows, [], None if watch is None else (
                    partial(watch.calling, addrs=addrs)))
            except Exception:  # noqa: BLE001 - a UDF error here was not what killed the worker
                continue
        yield item


def locate(runner: TaskRunner, ctx: StageContext, job_input: InputFactory, store: CheckpointStore, call: RunningCall,
           tasks: list[Task], profile: Any | None) -> tuple[RunningCall, WorkerDeath] | None:
    """The fragment a call over many small fragments died on: the call is run again fragment by fragment
    (one Spark task, only after a death).  None when that run does not die the same way."""
    locate_id = f"{ctx.job_id}-locate"
    locate = dataclasses.replace(ctx, job_id=locate_id)
    try:
        runner.run_tasks([0], partial(_locate_partition, locate, job_input, call, tasks),
                  description=f"geneva locate the fragment that killed a worker of {ctx.job.table}", profile=profile)
    except Exception as exc:  # noqa: BLE001 - the first death is reported whatever happens here
        death = worker_death(exc)
        found = read_call(store, locate_id, 0) if death is not None else None
        if death is not None and found is not None:
            return found, death
    finally:
        clear_markers(store, locate_id)
    return None


# ---------------------------------------------------------------------- driver side
def _covered(plan: ColumnPlan, store: CheckpointStore, *, skipped_done: bool
             ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """The ranges batch checkpoints hold, by (prefix, fragment); ``skipped_done``: partial checkpoints too."""
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for bk in JobStore(store).batches(plan.job_prefix):
        if skipped_done or not bk.partial:
            covered.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))
    return covered


def remaining_tasks(plan: ColumnPlan, store: CheckpointStore) -> list[Task]:
    """The plan's tasks minus those a checkpoint covers whole (a retried apply skips them without a launch)."""
    covered = _covered(plan, store, skipped_done=False)  # a partial checkpoint's skipped rows are computed again
    return [t for t in plan.tasks if any(
        uncovered(s, e, covered.get((batch_prefix(plan.job_prefix, src_key=p.src_key), p.frag), []))
        for p in t.parts for s, e in p.ranges)]


def unapplied_rows(plan: ColumnPlan, store: CheckpointStore) -> dict[int, int]:
    """Rows of each fragment that the plan's tasks compute and no checkpoint holds (rows the error policy
    skipped count as held): while any is left, the plan's apply stage has not ended."""
    covered = _covered(plan, store, skipped_done=True)
    missing: dict[int, int] = {}
    for task in plan.tasks:
        for p in task.parts:
            held = covered.get((batch_prefix(plan.job_prefix, src_key=p.src_key), p.frag), [])
            rows = sum(e - s for start, end in p.ranges for s, e in uncovered(start, end, held))
            if rows:
                missing[p.frag] = missing.get(p.frag, 0) + rows
    return missing


class ApplyProgress(StageProgress):
    """Rows checkpointed so far, from the names of the checkpoints written since the stage began."""

    def __init__(self, plan: ColumnPlan, store: CheckpointStore, tasks: list[Task]) -> None:
        self.plan, self.store = plan, store
        self.before = set(JobStore(store).batches(plan.job_prefix))
        self.already = plan.rows_to_compute - sum(t.rows for t in tasks)
        self.t0 = time.perf_counter()

    def __call__(self) -> str:
        new = sum(bk.end - bk.start for bk in JobStore(self.store).batches(self.plan.job_prefix)
                  if bk not in self.before)
        done = min(self.already + new, self.plan.rows_to_compute)
        update_record(self.store, self.plan.job_id, rows_checkpointed=done)
        elapsed = time.perf_counter() - self.t0
        return (f"apply {self.plan.job_id} ({self.plan.label()}): {done:,} of {self.plan.rows_to_compute:,} rows "
                f"checkpointed, {new / elapsed if elapsed else 0:,.0f} rows/s")
