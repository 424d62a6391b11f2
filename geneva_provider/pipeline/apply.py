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

import numpy as np
import pyarrow as pa

from geneva_provider.core.checkpoint import ROWADDR, BatchKey, CheckpointStore, batch_key, parse_batch_key
from geneva_provider.core.errors import UDFExecutionError
from geneva_provider.core.fragments import live_row_addresses
from geneva_provider.core.models import ApplyResult, ApplyTaskResult, Plan, Task, TaskError
from geneva_provider.core.ranges import positions_of, uncovered
from geneva_provider.pipeline.context import StageContext
from geneva_provider.pipeline.inputs import ComputeError, JobInput, input_for
from geneva_provider.pipeline.planning import checkpointed_addresses, load_plan
from geneva_provider.pipeline.runner import run_tasks

log = logging.getLogger(__name__)

TARGET_CHECKPOINT_SECONDS = 10.0


# ---------------------------------------------------------------------- executor side
class _Checkpointer:
    """Computes chunks of one task and stores each as a batch checkpoint, adapting the chunk size."""

    def __init__(self, ctx: StageContext, store: CheckpointStore, work: JobInput, task: Task) -> None:
        self.ctx, self.store, self.work, self.task = ctx, store, work, task

    def save(self, positions: np.ndarray, addrs: np.ndarray) -> tuple[TaskError | None, float]:
        """Computes the rows at ``positions`` and stores them under their range; returns (error, seconds)."""
        t0 = time.perf_counter()
        rows = self.work.read(positions)
        if rows.num_rows != len(positions):
            raise RuntimeError(f"fragment {self.task.frag}: read {rows.num_rows} of {len(positions)} rows; "
                               "the table changed under a pinned version")
        address = pa.array(addrs, pa.uint64())
        try:
            outputs = self.work.compute(rows)
        except ComputeError as exc:
            return _task_error(self.ctx, exc, self.task.frag, address), 0.0
        outputs[self.ctx.job.output_columns[-1]] = self.work.fingerprints(rows)
        seconds = time.perf_counter() - t0
        key = batch_key(self.task.prefix, self.task.frag, int(positions[0]), int(positions[-1]) + 1)
        self.store[key] = pa.table({ROWADDR: address, **outputs})
        return None, seconds

    def adapt(self, size: int, seconds: float) -> int:
        """Grows checkpoints while they are quick, shrinks them when the UDF is slow."""
        if seconds < TARGET_CHECKPOINT_SECONDS / 2:
            size *= 2
        elif seconds > TARGET_CHECKPOINT_SECONDS * 2:
            size //= 2
        return max(self.ctx.settings.min_checkpoint_size, min(self.ctx.settings.max_checkpoint_size, size))


def apply_task(ctx: StageContext, task: Task) -> ApplyTaskResult:
    """Computes the task's rows in checkpointed chunks, skipping rows a checkpoint already holds."""
    store = ctx.store()
    ds = ctx.dataset()
    frag = ds.get_fragment(task.frag)
    positions = positions_of(task.ranges)
    addrs = live_row_addresses(frag)[positions]
    keys = [key for key in store.list_keys(f"{task.prefix}_frag-{task.frag}_range-")
            if _overlaps(parse_batch_key(key), task)]
    if keys:
        keep = ~np.isin(addrs, checkpointed_addresses(store, keys))
        positions, addrs = positions[keep], addrs[keep]
    result = ApplyTaskResult(frag=task.frag, rows_skipped=task.rows - len(positions))
    if not len(positions):
        return result
    ckpt = _Checkpointer(ctx, store, input_for(ctx, ds, task.frag), task)
    size = ctx.settings.checkpoint_size
    start = 0
    while start < len(positions):
        end = min(start + size, len(positions))
        error, seconds = ckpt.save(positions[start:end], addrs[start:end])
        if error:
            return result.model_copy(update={"error": error})
        result.rows_computed += end - start
        result.checkpoints += 1
        result.udf_seconds += seconds
        start = end
        size = ckpt.adapt(size, seconds)
    return result


def _overlaps(key: BatchKey | None, task: Task) -> bool:
    return key is not None and key.frag_id == task.frag and key.start < task.end and key.end > task.start


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
    """The plan's tasks minus those a checkpoint covers whole (a retried apply skips them without a launch)."""
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key in store.list_keys(plan.job_prefix):
        bk = parse_batch_key(key)
        if bk is not None:
            covered.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))
    return [t for t in plan.tasks
            if any(uncovered(s, e, covered.get((t.prefix, t.frag), [])) for s, e in t.ranges)]


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
