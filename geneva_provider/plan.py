"""Plan stage: decide which rows of which fragments still need the UDF.

The plan is the only thing later stages share besides checkpoints: it pins the read
version, the output field ids, and for every fragment whether it is computed (and which
``[start, end)`` ranges), reused from a fragment checkpoint, or already committed.  It is
stored as a JSON document in the checkpoint store; XCom carries only its summary.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from geneva_provider.checkpoint import (
    CheckpointStore,
    batch_prefix,
    fragment_key,
    job_prefix,
    open_store,
    parse_batch_key,
    plan_key,
    split_key_uri,
)
from geneva_provider.errors import ColumnError, InvalidArgumentError
from geneva_provider.fragments import (
    column_field_ids,
    column_file,
    deletion_marker,
    files_holding,
    leaf_field_ids,
    referenced_columns,
)
from geneva_provider.udf import udf_column_info

if TYPE_CHECKING:
    from geneva_provider.table import Table

log = logging.getLogger(__name__)

PLAN_FORMAT = 1
DEFAULT_MIN_CHECKPOINT_SIZE = 1_000
DEFAULT_MAX_CHECKPOINT_SIZE = 100_000
DEFAULT_CHECKPOINT_SIZE = 10_000

# What the planner decided for a fragment.
COMPUTE = "compute"  # run the UDF on the missing ranges, then write and commit
REUSE = "reuse"      # a fragment checkpoint holds a valid staged file: commit it, compute nothing
DONE = "done"        # the fragment checkpoint's file is already the committed column file
EMPTY = "empty"      # no row selected: nothing to compute or commit


@dataclass
class BackfillOptions:
    """Tuning knobs of one backfill; ``None`` means a default sized to the data and machine."""

    where: str | None = None
    read_version: int | None = None
    checkpoint_size: int | None = None
    min_checkpoint_size: int | None = None
    max_checkpoint_size: int | None = None
    task_size: int | None = None
    commit_granularity: int | None = None
    concurrency: int | None = None

    def validate(self, table: str) -> None:
        """Rejects non-positive sizes and inverted bounds, naming the argument."""
        for name in ("checkpoint_size", "min_checkpoint_size", "max_checkpoint_size", "task_size",
                     "commit_granularity", "concurrency"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise InvalidArgumentError(
                    f"backfill of table '{table}': {name} must be a positive integer, got {value!r}")
        if self.read_version is not None and (not isinstance(self.read_version, int) or self.read_version <= 0):
            raise InvalidArgumentError(f"backfill of table '{table}': read_version must be a positive integer, "
                                       f"got {self.read_version!r}")
        lo, hi = self.checkpoint_bounds()
        if lo > hi:
            raise InvalidArgumentError(
                f"backfill of table '{table}': min_checkpoint_size {lo} > max_checkpoint_size {hi}")

    def checkpoint_bounds(self) -> tuple[int, int]:
        """``(min, max)`` checkpoint rows; a lone ``checkpoint_size`` fixes the size."""
        if self.min_checkpoint_size is None and self.max_checkpoint_size is None and self.checkpoint_size:
            return self.checkpoint_size, self.checkpoint_size
        lo = self.min_checkpoint_size or min(DEFAULT_MIN_CHECKPOINT_SIZE,
                                             self.max_checkpoint_size or DEFAULT_MIN_CHECKPOINT_SIZE)
        hi = self.max_checkpoint_size or max(DEFAULT_MAX_CHECKPOINT_SIZE, lo)
        return lo, hi

    def initial_checkpoint_size(self) -> int:
        lo, hi = self.checkpoint_bounds()
        return min(max(self.checkpoint_size or DEFAULT_CHECKPOINT_SIZE, lo), hi)


def plan_backfill(
    table: Table,
    column: str,
    options: BackfillOptions | None = None,
    *,
    store: CheckpointStore | None = None,
    parallelism: int | None = None,
) -> dict[str, Any]:
    """Plans a backfill of ``column``, stores the plan, and returns its small summary."""
    options = options or BackfillOptions()
    options.validate(table.name)
    store = store or table.checkpoint_store
    if store.uri is None:
        raise InvalidArgumentError("the checkpoint store must be reachable from Spark executors (it has no URI)")
    parallelism = parallelism or os.cpu_count() or 1

    ds = table.dataset(options.read_version) if options.read_version else table.dataset()
    info = _udf_info(ds, table.name, column)
    inputs = info["input_columns"] or []
    names = ds.schema.names
    missing = [c for c in inputs if c not in names]
    if missing:
        raise ColumnError(f"column '{column}' of table '{table.name}': UDF input columns {missing} not found "
                          f"at version {ds.version}")
    where = options.where or None
    _check_where(ds, table.name, where)

    out_leaves = leaf_field_ids(ds.lance_schema.field(column))
    filter_cols = [c for c in referenced_columns(where, names) if c != column]
    read_ids = sorted({i for c in list(dict.fromkeys(inputs + filter_cols)) for i in column_field_ids(ds, c)})
    job = job_prefix(info["name"], info["version"], column, where, table.uri)

    fragments, ranges, rows_reused = plan_fragments(
        ds, store, job, {f.fragment_id: files_holding(f.metadata, read_ids) for f in ds.get_fragments()},
        out_leaves, info["column_uid"], where)
    plan = {
        "kind": "backfill",
        "table": table.name,
        "table_uri": table.uri,
        "column": column,
        "output_columns": [column],
        "udf": {k: info[k] for k in ("name", "version", "kind")},
        "input_columns": inputs,
        "where": where,
        "read_version": ds.version,
        "output_field_ids": out_leaves,
        "column_uid": info["column_uid"],
        "data_storage_version": str(ds.data_storage_version),
        "job_prefix": job,
    }
    return store_plan(plan, fragments, ranges, rows_reused, options, store, parallelism,
                      f"table '{table.name}' column '{column}'")


def plan_fragments(
    ds: Any,
    store: CheckpointStore,
    job: str,
    src_files_by_frag: dict[int, list[str]],
    out_leaves: list[int],
    column_uid: str,
    where: str | None,
) -> tuple[list[dict[str, Any]], list[tuple[int, int, int, str]], int]:
    """Decides each fragment: done, reused, empty, or the ranges still to compute.

    ``src_files_by_frag`` names the files each fragment's result depends on; a fragment
    checkpoint is reused only while they (and the output field ids) are unchanged.
    """
    existing_batches: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key in store.list_keys(job):
        bk = parse_batch_key(key)
        if bk is not None:
            existing_batches.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))

    fragments: list[dict[str, Any]] = []
    ranges: list[tuple[int, int, int, str]] = []
    rows_reused = 0
    for frag in ds.get_fragments():
        fid = frag.fragment_id
        src_files = src_files_by_frag[fid]
        out_file = column_file(frag.metadata, out_leaves)
        entry: dict[str, Any] = {"id": fid, "physical_rows": frag.physical_rows, "src_files": src_files,
                                 "base_file": out_file}
        decision = _fragment_checkpoint_decision(store, job, fid, src_files, out_leaves, column_uid, out_file, where)
        if decision is not None:
            entry.update(decision)
            rows_reused += entry["rows"]
            fragments.append(entry)
            continue
        rows = frag.count_rows(where) if where else frag.count_rows()
        entry["rows"] = rows
        if rows == 0:
            entry["action"] = EMPTY
            fragments.append(entry)
            continue
        prefix = batch_prefix(job, src_files + [f"deletions:{deletion_marker(frag)}"]
                              + ([f"base:{out_file or ''}"] if where else []))
        covered = existing_batches.get((prefix, fid), [])
        todo = missing_ranges(rows, covered)
        rows_reused += rows - sum(e - s for s, e in todo)
        entry.update(action=COMPUTE, prefix=prefix)
        fragments.append(entry)
        ranges.extend((fid, s, e, prefix) for s, e in todo)
    return fragments, ranges, rows_reused


def store_plan(
    plan: dict[str, Any],
    fragments: list[dict[str, Any]],
    ranges: list[tuple[int, int, int, str]],
    rows_reused: int,
    options: BackfillOptions,
    store: CheckpointStore,
    parallelism: int,
    label: str,
) -> dict[str, Any]:
    """Cuts the ranges into tasks, stores the plan document, and returns its summary."""
    rows_to_compute = sum(e - s for _, s, e, _ in ranges)
    lo, hi = options.checkpoint_bounds()
    if options.task_size:
        pieces = [(fid, s, e, prefix) for fid, start, end, prefix in ranges
                  for s, e in split_range(start, end, options.task_size)]
    else:
        pieces = guided_split(ranges, parallelism, lo)
    tasks = [{"frag": fid, "start": s, "end": e, "prefix": prefix} for fid, s, e, prefix in pieces]
    # Longest first: Spark launches tasks in partition order, so the big ones start early and
    # the small ones fill the gaps at the end.
    tasks.sort(key=lambda t: t["end"] - t["start"], reverse=True)
    job_id = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    plan = {
        "format": PLAN_FORMAT,
        "job_id": job_id,
        "created_at": dt.datetime.now(dt.UTC).isoformat(),
        **plan,
        "store_uri": store.uri,
        "options": {**asdict(options), "min_checkpoint_size": lo,
                    "max_checkpoint_size": hi, "checkpoint_size": options.initial_checkpoint_size(),
                    "parallelism": parallelism},
        "fragments": fragments,
        "tasks": tasks,
        "rows_to_compute": rows_to_compute,
        "rows_reused": rows_reused,
    }
    store.put_json(plan_key(job_id), plan)
    summary = plan_summary(plan, store.key_uri(plan_key(job_id)))
    log.info("plan %s: %s at version %d: %d rows to compute in %d tasks over %d fragments; "
             "%d fragments reused, %d already committed, %d rows reused",
             job_id, label, plan["read_version"], rows_to_compute, len(tasks),
             summary["fragments_to_compute"], summary["fragments_reused"], summary["fragments_done"], rows_reused)
    return summary


def plan_summary(plan: dict[str, Any], plan_uri: str) -> dict[str, Any]:
    """The XCom-sized view of a plan."""
    actions = [f["action"] for f in plan["fragments"]]
    return {
        "job_id": plan["job_id"],
        "plan_uri": plan_uri,
        "table": plan["table"],
        "column": plan.get("column"),
        "read_version": plan["read_version"],
        "rows_to_compute": plan["rows_to_compute"],
        "rows_reused": plan["rows_reused"],
        "tasks": len(plan["tasks"]),
        "fragments_to_compute": actions.count(COMPUTE),
        "fragments_reused": actions.count(REUSE),
        "fragments_done": actions.count(DONE),
        "nothing_to_do": not plan["tasks"] and REUSE not in actions and COMPUTE not in actions,
    }


def load_plan(plan_uri: str, storage_options: dict[str, str] | None = None) -> tuple[dict[str, Any], CheckpointStore]:
    """Reads a plan document and opens the store it lives in."""
    root, key = split_key_uri(plan_uri)
    store = open_store(root, storage_options)
    if key not in store:
        raise InvalidArgumentError(f"plan not found: {plan_uri}")
    plan = store.get_json(key)
    if plan.get("format") != PLAN_FORMAT:
        raise InvalidArgumentError(f"plan {plan_uri} has format {plan.get('format')}, expected {PLAN_FORMAT}")
    return plan, store


def missing_ranges(rows: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[0, rows)`` minus the union of ``covered`` ranges, as sorted disjoint ranges."""
    out = []
    pos = 0
    for s, e in sorted(covered):
        if s > pos:
            out.append((pos, min(s, rows)))
        pos = max(pos, e)
        if pos >= rows:
            break
    if pos < rows:
        out.append((pos, rows))
    return [(s, e) for s, e in out if e > s]


