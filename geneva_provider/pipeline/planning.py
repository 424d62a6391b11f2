"""Planning shared by backfills and view refreshes: decide each fragment, cut tasks, store the plan.

The plan is the only thing later stages share besides checkpoints: it pins the read version,
the output field ids, and for every fragment whether it is computed (and which ``[start, end)``
ranges), reused from a fragment checkpoint, or already committed.  It is stored as a
:class:`~geneva_provider.core.models.Plan` in the checkpoint store; XCom carries only its
:class:`~geneva_provider.core.models.PlanSummary`.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from geneva_provider.core.checkpoint import (
    CheckpointStore,
    batch_prefix,
    fragment_key,
    open_store,
    parse_batch_key,
    plan_key,
    split_key_uri,
)
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.fragments import column_file, deletion_marker
from geneva_provider.core.models import (
    Action,
    FragmentCheckpoint,
    FragmentPlan,
    JobSpec,
    Plan,
    PlanSettings,
    PlanSummary,
    Task,
)
from geneva_provider.core.options import JobOptions
from geneva_provider.core.ranges import guided_split, missing_ranges, split_range

log = logging.getLogger(__name__)


def plan_fragments(
    ds: Any,
    store: CheckpointStore,
    job: str,
    src_files_by_frag: dict[int, list[str]],
    out_leaves: list[int],
    column_uid: str,
    where: str | None,
) -> tuple[list[FragmentPlan], list[tuple[int, int, int]]]:
    """Decides each fragment: done, reused, empty, or the ranges ``(fragment, start, end)`` still to compute.

    ``src_files_by_frag`` names the files each fragment's result depends on; a fragment
    checkpoint is reused only while they (and the output field ids) are unchanged.
    """
    existing_batches: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key in store.list_keys(job):
        bk = parse_batch_key(key)
        if bk is not None:
            existing_batches.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end))

    fragments: list[FragmentPlan] = []
    ranges: list[tuple[int, int, int]] = []
    for frag in ds.get_fragments():
        fid = frag.fragment_id
        src_files = src_files_by_frag[fid]
        out_file = column_file(frag.metadata, out_leaves)
        common = {"id": fid, "physical_rows": frag.physical_rows, "src_files": src_files, "base_file": out_file}
        reused = _reusable_checkpoint(store, job, fid, src_files, out_leaves, column_uid, out_file, where)
        if reused is not None:
            action, ckpt = reused
            fragments.append(FragmentPlan(**common, rows=ckpt.rows, action=action, file=ckpt.file))
            continue
        rows = frag.count_rows(where) if where else frag.count_rows()
        if rows == 0:
            fragments.append(FragmentPlan(**common, rows=0, action=Action.EMPTY))
            continue
        prefix = batch_prefix(job, src_files + [f"deletions:{deletion_marker(frag)}"]
                              + ([f"base:{out_file or ''}"] if where else []))
        fragments.append(FragmentPlan(**common, rows=rows, action=Action.COMPUTE, prefix=prefix))
        ranges.extend((fid, s, e) for s, e in missing_ranges(rows, existing_batches.get((prefix, fid), [])))
    return fragments, ranges


def store_plan(
    job: JobSpec,
    fragments: list[FragmentPlan],
    ranges: list[tuple[int, int, int]],
    options: JobOptions,
    store: CheckpointStore,
    parallelism: int,
    label: str,
) -> PlanSummary:
    """Cuts the ranges into tasks, stores the plan document, and returns its summary."""
    if store.uri is None:
        raise InvalidArgumentError("the checkpoint store must be reachable from Spark executors (it has no URI)")
    prefixes = {f.id: f.prefix for f in fragments if f.prefix is not None}
    rows_to_compute = sum(e - s for _, s, e in ranges)
    planned_rows = sum(f.rows for f in fragments if f.action is not Action.EMPTY)
    lo, hi = options.checkpoint_bounds()
    if options.task_size:
        pieces = [(fid, s, e) for fid, start, end in ranges for s, e in split_range(start, end, options.task_size)]
    else:
        pieces = guided_split(ranges, parallelism, lo)
    # Longest first: Spark launches tasks in partition order, so the big ones start early and
    # the small ones fill the gaps at the end.
    tasks = sorted((Task(frag=fid, start=s, end=e, prefix=prefixes[fid]) for fid, s, e in pieces),
                   key=lambda t: t.rows, reverse=True)
    now = dt.datetime.now(dt.UTC)
    job_id = f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    settings = PlanSettings(checkpoint_size=options.initial_checkpoint_size(), min_checkpoint_size=lo,
                            max_checkpoint_size=hi, task_size=options.task_size,
                            commit_granularity=options.commit_granularity, concurrency=options.concurrency,
                            parallelism=parallelism)
    plan = Plan(**job.model_dump(), job_id=job_id, created_at=now.isoformat(), store_uri=store.uri,
                settings=settings, fragments=fragments, tasks=tasks, rows_to_compute=rows_to_compute,
                rows_reused=planned_rows - rows_to_compute)
    key = plan_key(job_id)
    store.put_model(key, plan)
    summary = plan.summary(store.key_uri(key))
    log.info("plan %s: %s at version %d: %d rows to compute in %d tasks over %d fragments; "
             "%d fragments reused, %d already committed, %d rows reused",
             job_id, label, plan.read_version, rows_to_compute, len(tasks), summary.fragments_to_compute,
             summary.fragments_reused, summary.fragments_done, plan.rows_reused)
    return summary


def load_plan(plan_uri: str, storage_options: dict[str, str] | None = None) -> tuple[Plan, CheckpointStore]:
    """Reads a plan document and opens the store it lives in."""
    try:
        root, key = split_key_uri(plan_uri)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    store = open_store(root, storage_options)
    if key not in store:
        raise InvalidArgumentError(f"plan not found: {plan_uri}")
    return Plan.from_json(store.get_text(key), f"plan {plan_uri}"), store


def _reusable_checkpoint(
    store: CheckpointStore,
    job: str,
    fid: int,
    src_files: list[str],
    out_leaves: list[int],
    column_uid: str,
    out_file: str | None,
    where: str | None,
) -> tuple[Action, FragmentCheckpoint] | None:
    """(DONE | REUSE, checkpoint) while the fragment checkpoint still matches the inputs and output ids."""
    key = fragment_key(job, fid)
    if key not in store:
        return None
    ckpt = store.get_model(key, FragmentCheckpoint)
    if ckpt.output_field_ids != out_leaves or ckpt.column_uid != column_uid or ckpt.src_data_files != src_files:
        return None
    if out_file == ckpt.file.path:
        return Action.DONE, ckpt
    if where is None or ckpt.base_file == out_file:
        return Action.REUSE, ckpt
    return None
