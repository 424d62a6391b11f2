"""Apply stage: run the UDF over planned ranges on Spark executors, one batch checkpoint per range.

Each task opens the table itself inside the Python worker (Lance data never crosses the
JVM or the driver) and returns a small :class:`ApplyTaskResult`.  Before computing, a task
lists the checkpoints already present for its fragment, so a retried task or a rerun job
only computes what is missing.  UDF failures come back as data, not exceptions, so a
deterministic bug is reported once with its row instead of being retried by Spark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import pyarrow as pa

from geneva_provider.core.checkpoint import ROWADDR, CheckpointStore, batch_key, covered_ranges, parse_batch_key
from geneva_provider.core.errors import UDFExecutionError
from geneva_provider.core.models import ApplyResult, ApplyTaskResult, Plan, Task, TaskError
from geneva_provider.core.ranges import uncovered
from geneva_provider.pipeline.context import StageContext
from geneva_provider.pipeline.inputs import ComputeError, JobInput, input_for
from geneva_provider.pipeline.planning import load_plan
from geneva_provider.pipeline.runner import run_tasks

log = logging.getLogger(__name__)

TARGET_CHECKPOINT_SECONDS = 10.0


# ---------------------------------------------------------------------- executor side
class _Checkpointer:
    """Computes chunks of one task and stores each as a batch checkpoint, adapting the chunk size."""

    def __init__(self, ctx: StageContext, store: CheckpointStore, work: JobInput, task: Task) -> None:
        self.ctx, self.store, self.work, self.task = ctx, store, work, task

    def save(self, start: int, end: int, chunk: pa.Table | None) -> tuple[TaskError | None, float]:
        """Computes the outputs of ``chunk`` and stores ``[start, end)``; returns (error, seconds)."""
        t0 = time.perf_counter()
        frag_id = self.task.frag
        if chunk is None or chunk.num_rows == 0:
            addrs = pa.array([], pa.uint64())
            outputs = self.work.empty()
        else:
            if chunk.num_rows != end - start:
                raise RuntimeError(f"fragment {frag_id} range [{start}, {end}) read {chunk.num_rows} rows; "
                                   "the table changed under a pinned version")
            addrs = chunk.column(ROWADDR).combine_chunks()
            try:
                outputs = self.work.compute(chunk)
            except ComputeError as exc:
                return _task_error(self.ctx, exc, frag_id, addrs), 0.0
        seconds = time.perf_counter() - t0
        self.store[batch_key(self.task.prefix, frag_id, start, end)] = pa.table({ROWADDR: addrs, **outputs})
        return None, seconds

    def adapt(self, size: int, seconds: float) -> int:
        """Grows checkpoints while they are quick, shrinks them when the UDF is slow."""
        if seconds < TARGET_CHECKPOINT_SECONDS / 2:
            size *= 2
        elif seconds > TARGET_CHECKPOINT_SECONDS * 2:
            size //= 2
        return max(self.ctx.settings.min_checkpoint_size, min(self.ctx.settings.max_checkpoint_size, size))


def apply_task(ctx: StageContext, task: Task) -> ApplyTaskResult:
    """Computes one planned range, skipping what checkpoints already hold."""
    store = ctx.store()
    todo = uncovered(task.start, task.end, covered_ranges(store, task.prefix, task.frag))
    result = ApplyTaskResult(frag=task.frag, start=task.start, end=task.end,
                             rows_skipped=task.rows - sum(e - s for s, e in todo))
    if not todo:
        return result
    ckpt = _Checkpointer(ctx, store, input_for(ctx, ctx.dataset(), task.frag), task)
    size = ctx.settings.checkpoint_size
    for start, end in todo:
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        pos = start
        for rb in ckpt.work.batches(start, end):
            pending.append(rb)
            pending_rows += rb.num_rows
            while pending_rows >= size and pos + size <= end:
                chunk, pending = _take_rows(pending, size)
                pending_rows -= size
                error, seconds = ckpt.save(pos, pos + size, chunk)
                if error:
                    return result.model_copy(update={"error": error})
                result.rows_computed += size
                result.checkpoints += 1
                result.udf_seconds += seconds
                pos += size
                size = ckpt.adapt(size, seconds)
        if pos == end:
            continue
        error, seconds = ckpt.save(pos, end, pa.Table.from_batches(pending) if pending else None)
        if error:
            return result.model_copy(update={"error": error})
        result.rows_computed += end - pos
        result.checkpoints += 1
        result.udf_seconds += seconds
    return result


def _take_rows(batches: list[pa.RecordBatch], n: int) -> tuple[pa.Table, list[pa.RecordBatch]]:
    table = pa.Table.from_batches(batches)
    rest = table.slice(n)
    return table.slice(0, n), rest.combine_chunks().to_batches() if rest.num_rows else []


def _task_error(ctx: StageContext, exc: ComputeError, frag_id: int, addrs: pa.Array) -> TaskError:
    if exc.error.index is not None:
        addr = addrs[exc.error.index].as_py()
        where = f"row address {addr} (fragment {addr >> 32}, offset {addr & 0xFFFFFFFF})"
    else:
        first, last = addrs[0].as_py(), addrs[len(addrs) - 1].as_py()
        where = f"rows with addresses {first}..{last} (fragment {frag_id})"
    original = exc.error.original
    return TaskError(
        message=f"UDF '{exc.udf_name}' failed computing column '{exc.column}' of table '{ctx.job.table}' "
                f"at fragment {frag_id}, {where}: {exc.error}",
        exception=type(original).__name__ if original is not None else "UDFCallError",
        frag=frag_id)


def _apply_partition(ctx: StageContext, tasks: Iterable[Task]) -> Iterator[ApplyTaskResult]:
    for task in tasks:
        yield apply_task(ctx, task)


# ---------------------------------------------------------------------- driver side
def remaining_tasks(plan: Plan, store: CheckpointStore) -> list[Task]:
    """The plan's tasks minus those whose ranges checkpoints now cover (a retried apply)."""
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key in store.list_keys(plan.job_prefix):
        bk = parse_batch_key(key)
        if bk is not None:
            covered.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))
    return [t for t in plan.tasks if uncovered(t.start, t.end, covered.get((t.prefix, t.frag), []))]