def split_range(start: int, end: int, size: int) -> list[tuple[int, int]]:
    """Splits ``[start, end)`` into pieces of at most ``size`` rows."""
    return [(s, min(s + size, end)) for s in range(start, end, size)]


def guided_split(
    ranges: list[tuple[int, int, int, str]], parallelism: int, min_rows: int
) -> list[tuple[int, int, int, str]]:
    """Cuts ranges into tasks that shrink as the work runs out (guided self-scheduling).

    Each task takes ``1 / parallelism`` of the rows still unplanned, but never fewer than
    ``1 / (16 * parallelism)`` of all rows (nor ``min_rows``) and never past its range.  Equal
    tasks make a slot that runs a little slower finish a whole task late; shrinking tasks let the
    slots finish together while keeping the number of Spark task launches (~70 ms each) low.
    """
    slots = max(parallelism, 1)
    left = sum(e - s for _, s, e, _ in ranges)
    floor = max(math.ceil(left / (16 * slots)), min_rows, 1)
    pieces = []
    for fid, start, end, prefix in ranges:
        pos = start
        while pos < end:
            size = max(math.ceil(left / slots), floor)
            if end - (pos + size) < floor:  # no sliver at the end of a range
                size = end - pos
            pieces.append((fid, pos, pos + size, prefix))
            pos += size
            left -= size
    return pieces


