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
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.contracts.models import (
    Action,
    ApplyTaskResult,
    ColumnPlan,
    FileTarget,
    FragmentCheckpoint,
    RowError,
    StagedFiles,
    Task,
    TaskError,
    TaskPart,
)
from geneva_provider.core.errors import CorruptCheckpointError
from geneva_provider.core.fragments import fragment_of, live_row_addresses
from geneva_provider.core.manifest import missing_module_advice
from geneva_provider.core.ranges import positions_of, uncovered
from geneva_provider.core.store.checkpoint import ROWADDR, CheckpointStore
from geneva_provider.core.store.layout import BatchKey, JobStore, batch_prefix
from geneva_provider.pipeline.columns.files import Stager, write_column_file
from geneva_provider.pipeline.columns.inputs import ComputeError, Failures, InputFactory, JobInput
from geneva_provider.pipeline.spark.worker_deaths import (
    CallWatch,
    RunningCall,
    Span,
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
from geneva_provider.pipeline.stages.planning import checkpointed_addresses, staged_files

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.pipeline.spark.task_runner import TaskRunner

log = logging.getLogger(__name__)

# Bytes of computed rows a task holds in memory for the column files it writes itself; past it they are
# checkpointed like any other rows (a fragment of large embeddings is not held whole).
MAX_HELD_BYTES = 256 << 20


# ---------------------------------------------------------------------- executor side
@dataclass
class _Piece:
    """Some live rows of one fragment that a chunk computes, and the checkpoint prefix they go under."""

    frag: int
    prefix: str
    positions: np.ndarray  # live-row positions, ascending
    addrs: np.ndarray      # their row addresses
    whole: bool            # every live row of the fragment: read with the other whole ones in one scan
    target: FileTarget | None = None  # every row of the fragment to compute: its column file is written here

    def __len__(self) -> int:
        return len(self.positions)

    def slice(self, start: int, end: int) -> _Piece:
        whole = self.whole and start == 0 and end == len(self)
        return _Piece(self.frag, self.prefix, self.positions[start:end], self.addrs[start:end], whole, self.target)

    def key(self, partial: bool = False) -> str:
        """The batch checkpoint key of these rows."""
        return BatchKey(self.prefix, self.frag, int(self.positions[0]), int(self.positions[-1]) + 1,
                        partial=partial).key()


@dataclass
class _Held:
    """The computed rows of a fragment the task computes whole, kept in memory until its last row is computed:
    then they become the fragment's column file, and the writer need not read them back from checkpoints."""

    piece: _Piece
    parts: list[tuple[_Piece, pa.Table, bool]] = field(default_factory=list)  # (rows, values, checkpointed)

    @property
    def rows(self) -> int:
        return sum(len(p) for p, _, _ in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for _, t, _ in self.parts)

    @property
    def unstored(self) -> bool:
        return not all(stored for _, _, stored in self.parts)


class _Checkpointer:
    """Computes chunks of a task's rows -- one UDF call over the parts of many fragments -- and stores one
    batch checkpoint per fragment part (the chunks are cut by the worker's :class:`CheckpointSizer`).

    A fragment the task computes whole (its part has a :class:`FileTarget`) is kept in memory from its first
    row and written as its column file at its last, staged in a record written later, so no writer task
    reads it back.  Its chunks are still checkpointed unless computing them again costs less than a
    checkpoint (a vectorised function's, as the worker's sizer measured: then a checkpoint is not worth its
    write and read).  What is not checkpointed and what is staged but not recorded is lost by a kill: once
    it is a checkpoint's worth of work (the sizer's target seconds) the record is written and those chunks
    are checkpointed.  A fragment past ``MAX_HELD_BYTES``, or of which a row was skipped, is left to the
    writer; nothing is kept when the user fixed the checkpoint size.
    """

    def __init__(self, ctx: StageContext, store: CheckpointStore, work: JobInput, watch: CallWatch | None = None,
                 *, ds: Dataset | None = None, stager: Stager | None = None, sizer: CheckpointSizer | None = None
                 ) -> None:
        self.ctx, self.store, self.work, self.watch = ctx, store, work, watch
        self.ds, self.stager, self.sizer = ds, stager, sizer
        self.hold_seconds = sizer.target_seconds if sizer is not None and stager is not None and not sizer.fixed else 0
        self.failures: list[RowError] = []
        self.whole: dict[int, _Piece] = {}  # fragments that may be kept: whole, with a target, not begun
        self.held: dict[int, _Held] = {}
        self.pending_since: float | None = None  # when the oldest work neither checkpointed nor recorded began
        self.stored = 0  # batch checkpoints and column files written
        self.read_seconds = 0.0  # reading input rows, since the task last took it
        self.fields: list[pa.Field] | None = None  # the output columns' fields in the table, for the files

    def hold(self, pieces: list[_Piece]) -> None:
        """Notes the pieces that are whole fragments with a file target: each is kept from its first row."""
        if self.hold_seconds > 0:
            self.whole = {p.frag: p for p in pieces if p.target is not None}

    def _holding(self, p: _Piece) -> _Held | None:
        """What of ``p``'s fragment is kept; starts keeping it at its first rows."""
        held = self.held.get(p.frag)
        if held is not None:
            return held
        whole = self.whole.pop(p.frag, None)
        if whole is None or p.positions[0] != whole.positions[0]:
            return None
        held = self.held[p.frag] = _Held(whole)
        return held

    def save(self, pieces: list[_Piece]) -> tuple[TaskError | None, float]:
        """Computes the pieces' rows and stores each piece under its range; returns (error, seconds).

        A row the UDF's policy skipped is stored with a NULL value and a NULL fingerprint, so it stays
        invalid: the next run computes it again (and the fragment is not recorded as valid).
        """
        t0 = time.perf_counter()
        n = sum(len(p) for p in pieces)
        rows = self.work.read([(p.frag, p.positions, p.whole) for p in pieces])
        read = time.perf_counter() - t0
        self.read_seconds += read
        if rows.num_rows != n:
            raise RuntimeError(f"fragments {[p.frag for p in pieces]}: read {rows.num_rows} of {n} rows; "
                               "the table changed under a pinned version")
        addrs = np.concatenate([p.addrs for p in pieces])
        address = pa.array(addrs, pa.uint64())
        failures: Failures = []
        watch = self.watch
        span = self.span(pieces)
        try:
            outputs = self.work.compute(rows, failures, None if watch is None else (
                lambda column, udf: watch.calling(column, udf, addrs, span=span)))
        except ComputeError as exc:
            self.spill(list(self.held), forget=True)  # what was computed before the error is kept
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
        seconds = time.perf_counter() - t0 - read
        offset, stored_rows, store_seconds = 0, 0, 0.0
        for p in pieces:
            k = len(p)
            rows_of_p, all_kept = computed.slice(offset, k), bool(keep[offset:offset + k].all())
            offset += k
            held = self._holding(p)
            if held is not None and not all_kept:  # a skipped row: the writer merges the retries later
                self.spill([p.frag], forget=True)
                held = None
            checkpoint = held is None or self.sizer is None or not self.sizer.recomputing_is_cheaper
            if checkpoint:
                t = time.perf_counter()
                self.store[p.key(partial=not all_kept)] = rows_of_p
                store_seconds += time.perf_counter() - t
                stored_rows += k
                self.stored += 1
            if held is None:
                continue
            held.parts.append((p, rows_of_p, checkpoint))
            if held.rows == len(held.piece):
                if watch is not None:
                    watch.release()  # what follows is no UDF call on the span
                self.write(self.held.pop(p.frag))
        if self.sizer is not None:
            self.sizer.observe_costs(n, seconds + read, stored_rows, store_seconds)
        self.keep_within_a_checkpoint(time.perf_counter() - t0)
        return None, seconds

    def keep_within_a_checkpoint(self, chunk: float) -> None:
        """Records the staged files and checkpoints what is kept unchecked once, with the next chunk's work (as
        long as this one's), a kill would lose more than a checkpoint's worth -- as checkpointed work stays.
        Fragments over ``MAX_HELD_BYTES`` are left to the writer."""
        if sum(h.nbytes for h in self.held.values()) >= MAX_HELD_BYTES:
            self.spill(list(self.held), forget=True)
        unstored = [f for f, h in self.held.items() if h.unstored]
        if not unstored and (self.stager is None or not self.stager.pending):
            self.pending_since = None
            return
        now = time.monotonic()
        if self.pending_since is None:
            self.pending_since = now - chunk
        if now - self.pending_since + chunk >= self.hold_seconds:
            self.spill(unstored)
            if self.stager is not None:
                self.stager.flush()
            self.pending_since = None

    def span(self, pieces: list[_Piece]) -> Span | None:
        """What the markers of a chunk of held fragments name: those fragments' rows (one marker for all their
        chunks); None for a chunk with other rows (a marker per call)."""
        whole = list({p.frag: self.held[p.frag].piece for p in pieces if p.frag in self.held}.values())
        if not whole or len(whole) != len({p.frag for p in pieces}):
            return None
        return Span(sorted(p.frag for p in whole), int(whole[0].addrs[0]), int(whole[-1].addrs[-1]),
                    sum(len(p) for p in whole))

    def write(self, held: _Held) -> None:
        """The fragment's column file from its kept rows, staged (recorded by the stager)."""
        assert self.ds is not None and self.stager is not None and held.piece.target is not None
        new = pa.concat_tables([t for _, t, _ in held.parts])
        if self.fields is None:  # once a task: the dataset's schema is built anew at each ask
            schema = self.ds.schema
            self.fields = [schema.field(c) for c in self.ctx.job.output_columns]
        fields = self.fields
        self.stager.stage_written(held.piece.frag, partial(
            write_column_file, self.ctx, fragment_of(self.ds, held.piece.frag), new, held.piece.target,
            len(held.piece), fields))
        self.stored += 1

    def spill(self, frags: list[int], *, forget: bool = False) -> None:
        """Checkpoints what is kept of these fragments unchecked; ``forget``: stops keeping them (the writer
        writes their files from the checkpoints)."""
        for fid in frags:
            held = self.held.pop(fid) if forget else self.held[fid]
            for i, (p, table, stored) in enumerate(held.parts):
                if not stored:
                    self.store[p.key()] = table
                    self.stored += 1
                    held.parts[i] = (p, table, True)


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
        # Fragments whose column file this job's apply staged already (a retried task need not compute them).
        self.staged = {fid for fid, files in staged_files(self.store, ctx.job.job_prefix).items()
                       if any(c.job_id == ctx.job_id for c in files)}
        self.stager = Stager(ctx, self.store)

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
            if part.target is not None and part.frag in self.staged:
                held_rows += part.rows
                continue
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
                target = part.target if len(positions) == part.rows else None  # all of it, none checkpointed
                pieces.append(_Piece(part.frag, prefix, positions, addrs, len(positions) == len(live), target))
        return pieces, held_rows


def apply_task(task: Task, worker: ColumnExecutor) -> ApplyTaskResult:
    """Computes the task's rows in checkpointed chunks that span its fragments; skips rows a checkpoint holds.

    Many small fragments cost one read and one UDF call per chunk, not per fragment; each fragment part
    still gets its own checkpoint, so resuming, planning and writing keep their per-fragment meaning.
    """
    ctx = worker.ctx
    result = ApplyTaskResult(frag=task.parts[0].frag)
    pieces, result.rows_skipped = worker.pieces(task)
    ckpt = _Checkpointer(ctx, worker.store, worker.work, worker.watch, ds=worker.ds, stager=worker.stager,
                         sizer=worker.sizer)
    ckpt.hold(pieces)
    deadline = ctx.settings.deadline
    try:
        for chunk in _chunks(pieces, worker.sizer):
            if deadline is not None and time.time() >= deadline:  # the job's timeout: stop between checkpoints
                result.timed_out = True
                ckpt.spill(list(ckpt.held), forget=True)  # what is held is kept
                break
            t0 = time.perf_counter()
            error, seconds = ckpt.save(chunk)
            result.failures += ckpt.failures
            ckpt.failures = []
            if error:
                return result.model_copy(update={"error": error, "frag": error.frag, "checkpoints": ckpt.stored})
            result.rows_computed += sum(len(p) for p in chunk)
            result.udf_seconds += seconds
            result.read_seconds, ckpt.read_seconds = result.read_seconds + ckpt.read_seconds, 0.0
            # The whole checkpoint's time, its read and stores included: what a kill during the next one loses.
            worker.sizer.observe(sum(len(p) for p in chunk), time.perf_counter() - t0)
    finally:
        if worker.watch is not None:
            worker.watch.release()
        worker.stager.flush()  # the files staged are recorded before the task reports
    result.checkpoints = ckpt.stored
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
    if isinstance(original, ModuleNotFoundError):
        memory = missing_module_advice(original.name)
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
def applied_files(plan: ColumnPlan, store: CheckpointStore) -> dict[int, FragmentCheckpoint]:
    """The column files this plan's apply staged, by fragment: fragments it computed whole in one task.

    Only a file of this plan, over the inputs and the output file it planned the fragment with, counts:
    write+commit commits it as it is.
    """
    entries = {f.id: f for f in plan.fragments if f.action is Action.COMPUTE}
    found: dict[int, FragmentCheckpoint] = {}
    for fid, files in staged_files(store, plan.job_prefix).items():
        entry = entries.get(fid)
        if entry is None:
            continue
        mine = [c for c in files if c.job_id == plan.job_id and c.src_data_files == entry.src_files
                and c.base_file == entry.base_file]
        if mine:
            found[fid] = mine[-1]
    return found


def _covered(plan: ColumnPlan, store: CheckpointStore, *, skipped_done: bool
             ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """The ranges batch checkpoints and staged files hold, by (prefix, fragment); ``skipped_done``: partial
    checkpoints too."""
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for bk in JobStore(store).batches(plan.job_prefix):
        if skipped_done or not bk.partial:
            covered.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))
    src_keys = {f.id: f.src_key for f in plan.fragments}
    for fid in applied_files(plan, store):
        covered[(batch_prefix(plan.job_prefix, src_key=src_keys[fid]), fid)] = [(0, 2**63 - 1)]
    return covered


