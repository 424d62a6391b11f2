"""Apply stage: run the UDF over planned ranges on Spark executors, one batch checkpoint per range.

Each task opens the table itself inside the Python worker (Lance data never crosses the
JVM or the driver) and returns a small dict.  Before computing, a task lists the
checkpoints already present for its fragment, so a retried task or a rerun job only
computes what is missing.  UDF failures come back as data, not exceptions, so a
deterministic bug is reported once with its row instead of being retried by Spark.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any

import pyarrow as pa

from geneva_provider.checkpoint import CheckpointStore, batch_key, open_store, parse_batch_key
from geneva_provider.errors import UDFExecutionError
from geneva_provider.plan import load_plan, missing_ranges
from geneva_provider.spark import run_tasks
from geneva_provider.udf import UDF, UDFCallError, load_udf, udf_column_info

log = logging.getLogger(__name__)

ROWADDR = "_rowaddr"
TARGET_CHECKPOINT_SECONDS = 10.0
READ_BATCH_ROWS = 8192

# A Python worker serves many tasks: unpickle each UDF (and build a stateful one) once per
# process.  The key names the column incarnation, so a dropped and re-created table or column
# never hits a stale entry; datasets are reopened per task for the same reason (it is cheap).
_UDFS: dict[tuple[str, str, str], UDF] = {}


def dataset_at(uri: str, version: int, storage_options: dict[str, str] | None) -> Any:
    """The dataset at ``version``."""
    import lance

    return lance.dataset(uri, version=version, storage_options=storage_options)


def udf_for(ds: Any, column: str) -> UDF:
    """The column's UDF, unpickled from the field metadata at the dataset's version."""
    info = udf_column_info(ds.schema.field(column).metadata)
    key = (info["column_uid"], info["version"], column)
    if key not in _UDFS:
        _UDFS[key] = load_udf(info["pickle"])
    return _UDFS[key]


def covered_ranges(store: CheckpointStore, prefix: str, frag_id: int) -> list[tuple[int, int]]:
    """Ranges of ``frag_id`` already held by batch checkpoints under ``prefix``."""
    out = []
    for key in store.list_keys(f"{prefix}_frag-{frag_id}_range-"):
        bk = parse_batch_key(key)
        if bk is not None and bk.prefix == prefix and bk.frag_id == frag_id:
            out.append((bk.start, bk.end))
    return out


def uncovered(task: dict[str, Any], covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of a task's ``[start, end)`` that no checkpoint covers."""
    start, end = task["start"], task["end"]
    return [(max(s, start), e) for s, e in missing_ranges(end, covered) if e > start]


# ---------------------------------------------------------------------- executor side
class ComputeError(Exception):
    """A UDF failed on a chunk: carries the column and UDF it was computing."""

    def __init__(self, column: str, udf_name: str, error: UDFCallError) -> None:
        super().__init__(str(error))
        self.column, self.udf_name, self.error = column, udf_name, error


class ScanWork:
    """Backfill input: the fragment's rows that match ``where``, one UDF column out."""

    def __init__(self, ctx: dict[str, Any], ds: Any, frag_id: int) -> None:
        self.ctx = ctx
        self.frag = ds.get_fragment(frag_id)
        self.fn = udf_for(ds, ctx["column"])

    def batches(self, start: int, end: int) -> Any:
        return self.frag.to_batches(columns=self.ctx["input_columns"], filter=self.ctx["where"], offset=start,
                                    limit=end - start, with_row_address=True, batch_size=READ_BATCH_ROWS)

    def compute(self, chunk: pa.Table) -> dict[str, pa.Array]:
        try:
            return {self.ctx["column"]: self.fn.evaluate(chunk, self.ctx["input_columns"])}
        except UDFCallError as exc:
            raise ComputeError(self.ctx["column"], self.fn.name, exc) from exc

    def empty(self) -> dict[str, pa.Array]:
        return {self.ctx["column"]: pa.array([], self.fn.data_type)}


