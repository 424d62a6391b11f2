"""The UDTF kind's write+commit: the expanded rows as new fragments, committed with the rows they replace deleted.

The checkpoints become new Lance fragments on the executors (each parent's rows taken from one
checkpoint), recorded in the store, then committed on the driver in one ``Update`` with the
deletion of the rows they replace -- atomic, so a reader never sees a parent's old and new rows at
once, nor neither.  The commit carries the job's id as its message, so a retried stage knows when its
commit already landed.
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
from geneva_provider.core.errors import CheckpointMissingError, ConcurrentOverwriteError
from geneva_provider.core.fragments import fragment_of
from geneva_provider.core.models import (
    AppendedFragments,
    CommitRecord,
    ExpandPart,
    ExpandPlan,
    GroupFragments,
    UdtfWork,
    WriteResult,
)
from geneva_provider.core.ranges import positions_of
from geneva_provider.core.refs import TableRef
from geneva_provider.core.store_layout import JobStore
from geneva_provider.core.udtf_view_meta import CHUNK_INDEX, PARTITION
from geneva_provider.core.view_meta import SOURCE_ROW_ID
from geneva_provider.pipeline.committer import Attempt, CommitPolicy, commit, commit_messages
from geneva_provider.pipeline.context import StageContext
from geneva_provider.pipeline.job_records import update_record
from geneva_provider.pipeline.runner import job_tag, options_for_tasks, run_tasks
from geneva_provider.pipeline.udtf.expand import SKIPPED, Held, is_chunker, udtf_work
from geneva_provider.pipeline.udtf_lineage import mark_refreshed

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, SparkSession

log = logging.getLogger(__name__)

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
    pending = table.filter(pc.equal(index, SKIPPED)).column(SOURCE_ROW_ID).to_pylist()
    return table.filter(pc.greater_equal(index, 0)), pending


def _write_group(ctx: StageContext, slots: Iterable[list[tuple[list[str], list[tuple[int, int]] | None]]]
                 ) -> Iterator[GroupFragments]:
    """Writes some parts' checkpoints (``(keys, parent runs)`` each) as new fragments of the view (not committed)."""
    import lance

    store = ctx.store()
    work = udtf_work(ctx)
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
        yield GroupFragments(fragments=fragments, rows=table.num_rows, pending=[i for _, p in taken for i in p])


def check_applied(plan: ExpandPlan, store: CheckpointStore) -> None:
    """Refuses a plan a part of which no checkpoint holds (unless an earlier attempt committed it)."""
    if JobStore(store).committed(plan.job_id) is not None:
        return
    held = Held(store, plan.job_prefix, is_chunker(plan))
    parts = [p for t in plan.tasks for p in t.parts]
    missing = [p for p in parts if not held.done(p)]
    if missing:
        raise CheckpointMissingError(
            f"write+commit of job {plan.job_id} ({plan.label()}): the apply stage has not finished: {len(missing)} "
            f"of {len(parts)} parts have no checkpoint (first: source rows {missing[0].ranges[0][0]}.."
            f"{missing[0].ranges[-1][1] - 1}); run the apply stage first. Nothing was written or committed")


def write_commit(plan: ExpandPlan, store: CheckpointStore, spark: SparkSession,
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
    chunker = is_chunker(plan)
    held = Held(store, plan.job_prefix, chunker)
    parts = [p for t in plan.tasks for p in t.parts]
    size = plan.settings.commit_granularity or max(len(parts), 1)
    groups = [parts[i:i + size] for i in range(0, len(parts), size)] or [[]]
    record = jobs.appended(plan.job_id) or AppendedFragments()
    work = udtf_work(plan)
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
            record.groups[g] = GroupFragments(fragments=[f for r in written for f in r.fragments],
                                              rows=sum(r.rows for r in written),
                                              pending=sorted(i for r in written for i in r.pending))
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


def _message(plan: ExpandPlan) -> str:
    return f"{_MESSAGE}{plan.job_id}"


def _landed(ds: Dataset, plan: ExpandPlan, message: str) -> bool:
    """True when the commit ``message`` names is among the view's versions since the plan read it.

    Raises ConcurrentOverwriteError when another refresh of the view committed since: this plan's rows
    were planned against the view before it, and committing them would expand some parents twice.
    """
    mine, others = _message(plan), set()
    landed = False
    for text in commit_messages(ds, plan.read_version):
        landed = landed or text == message
        if text.startswith(_MESSAGE) and not text.startswith(mine):
            others.add(text.removeprefix(_MESSAGE).split()[0])
    if others and not landed:
        raise ConcurrentOverwriteError(
            f"{plan.label()}: job(s) {sorted(others)} refreshed the view while job {plan.job_id} ran, so its rows "
            "would repeat theirs; nothing of this job was committed: refresh again (a new plan takes what they "
            "committed into account)")
    return landed


def _replaced(work: UdtfWork, group: list[ExpandPart], every: list[ExpandPart] | None) -> tuple[str, np.ndarray]:
    """The rows a commit deletes: (column, values) -- the old rows of the group's own parents (or
    partitions); the last commit (``every`` given) also those of parents no part expands again."""
    if work.partition_state is not None:  # a batch UDTF: by partition
        column, doomed = PARTITION, np.asarray(work.delete_partitions, np.int64)  # keys are below 2**63
        mine = np.asarray([work.partitions[p.partition or 0][0] for p in group], np.int64)
        others = np.asarray([work.partitions[p.partition or 0][0] for p in every or []], np.int64)
    else:
        column, doomed = SOURCE_ROW_ID, positions_of(work.delete_parents)
        mine = positions_of([r for p in group for r in p.ranges])
        others = positions_of([r for p in every or [] for r in p.ranges])
    if every is None:
        return column, doomed[np.isin(doomed, mine)]
    return column, doomed[np.isin(doomed, mine) | ~np.isin(doomed, others)]


def _commit(plan: ExpandPlan, group: GroupFragments, replaced: tuple[str, np.ndarray], message: str,
            storage_options: dict[str, str] | None) -> tuple[int, int, int]:
    """One Update: the group's new fragments, and the rows they replace deleted.  Returns (version, rows
    deleted, retries); a commit that already landed (a retried stage) is not made again."""
    import lance

    new = [lance.fragment.FragmentMetadata.from_json(f) for f in group.fragments]

    def apply(attempt: Attempt) -> tuple[int, int]:
        ds = attempt.latest if attempt.latest is not None else _open(plan.table_uri, storage_options)  # look_first
        updated, removed, deleted = _deletions(ds, *replaced)
        if not (new or updated or removed):
            return ds.version, deleted
        ds = lance.LanceDataset.commit(
            plan.table_uri, lance.LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated,
                                                        new_fragments=new),
            read_version=ds.version, storage_options=storage_options, commit_message=message)
        return ds.version, deleted

    done = commit(TableRef(plan.table, plan.table_uri, storage_options), f"commit '{message}'", apply,
                  landed=lambda ds: (ds.version, 0) if _landed(ds, plan, message) else None,
                  policy=CommitPolicy.of(plan.settings), look_first=True)
    return *done.value, done.retries


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