def remaining_tasks(plan: ColumnPlan, store: CheckpointStore) -> list[Task]:
    """The plan's tasks minus those a checkpoint covers whole (a retried apply skips them without a launch)."""
    covered = _covered(plan, store, skipped_done=False)  # a partial checkpoint's skipped rows are computed again
    return [t for t in plan.tasks if any(
        uncovered(s, e, covered.get((batch_prefix(plan.job_prefix, src_key=p.src_key), p.frag), []))
        for p in t.parts for s, e in p.ranges)]


def unapplied_rows(plan: ColumnPlan, store: CheckpointStore) -> dict[int, int]:
    """Rows of each fragment that the plan's tasks compute and no checkpoint or staged file holds (rows the
    error policy skipped count as held): while any is left, the plan's apply stage has not ended."""
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
    """Rows computed so far, from the names of the checkpoints written since the stage began and the rows of
    the column files staged since (records read once each).  A fragment whose file is staged counts its file's
    rows, not its checkpoints too: a task that computed it whole may have checkpointed its chunks as well."""

    def __init__(self, plan: ColumnPlan, store: CheckpointStore, tasks: list[Task]) -> None:
        self.plan, self.store = plan, store
        jobs = JobStore(store)
        self.before = set(jobs.batches(plan.job_prefix))
        self.staged: dict[str, dict[int, int]] = {k.key(): {} for k in jobs.staged_keys(plan.job_prefix)}
        self.already = plan.rows_to_compute - sum(t.rows for t in tasks)
        self.t0 = time.perf_counter()

    def __call__(self) -> str:
        jobs = JobStore(self.store)
        for key in (k.key() for k in jobs.staged_keys(self.plan.job_prefix)):
            if key not in self.staged:
                try:
                    record = self.store.get_model(key, StagedFiles)
                except (KeyError, CorruptCheckpointError):  # being written, or removed: counted next time
                    continue
                self.staged[key] = {fid: c.rows for fid, c in record.files.items() if c.job_id == self.plan.job_id}
        staged = {fid: rows for files in self.staged.values() for fid, rows in files.items()}
        new = sum(bk.end - bk.start for bk in jobs.batches(self.plan.job_prefix)
                  if bk not in self.before and bk.frag_id not in staged)
        new += sum(staged.values())
        done = min(self.already + new, self.plan.rows_to_compute)
        update_record(self.store, self.plan.job_id, rows_checkpointed=done)
        elapsed = time.perf_counter() - self.t0
        return (f"apply {self.plan.job_id} ({self.plan.label()}): {done:,} of {self.plan.rows_to_compute:,} rows "
                f"checkpointed, {new / elapsed if elapsed else 0:,.0f} rows/s")