def work_for(ctx: dict[str, Any], ds: Any, frag_id: int) -> Any:
    """The input reader and output computation of a task, by job kind."""
    if ctx["kind"] == "refresh":
        from geneva_provider.views import CopyWork

        return CopyWork(ctx, ds, frag_id)
    return ScanWork(ctx, ds, frag_id)


def apply_task(ctx: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """Computes one planned range, skipping what checkpoints already hold."""
    frag_id, prefix = task["frag"], task["prefix"]
    store = open_store(ctx["store_uri"], ctx["storage_options"])
    todo = uncovered(task, covered_ranges(store, prefix, frag_id))
    result = {"frag": frag_id, "start": task["start"], "end": task["end"], "rows_computed": 0,
              "rows_skipped": (task["end"] - task["start"]) - sum(e - s for s, e in todo),
              "checkpoints": 0, "udf_seconds": 0.0, "error": None}
    if not todo:
        return result
    work = work_for(ctx, dataset_at(ctx["table_uri"], ctx["read_version"], ctx["storage_options"]), frag_id)
    size = ctx["checkpoint_size"]
    for start, end in todo:
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        pos = start
        for rb in work.batches(start, end):
            pending.append(rb)
            pending_rows += rb.num_rows
            while pending_rows >= size and pos + size <= end:
                chunk, pending = _take_rows(pending, size)
                pending_rows -= size
                error, seconds = _checkpoint(ctx, store, work, frag_id, prefix, pos, pos + size, chunk)
                if error:
                    result["error"] = error
                    return result
                result["rows_computed"] += size
                result["checkpoints"] += 1
                result["udf_seconds"] += seconds
                pos += size
                size = _adapt(size, seconds, ctx)
        if pos == end:
            continue
        chunk = pa.Table.from_batches(pending) if pending else None
        error, seconds = _checkpoint(ctx, store, work, frag_id, prefix, pos, end, chunk)
        if error:
            result["error"] = error
            return result
        result["rows_computed"] += end - pos
        result["checkpoints"] += 1
        result["udf_seconds"] += seconds
    return result


def _take_rows(batches: list[pa.RecordBatch], n: int) -> tuple[pa.Table, list[pa.RecordBatch]]:
    table = pa.Table.from_batches(batches)
    rest = table.slice(n)
    return table.slice(0, n), rest.combine_chunks().to_batches() if rest.num_rows else []


def _adapt(size: int, seconds: float, ctx: dict[str, Any]) -> int:
    """Grows checkpoints while they are quick, shrinks them when the UDF is slow."""
    target = ctx.get("target_checkpoint_seconds", TARGET_CHECKPOINT_SECONDS)
    if seconds < target / 2:
        size *= 2
    elif seconds > target * 2:
        size //= 2
    return max(ctx["min_checkpoint_size"], min(ctx["max_checkpoint_size"], size))


def _checkpoint(
    ctx: dict[str, Any],
    store: CheckpointStore,
    work: Any,
    frag_id: int,
    prefix: str,
    start: int,
    end: int,
    chunk: pa.Table | None,
) -> tuple[dict[str, Any] | None, float]:
    """Computes the outputs of ``chunk`` and stores ``[start, end)``; returns (error, seconds)."""
    t0 = time.perf_counter()
    if chunk is None or chunk.num_rows == 0:
        addrs = pa.array([], pa.uint64())
        outputs = work.empty()
    else:
        if chunk.num_rows != end - start:
            raise RuntimeError(f"fragment {frag_id} range [{start}, {end}) read {chunk.num_rows} rows; "
                               "the table changed under a pinned version")
        addrs = chunk.column(ROWADDR).combine_chunks()
        try:
            outputs = work.compute(chunk)
        except ComputeError as exc:
            return _error(ctx, exc, frag_id, addrs), 0.0
    seconds = time.perf_counter() - t0
    store[batch_key(prefix, frag_id, start, end)] = pa.table({ROWADDR: addrs, **outputs})
    return None, seconds


def _error(ctx: dict[str, Any], exc: ComputeError, frag_id: int, addrs: pa.Array) -> dict[str, Any]:
    if exc.error.index is not None:
        addr = addrs[exc.error.index].as_py()
        where = f"row address {addr} (fragment {addr >> 32}, offset {addr & 0xFFFFFFFF})"
    else:
        first, last = addrs[0].as_py(), addrs[len(addrs) - 1].as_py()
        where = f"rows with addresses {first}..{last} (fragment {frag_id})"
    original = exc.error.original
    return {
        "message": f"UDF '{exc.udf_name}' failed computing column '{exc.column}' of table '{ctx['table']}' "
                   f"at fragment {frag_id}, {where}: {exc.error}",
        "exception": type(original).__name__ if original is not None else "UDFCallError",
        "frag": frag_id,
    }


def _apply_partition(ctx: dict[str, Any], tasks: Any) -> Any:
    for task in tasks:
        yield apply_task(ctx, task)


# ---------------------------------------------------------------------- driver side
def apply_context(plan: dict[str, Any], storage_options: dict[str, str] | None) -> dict[str, Any]:
    """What every apply task needs, taken from the plan (small; pickled into the closure)."""
    opts = plan["options"]
    return {
        "kind": plan["kind"],
        "table": plan["table"],
        "table_uri": plan["table_uri"],
        "read_version": plan["read_version"],
        "column": plan.get("column"),
        "output_columns": plan["output_columns"],
        "input_columns": plan.get("input_columns"),
        "where": plan.get("where"),
        "source": plan.get("source"),
        "store_uri": plan["store_uri"],
        "storage_options": storage_options,
        "checkpoint_size": opts["checkpoint_size"],
        "min_checkpoint_size": opts["min_checkpoint_size"],
        "max_checkpoint_size": opts["max_checkpoint_size"],
    }


def remaining_tasks(plan: dict[str, Any], store: CheckpointStore) -> list[dict[str, Any]]:
    """The plan's tasks minus those whose ranges checkpoints now cover (a retried apply)."""
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key in store.list_keys(plan["job_prefix"]):
        bk = parse_batch_key(key)
        if bk is not None:
            covered.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))
    return [t for t in plan["tasks"] if uncovered(t, covered.get((t["prefix"], t["frag"]), []))]