def run_apply(plan_uri: str, spark: Any, storage_options: dict[str, str] | None = None) -> ApplyResult:
    """Apply stage: computes every missing planned range on Spark; returns counts."""
    plan, store = load_plan(plan_uri, storage_options)
    tasks = remaining_tasks(plan, store)
    planned = plan.rows_to_compute
    log.info("apply %s: %d of %d planned tasks still to run (%d rows planned)",
             plan.job_id, len(tasks), len(plan.tasks), planned)
    t0 = time.perf_counter()
    results = run_tasks(spark, tasks, partial(_apply_partition, StageContext.of(plan, storage_options)),
                        description=f"geneva apply {plan.table}.{','.join(plan.output_columns)}",
                        concurrency=plan.settings.concurrency) if tasks else []
    errors = [r.error for r in results if r.error]
    computed = sum(r.rows_computed for r in results)
    counts = ApplyResult(
        job_id=plan.job_id, tasks_run=len(tasks), rows_computed=computed,
        rows_reused=plan.rows_reused + (planned - computed if not errors else 0),
        checkpoints_written=sum(r.checkpoints for r in results), errors=len(errors),
        seconds=round(time.perf_counter() - t0, 3))
    log.info("apply %s: %d rows checkpointed in %d checkpoints, %.1fs", plan.job_id, computed,
             counts.checkpoints_written, counts.seconds)
    if errors:
        raise UDFExecutionError(errors[0].message + (f" ({len(errors)} tasks failed)" if len(errors) > 1 else ""))
    return counts
