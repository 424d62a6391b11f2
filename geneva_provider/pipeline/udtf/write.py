"""The UDTF kind's write+commit: the fragments the apply stage wrote, committed with the rows they replace deleted.

Apply wrote each checkpoint's rows as new fragments of the view (:mod:`geneva_provider.pipeline.udtf.expand`);
this stage, on the driver, takes each part's checkpoints -- each parent's rows from the first checkpoint
that expanded it: a retried task may have expanded a parent twice -- records the group's fragments in the
store, and commits them in one ``Update`` with the deletion of the rows they replace (an ``Append`` when
they replace none) -- atomic, so a
reader never sees a parent's old and new rows at once, nor neither.  A checkpoint's fragments are
committed as they are; only one holding parents that are not all its part's (an earlier plan of the same
refresh cut the parts otherwise) or whose fragments were committed already has its rows copied into new
fragments.  The commit carries the job's id as its message, so a retried stage knows when its commit
already landed.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from geneva_provider.core.contracts.models import (
    AppendedFragments,
    CommitRecord,
    ExpandedFragments,
    ExpandPart,
    ExpandPlan,
    GroupFragments,
    UdtfWork,
    WriteResult,
)
from geneva_provider.core.errors import CheckpointMissingError, ConcurrentOverwriteError
from geneva_provider.core.fragments import data_file_path
from geneva_provider.core.incarnations import check_incarnations
from geneva_provider.core.ranges import positions_of
from geneva_provider.core.refs import TableRef
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import JobStore
from geneva_provider.core.views.meta import SOURCE_ROW_ID
from geneva_provider.core.views.udtf_meta import PARTITION
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.committer import OWN_COMMIT_PREFIX, Attempt, CommitPolicy, commit, commit_messages
from geneva_provider.pipeline.row_deletes import deletions
from geneva_provider.pipeline.stages.job_records import update_record
from geneva_provider.pipeline.udtf.expand import PARENT_ROWS, SKIPPED, Held, fragments_of, is_chunker, udtf_work
from geneva_provider.pipeline.udtf.lineage import mark_refreshed

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.pipeline.spark.task_runner import TaskRunner

log = logging.getLogger(__name__)


Unit = tuple[list[str], list[tuple[int, int]] | None]  # a part's checkpoints, and its parents' runs


def _group_fragments(plan: ExpandPlan, store: CheckpointStore, units: list[Unit], live: set[str],
                     storage_options: dict[str, str] | None) -> GroupFragments:
    """A commit group's fragments, from its parts' checkpoints (``(keys, parent runs)`` each; no runs: a batch
    UDTF's partition, whose first checkpoint is taken whole), and the parents the error policy skipped.

    A checkpoint whose parents are all its part's, not taken from an earlier checkpoint, gives its fragments
    as they are -- unless they hold a data file the view holds already (``live``: committed by an earlier
    attempt), which must not be committed twice; otherwise the rows of its parents the part takes are copied.
    """
    fragments: list[str] = []
    rows, pending = 0, []
    copies: list[tuple[ExpandedFragments, np.ndarray | None]] = []
    for keys, ranges in units:
        allowed = positions_of(ranges) if ranges is not None else None
        claimed = np.zeros(0, np.int64)
        for key in keys:
            checkpoint = store[key]
            written = fragments_of(checkpoint, key)
            parents = checkpoint.column(SOURCE_ROW_ID).to_numpy()
            counts = checkpoint.column(PARENT_ROWS).to_numpy()
            mine = np.ones(len(parents), bool) if allowed is None else \
                np.isin(parents, allowed) & ~np.isin(parents, claimed)
            claimed = np.union1d(claimed, parents[mine])
            pending += parents[mine & (counts == SKIPPED)].tolist()
            if mine.all() and not live.intersection(_files(written)):
                fragments += written.fragments
                rows += written.rows
            elif written.rows and (allowed is None or (counts[mine] > 0).any()):
                copies.append((written, None if mine.all() else parents[mine & (counts > 0)]))
    if copies:
        table = pa.concat_tables([_rows_of(plan.table_uri, w, keep, storage_options) for w, keep in copies])
        fragments += _write(plan, table, storage_options)
        rows += table.num_rows
    return GroupFragments(fragments=fragments, rows=rows, pending=sorted(pending))


def _files(written: ExpandedFragments) -> list[str]:
    from lance.fragment import FragmentMetadata

    return [data_file_path(f) for text in written.fragments for f in FragmentMetadata.from_json(text).data_files()]


def _live_files(ds: Dataset) -> set[str]:
    """The data files the view's fragments hold now."""
    return {data_file_path(f) for frag in ds.get_fragments() for f in frag.data_files()}


def _rows_of(uri: str, written: ExpandedFragments, parents: np.ndarray | None,
             storage_options: dict[str, str] | None) -> pa.Table:
    """The rows of a checkpoint's fragments (read from their data files: they may not be committed), of
    ``parents`` only when given."""
    from lance.file import LanceFileReader
    from lance.fragment import FragmentMetadata

    tables = []
    for text in written.fragments:
        files = [LanceFileReader(f"{uri.rstrip('/')}/data/{f.path}", storage_options=storage_options).read_all()
                 .to_table() for f in FragmentMetadata.from_json(text).data_files()]
        table = files[0]
        for more in files[1:]:
            for name in more.column_names:
                table = table.append_column(more.schema.field(name), more.column(name))
        tables.append(table)
    table = pa.concat_tables(tables)
    if parents is None:
        return table
    return table.filter(pa.array(np.isin(table.column(SOURCE_ROW_ID).to_numpy(), parents)))


def _write(plan: ExpandPlan, table: pa.Table, storage_options: dict[str, str] | None) -> list[str]:
    import lance

    if not table.num_rows:
        return []
    work = udtf_work(plan)
    kwargs: dict[str, Any] = {"max_rows_per_file": work.max_rows_per_fragment} if work.max_rows_per_fragment else {}
    return [json.dumps(f.to_json()) for f in lance.fragment.write_fragments(
        table, plan.table_uri, mode="append", storage_options=storage_options, **kwargs)]


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


def write_commit(plan: ExpandPlan, store: CheckpointStore, runner: TaskRunner,
                          storage_options: dict[str, str] | None) -> WriteResult:
    """Commits the fragments the apply stage wrote, with the rows they replace deleted (no Spark job: the
    rows are written already).

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
    live = _live_files(_open(plan.table_uri, storage_options)) if len(record.groups) < len(groups) else set()
    version, deleted, retries = plan.read_version, 0, 0
    for g, group in enumerate(groups):
        if g in record.committed:
            continue
        if g not in record.groups:
            units = [(held.keys_for(p), p.ranges if chunker else None) for p in group]
            record.groups[g] = _group_fragments(plan, store, units, live, storage_options)
            jobs.put_appended(plan.job_id, record)  # before the commit: a retry commits these, never takes them again
        last = g == len(groups) - 1
        version, n, tries = _commit(plan, record.groups[g], _replaced(work, group, parts if last else None),
                                    f"{_message(plan)} commit {g + 1}/{len(groups)}", storage_options)
        deleted, retries = deleted + n, retries + tries
        record.committed.append(g)
        jobs.put_appended(plan.job_id, record)
        if len(groups) > 1:
            log.info("write %s: commit %d of %d: version %d, %s added, %d deleted", plan.job_id, g + 1,
                     len(groups), version, counted(record.groups[g].rows, "row"), n)
    pending = sorted(i for grp in record.groups.values() for i in grp.pending)
    mark_refreshed(_open(plan.table_uri, storage_options), work, pending)
    rows = sum(grp.rows for grp in record.groups.values())
    fragments = sum(len(grp.fragments) for grp in record.groups.values())
    result = WriteResult(job_id=plan.job_id, version=_open(plan.table_uri, storage_options).version,
                         fragments_committed=fragments, rows_committed=rows, fragments_vanished=[],
                         commit_retries=retries, seconds=round(time.perf_counter() - t0, 3))
    jobs.put_committed(plan.job_id, CommitRecord(result=result))
    update_record(store, plan.job_id, rows_committed=plan.rows_to_compute)
    log.info("write %s: view '%s' version %d: %s added in %s, %s deleted, %s left to expand again", plan.job_id,
             plan.table, result.version, counted(rows, "row"), counted(fragments, "fragment"), counted(deleted, "row"),
             counted(len(pending), "parent"))
    return result


def _open(uri: str, storage_options: dict[str, str] | None) -> Dataset:
    import lance

    return lance.dataset(uri, storage_options=storage_options)


_MESSAGE = f"{OWN_COMMIT_PREFIX}udtf refresh "  # a UDTF refresh's commit message: this and the job's id


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
        # The new fragments' files hold the view's columns as planned: never added under a column re-created since.
        check_incarnations(ds, [i.column for i in plan.incarnations], [], plan.incarnations, plan.table,
                           f"commit '{message}'")
        updated, removed, deleted = deletions(ds, *replaced)
        if not (new or updated or removed):
            return ds.version, deleted
        # Nothing deleted (a first refresh, an append's): an Append, the same rows and row versions.  On a table
        # with stable row ids an Update of new fragments costs ~80 ms more per million rows (pylance 14).
        operation = lance.LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated,
                                                new_fragments=new) if updated or removed else \
            lance.LanceOperation.Append(new)
        ds = lance.LanceDataset.commit(plan.table_uri, operation, read_version=ds.version,
                                       storage_options=storage_options, commit_message=message)
        return ds.version, deleted

    done = commit(TableRef(plan.table, plan.table_uri, storage_options), f"commit '{message}'", apply,
                  landed=lambda ds: (ds.version, 0) if _landed(ds, plan, message) else None,
                  policy=CommitPolicy.of(plan.settings), look_first=True)
    return *done.value, done.retries


