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
import pyarrow.compute as pc

from geneva_provider.core.checkpoint import (
    ROWADDR,
    BatchKey,
    CheckpointStore,
    batch_key,
    batch_prefix,
    parse_batch_key,
)
from geneva_provider.core.error_store import ErrorStore
from geneva_provider.core.errors import UDFExecutionError
from geneva_provider.core.fragments import live_row_addresses
from geneva_provider.core.models import ApplyResult, ApplyTaskResult, Plan, RowError, Task, TaskError, TaskPart
from geneva_provider.core.ranges import positions_of, uncovered
from geneva_provider.pipeline.context import StageContext
from geneva_provider.pipeline.inputs import ComputeError, Failures, JobInput, input_for
from geneva_provider.pipeline.job_records import job_stage, update_record
from geneva_provider.pipeline.planning import checkpointed_addresses, load_plan
from geneva_provider.pipeline.runner import job_tag, run_tasks

log = logging.getLogger(__name__)

TARGET_CHECKPOINT_SECONDS = 10.0


# ---------------------------------------------------------------------- executor side
class _Checkpointer:
    """Computes chunks of one fragment's rows and stores each as a batch checkpoint, adapting the chunk size."""

    def __init__(self, ctx: StageContext, store: CheckpointStore, work: JobInput, frag: int, prefix: str) -> None:
        self.ctx, self.store, self.work, self.frag, self.prefix = ctx, store, work, frag, prefix
        self.failures: list[RowError] = []

    def save(self, positions: np.ndarray, addrs: np.ndarray) -> tuple[TaskError | None, float]:
        """Computes the rows at ``positions`` and stores them under their range; returns (error, seconds).

        A row the UDF's policy skipped is stored with a NULL value and a NULL fingerprint, so it stays
        invalid: the next run computes it again (and the fragment is not recorded as valid).
        """
        t0 = time.perf_counter()
        rows = self.work.read(positions)
        if rows.num_rows != len(positions):
            raise RuntimeError(f"fragment {self.frag}: read {rows.num_rows} of {len(positions)} rows; "
                               "the table changed under a pinned version")
        address = pa.array(addrs, pa.uint64())
        failures: Failures = []
        try:
            outputs = self.work.compute(rows, failures)
        except ComputeError as exc:
            return _task_error(self.ctx, exc, self.frag, address), 0.0
        finally:
            self.failures += [RowError(
                column=col, frag=self.frag, row_address=int(addrs[f.index]) if f.index >= 0 else None,
                error_type=f.error_type, message=f.message, traceback=f.traceback, attempts=f.attempts,
                outcome=f.outcome) for col, f in failures]
        fingerprints = self.work.fingerprints(rows)
        skipped = sorted({f.index for _, f in failures if f.outcome == "skipped"})
        if skipped:
            keep = np.ones(len(positions), bool)
            keep[skipped] = False
            fingerprints = pc.if_else(pa.array(keep), fingerprints, pa.scalar(None, fingerprints.type))
        outputs[self.ctx.job.output_columns[-1]] = fingerprints
        seconds = time.perf_counter() - t0
        key = batch_key(self.prefix, self.frag, int(positions[0]), int(positions[-1]) + 1, partial=bool(skipped))
        self.store[key] = pa.table({ROWADDR: address, **outputs})
        return None, seconds

    def adapt(self, size: int, seconds: float) -> int:
        """Grows checkpoints while they are quick, shrinks them when the UDF is slow."""
        if seconds < TARGET_CHECKPOINT_SECONDS / 2:
            size *= 2
        elif seconds > TARGET_CHECKPOINT_SECONDS * 2:
            size //= 2
        return max(self.ctx.settings.min_checkpoint_size, min(self.ctx.settings.max_checkpoint_size, size))


class _Worker:
    """What one Spark partition opens once for all its tasks: the table, the store, and its checkpoint keys."""

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.store = ctx.store()
        self.ds = ctx.dataset()
        self.keys: dict[tuple[str, int], list[BatchKey]] = {}
        for key in self.store.list_keys(ctx.job.job_prefix):
            bk = parse_batch_key(key)
            if bk is not None:
                self.keys.setdefault((bk.prefix, bk.frag_id), []).append(bk)

    def held(self, prefix: str, part: TaskPart) -> np.ndarray:
        """Row addresses that checkpoints overlapping ``part`` already hold."""
        keys = [k for k in self.keys.get((prefix, part.frag), []) if k.start < part.end and k.end > part.start]
        return checkpointed_addresses(self.store, keys)


def apply_task(ctx: StageContext, task: Task, worker: _Worker | None = None) -> ApplyTaskResult:
    """Computes the task's rows, fragment by fragment, in checkpointed chunks; skips rows a checkpoint holds."""
    worker = worker or _Worker(ctx)
    result = ApplyTaskResult(frag=task.parts[0].frag)
    size = ctx.settings.checkpoint_size
    for part in task.parts:
        prefix = batch_prefix(ctx.job.job_prefix, src_key=part.src_key)
        frag = worker.ds.get_fragment(part.frag)
        positions = positions_of(part.ranges)
        addrs = live_row_addresses(frag)[positions]
        held = worker.held(prefix, part)
        if len(held):
            keep = ~np.isin(addrs, held)
            positions, addrs = positions[keep], addrs[keep]
        result.rows_skipped += part.rows - len(positions)
        if not len(positions):
            continue
        ckpt = _Checkpointer(ctx, worker.store, input_for(ctx, worker.ds, part.frag), part.frag, prefix)
        start = 0
        while start < len(positions):
            end = min(start + size, len(positions))
            error, seconds = ckpt.save(positions[start:end], addrs[start:end])
            result.failures += ckpt.failures
            ckpt.failures = []
            if error:
                return result.model_copy(update={"error": error, "frag": part.frag})
            result.rows_computed += end - start
            result.checkpoints += 1
            result.udf_seconds += seconds
            start = end
            size = ckpt.adapt(size, seconds)
    return result


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
    worker = _Worker(ctx)
    for task in tasks:
        yield apply_task(ctx, task, worker)