def run_apply(plan_uri: str, spark: Any, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    """Apply stage: computes every missing planned range on Spark; returns counts."""
    plan, store = load_plan(plan_uri, storage_options)
    tasks = remaining_tasks(plan, store)
    planned = plan["rows_to_compute"]
    log.info("apply %s: %d of %d planned tasks still to run (%d rows planned)",
             plan["job_id"], len(tasks), len(plan["tasks"]), planned)
    t0 = time.perf_counter()
    results = run_tasks(spark, tasks, partial(_apply_partition, apply_context(plan, storage_options)),
                        description=f"geneva apply {plan['table']}.{','.join(plan['output_columns'])}",
                        concurrency=plan["options"]["concurrency"]) if tasks else []
    errors = [r["error"] for r in results if r["error"]]
    computed = sum(r["rows_computed"] for r in results)
    counts = {
        "job_id": plan["job_id"],
        "tasks_run": len(tasks),
        "rows_computed": computed,
        "rows_reused": plan["rows_reused"] + (planned - computed if not errors else 0),
        "checkpoints_written": sum(r["checkpoints"] for r in results),
        "errors": len(errors),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    log.info("apply %s: %d rows checkpointed in %d checkpoints, %.1fs", plan["job_id"], computed,
             counts["checkpoints_written"], counts["seconds"])
    if errors:
        raise UDFExecutionError(errors[0]["message"] + (f" ({len(errors)} tasks failed)" if len(errors) > 1 else ""))
    return counts