def _udf_info(ds: Any, table: str, column: str) -> dict[str, Any]:
    if column not in ds.schema.names:
        raise ColumnError(f"column '{column}' not found in table '{table}' (columns: {ds.schema.names})")
    info = udf_column_info(ds.schema.field(column).metadata)
    if info is None:
        raise ColumnError(f"column '{column}' of table '{table}' is not a UDF column; declare it with add_columns")
    return info


def _check_where(ds: Any, table: str, where: str | None) -> None:
    if where is None:
        return
    try:
        ds.scanner(filter=where, columns=[], with_row_address=True, limit=1).to_table()
    except Exception as exc:  # Lance raises several types for a bad filter
        reason = str(exc).split(", /")[0]
        raise InvalidArgumentError(f"invalid where filter {where!r} for table '{table}': {reason}") from exc


def _fragment_checkpoint_decision(
    store: CheckpointStore,
    job: str,
    fid: int,
    src_files: list[str],
    out_leaves: list[int],
    column_uid: str,
    out_file: str | None,
    where: str | None,
) -> dict[str, Any] | None:
    """REUSE/DONE when the fragment checkpoint still matches the inputs and output ids, else None."""
    key = fragment_key(job, fid)
    if key not in store:
        return None
    doc = store.get_json(key)
    if (doc["output_field_ids"] != out_leaves or doc.get("column_uid") != column_uid
            or doc["src_data_files"] != src_files):
        return None
    staged = doc["file"]["path"]
    if out_file == staged:
        return {"action": DONE, "rows": doc["rows"], "file": doc["file"]}
    if where is None or doc.get("base_file") == out_file:
        return {"action": REUSE, "rows": doc["rows"], "file": doc["file"]}
    return None