# ---------------------------------------------------------------------- driver side
def remaining_tasks(plan: Plan, store: CheckpointStore) -> list[Task]:
    """The plan's tasks minus those a checkpoint covers whole (a retried apply skips them without a launch)."""
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key in store.list_keys(plan.job_prefix):
        bk = parse_batch_key(key)
        if bk is not None and not bk.partial:  # a partial checkpoint's skipped rows are computed again
            covered.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))
    return [t for t in plan.tasks if any(
        uncovered(s, e, covered.get((batch_prefix(plan.job_prefix, src_key=p.src_key), p.frag), []))
        for p in t.parts for s, e in p.ranges)]


def run_apply(plan_uri: str, spark: Any, storage_options: dict[str, str] | None = None) -> ApplyResult:
    """Apply stage: computes every missing planned range on Spark; returns counts."""
    plan, store = load_plan(plan_uri, storage_options)
    with job_stage(store, plan.job_id, "apply"):
        return _apply(plan, store, spark, storage_options)


def _apply(plan: Plan, store: CheckpointStore, spark: Any, storage_options: dict[str, str] | None) -> ApplyResult:
    tasks = remaining_tasks(plan, store)
    planned = plan.rows_to_compute
    log.info("apply %s: %d of %d planned tasks still to run (%d rows planned)",
             plan.job_id, len(tasks), len(plan.tasks), planned)
    t0 = time.perf_counter()
    results = run_tasks(spark, tasks, partial(_apply_partition, StageContext.of(plan, storage_options)),
                        description=f"geneva apply {plan.table}.{','.join(plan.output_columns)}",
                        concurrency=plan.settings.concurrency, progress=_ApplyProgress(plan, store, tasks),
                        tag=job_tag(plan.job_id)) if tasks else []
    errors = [r.error for r in results if r.error]
    computed = sum(r.rows_computed for r in results)
    failures = [f for r in results for f in r.failures]
    ErrorStore(plan.table_uri, storage_options).append(plan.job_id, plan.table, failures)
    failed = sum(1 for f in failures if f.outcome == "skipped")
    counts = ApplyResult(
        job_id=plan.job_id, tasks_run=len(tasks), rows_computed=computed,
        rows_reused=plan.rows_reused + (planned - computed if not errors else 0),
        checkpoints_written=sum(r.checkpoints for r in results), errors=len(errors), rows_failed=failed,
        rows_retried=sum(1 for f in failures if f.outcome == "recovered"), seconds=round(time.perf_counter() - t0, 3))
    log.info("apply %s: %d rows checkpointed in %d checkpoints (%d skipped by the error policy, %d recovered "
             "by retries), %.1fs", plan.job_id, computed, counts.checkpoints_written, failed, counts.rows_retried,
             counts.seconds)
    if not errors:
        update_record(store, plan.job_id, rows_checkpointed=planned, rows_failed=failed,
                      rows_retried=counts.rows_retried)
    if errors:
        raise UDFExecutionError(errors[0].message + (f" ({len(errors)} tasks failed)" if len(errors) > 1 else "")
                                + (f"; the failed rows are in the error store (job {plan.job_id})" if failures else ""))
    _check_skip_limits(plan, failed)
    return counts


class _ApplyProgress:
    """Rows checkpointed so far, from the names of the checkpoints written since the stage began."""

    def __init__(self, plan: Plan, store: CheckpointStore, tasks: list[Task]) -> None:
        self.plan, self.store = plan, store
        self.before = set(store.list_keys(plan.job_prefix))
        self.already = plan.rows_to_compute - sum(t.rows for t in tasks)
        self.t0 = time.perf_counter()

    def __call__(self) -> str:
        new = sum(bk.end - bk.start for key in self.store.list_keys(self.plan.job_prefix)
                  if key not in self.before and (bk := parse_batch_key(key)) is not None)
        done = min(self.already + new, self.plan.rows_to_compute)
        update_record(self.store, self.plan.job_id, rows_checkpointed=done)
        elapsed = time.perf_counter() - self.t0
        return (f"apply {self.plan.job_id} ({self.plan.label()}): {done:,} of {self.plan.rows_to_compute:,} rows "
                f"checkpointed, {new / elapsed if elapsed else 0:,.0f} rows/s")


def _check_skip_limits(plan: Plan, failed: int) -> None:
    """Fails the job when the UDF skipped more rows than its policy allows (the values stay checkpointed)."""
    over = []
    if plan.max_failed_rows is not None and failed > plan.max_failed_rows:
        over.append(f"max_rows={plan.max_failed_rows}")
    # The fraction is of the table's rows, so a rerun that only retries the failed rows is held to
    # the same bar as the run that failed on them.
    if plan.max_failed_fraction is not None and failed > plan.max_failed_fraction * plan.rows_total:
        over.append(f"max_fraction={plan.max_failed_fraction} of the table's {plan.rows_total} rows")
    if over:
        raise UDFExecutionError(
            f"{plan.label()}: the UDF failed on {failed} rows, more than its skip policy allows ({', '.join(over)}); "
            f"the failed rows are in the error store (job {plan.job_id}); nothing was committed")
