"""The column kinds' write+commit: turn batch checkpoints into one column file per fragment, and commit them.

A Lance data file must hold a value for every physical row of its fragment, so the writer
restores the physical layout from the checkpointed row addresses: deleted rows become
NULL, rows a ``where`` did not select keep their current value.  The files a writer staged
are recorded (one record per few hundred fragments) before any is committed, so a rerun
commits them again instead of writing them again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from geneva_provider.core.contracts.models import (
    Action,
    ColumnPlan,
    CommitRecord,
    DataFileRef,
    FileTarget,
    FragmentPlan,
    WriteResult,
    WrittenFragment,
)
from geneva_provider.core.errors import CheckpointMissingError, ConcurrentOverwriteError, CorruptCheckpointError
from geneva_provider.core.fragments import fragment_of, live_row_addresses, output_files
from geneva_provider.core.listing import shortened
from geneva_provider.core.ranges import count_of, positions_of
from geneva_provider.core.store.checkpoint import ROWADDR, CheckpointStore, open_store
from geneva_provider.core.store.layout import JobStore, batch_prefix
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.columns.commit import commit_column_files
from geneva_provider.pipeline.columns.compute import applied_files, unapplied_rows
from geneva_provider.pipeline.columns.files import Stager, write_column_file
from geneva_provider.pipeline.committer import CommitPolicy
from geneva_provider.pipeline.spark.runner import job_tag
from geneva_provider.pipeline.stages.context import StageContext
from geneva_provider.pipeline.stages.job_records import update_record
from geneva_provider.pipeline.stages.on_driver import write_runner
from geneva_provider.pipeline.stages.planning import (
    discard_corrupt,
    record_valid,
    staged_files,
    validity_signature,
)

if TYPE_CHECKING:
    from geneva_provider.pipeline.spark.task_runner import TaskRunner

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------- executor side
class _Writer:
    """What one Spark partition opens once for all its fragments: the table, the store, and its checkpoint keys."""

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.store = ctx.store()
        self.ds = ctx.dataset()
        self.fields = [self.ds.schema.field(c) for c in ctx.job.output_columns]
        self.stager = Stager(ctx, self.store)
        self.keys: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
        for bk in JobStore(self.store).batches(ctx.job.job_prefix):
            self.keys.setdefault((bk.prefix, bk.frag_id), []).append((bk.start, bk.end, bk.key()))


def write_fragment(ctx: StageContext, entry: FragmentPlan, writer: _Writer | None = None) -> WrittenFragment:
    """Writes one fragment's output file from its checkpoints over its current values; stages it with the writer."""
    job = ctx.job
    writer = writer or _Writer(ctx)
    store, ds = writer.store, writer.ds
    fid = entry.id
    prefix = batch_prefix(job.job_prefix, src_key=entry.src_key)
    frag = fragment_of(ds, fid)
    parts = []
    for _, _, key in sorted(writer.keys.get((prefix, fid), [])):
        try:
            parts.append(store[key])
        except CorruptCheckpointError as exc:
            discard_corrupt(store, key, exc)
            raise CheckpointMissingError(
                f"columns {job.value_columns} of table '{job.table}': {exc}; it was removed and nothing was "
                "committed from it: run the job again (a new plan computes its rows again)") from None
    fields = writer.fields
    new = pa.concat_tables(parts) if parts else pa.table(
        {ROWADDR: pa.array([], pa.uint64()), **{f.name: pa.array([], f.type) for f in fields}})
    missing = _missing_rows(live_row_addresses(frag)[positions_of(entry.needed)], new.column(ROWADDR),
                            entry.physical_rows)
    if len(missing):
        raise CheckpointMissingError(
            f"columns {job.value_columns} of table '{job.table}': fragment {fid} has no checkpoint for "
            f"{len(missing)} of its {count_of(entry.needed)} planned rows (first row address {int(missing[0])}); "
            "run the apply stage first")
    ckpt = write_column_file(ctx, frag, new, FileTarget.of(entry), entry.rows, fields)
    writer.stager.stage(fid, ckpt)
    return WrittenFragment(frag=fid, file=ckpt.file, rows=entry.rows, complete=ckpt.complete)


def _missing_rows(needed: np.ndarray, held: pa.ChunkedArray, physical_rows: int) -> np.ndarray:
    """The addresses in ``needed`` that no checkpointed row (``held``) has (both addresses of one fragment)."""
    addrs = np.concatenate([chunk.to_numpy() for chunk in held.chunks]) if held.num_chunks else needed[:0]
    if len(addrs) == len(needed) and np.array_equal(addrs, needed):  # the checkpoints hold just the planned rows
        return needed[:0]
    have = np.zeros(physical_rows, bool)
    for chunk in held.chunks:
        offsets = chunk.to_numpy() & 0xFFFFFFFF
        have[offsets[offsets < physical_rows]] = True  # an offset beyond the fragment fails in physical_index
    return needed[~have[needed & 0xFFFFFFFF]]


def _write_partition(ctx: StageContext, entries: Iterable[FragmentPlan]) -> Iterator[WrittenFragment]:
    writer = _Writer(ctx)
    written = [write_fragment(ctx, entry, writer) for entry in entries]
    writer.stager.flush()  # recorded before the driver sees (and commits) any of them
    yield from written


# ---------------------------------------------------------------------- driver side
def check_applied(plan: ColumnPlan, store: CheckpointStore) -> None:
    """Refuses a plan whose apply stage has not ended -- before any Spark job, and changing nothing (not even
    the job's record): the writers would only find the checkpoints missing, fragment by fragment.

    Apply ends when a checkpoint covers every planned range (rows its error policy skipped included).
    """
    missing = unapplied_rows(plan, store)
    if missing:
        planned = {f.id: count_of(f.needed) for f in plan.fragments}
        gaps = [f"fragment {fid} has no checkpoint for {rows} of its {planned.get(fid, rows)} planned rows"
                for fid, rows in sorted(missing.items())]
        raise CheckpointMissingError(
            f"write+commit of job {plan.job_id} ({plan.label()}): the apply stage has not finished for this plan "
            f"({sum(missing.values())} of its {plan.rows_to_compute} rows to compute have no checkpoint): "
            f"{shortened(gaps, sep='; ')}; run the apply stage first (run_apply on this plan). Nothing was written "
            "or committed")


def write_commit(plan: ColumnPlan, runner: TaskRunner, storage_options: dict[str, str] | None) -> WriteResult:
    t0 = time.perf_counter()
    to_write = [f for f in plan.fragments if f.action is Action.COMPUTE]
    to_commit_now = {f.id: f.file for f in plan.fragments if f.action is Action.REUSE and f.file is not None}
    granularity = plan.settings.commit_granularity or max(len(to_write) + len(to_commit_now), 1)
    committer = _Committer(plan, storage_options)
    if earlier := _committed_earlier(plan, committer.store, storage_options):
        # A retry of this plan: what the attempt before it committed stays committed (not written again,
        # and not mistaken for a concurrent writer's values when the next commit rebases past it).
        to_write = [f for f in to_write if f.id not in earlier]
        to_commit_now = {fid: ref for fid, ref in to_commit_now.items() if fid not in earlier}
        committer.committed += sorted(earlier)
        committer.ready += sum(committer.rows[f] for f in earlier)
        log.info("write %s: %s committed by an earlier attempt of this plan", plan.job_id,
                 counted(len(earlier), "fragment was", "fragments were"))
    # Fragments the apply computed whole and staged its file for: committed as they are, no writer task.
    writing = {f.id for f in to_write}
    applied = {fid: ckpt for fid, ckpt in applied_files(plan, committer.store).items() if fid in writing}
    if applied:
        to_write = [f for f in to_write if f.id not in applied]
        to_commit_now.update({fid: ckpt.file for fid, ckpt in applied.items()})
        committer.ready += sum(committer.rows[fid] for fid in applied)
        committer.complete.update(fid for fid, ckpt in applied.items() if ckpt.complete)
    if to_write:  # a few rows to write from checkpoints: on the driver, without a Spark job
        runner = write_runner(runner, plan, sum(f.physical_rows for f in to_write),
                              StageContext.of(plan, storage_options).dataset().schema)
    ctx = StageContext.of(plan, runner.options_for_tasks(storage_options) if to_write else storage_options)
    if to_commit_now:
        committer.complete.update(f.id for f in plan.fragments if f.action is Action.REUSE and f.complete)
    groups = commit_groups(plan, to_write, to_commit_now, granularity)
    log.info("write %s: %s to write and %s to commit, in %s", plan.job_id, counted(len(to_write), "fragment"),
             counted(len(to_commit_now), "staged fragment"), counted(len(groups), "commit"))
    writers = [i for i, g in enumerate(groups) if g.to_write]
    description = f"geneva write {plan.table}.{','.join(plan.output_columns)}"
    slots = plan.settings.concurrency or plan.settings.parallelism
    # A group's fragments are dealt over at most `slots` Spark tasks, largest first: many small fragments cost
    # a few task launches, not one each.  Groups are written at once and committed in their order.
    with ThreadPoolExecutor(max_workers=max(1, min(len(writers), slots)), thread_name_prefix="geneva-writer") as pool:
        futures = {i: pool.submit(runner.run_tasks, sorted(groups[i].to_write, key=lambda f: f.physical_rows,
                                                            reverse=True),
                                  partial(_write_partition, ctx), description=description, concurrency=slots,
                                  tag=job_tag(plan.job_id))
                   for i in writers}
        try:
            for i, group in enumerate(groups):
                files = dict(group.staged)
                if group.to_write:
                    written = futures[i].result()
                    committer.ready += sum(r.rows for r in written)
                    committer.complete.update(r.frag for r in written if r.complete)
                    files.update({r.frag: r.file for r in written})
                committer.commit(files)
        finally:
            for fut in futures.values():
                fut.cancel()
    outcome = committer.summary(round(time.perf_counter() - t0, 3))
    update_record(committer.store, plan.job_id, commit_conflict_retries=committer.retries,
                  commit_seconds=round(committer.commit_seconds, 3),
                  write_seconds=round(max(outcome.seconds - committer.commit_seconds, 0.0), 3))
    JobStore(committer.store).put_committed(plan.job_id, CommitRecord(result=outcome, staged=committer.staged))
    if committer.changed:
        # Every retry of this plan meets the same newer values: only a new plan (a rerun of the backfill,
        # or of its DAG) can take them in, so Airflow must not retry this task.
        raise ConcurrentOverwriteError(
            f"columns {plan.output_columns} of table '{plan.table}': fragments {sorted(committer.changed)} were "
            "changed by a concurrent backfill of the same column and were not overwritten; retrying this plan "
            f"({plan.job_id}) cannot commit them: rerun the backfill, or its DAG, for a new plan (its checkpoints "
            "make the rerun cheap)")
    return outcome


def _committed_earlier(plan: ColumnPlan, store: CheckpointStore, storage_options: dict[str, str] | None) -> set[int]:
    """The plan's fragments whose output is already a file this plan wrote or reused: an earlier attempt
    committed them.

    Only this plan's own files count: another job of the same column (an earlier backfill with another
    filter) stages under the same prefix, and its committed files are no reason to skip a fragment.
    """
    mine: dict[int, set[str]] = {}
    for fid, files in staged_files(store, plan.job_prefix).items():
        mine.setdefault(fid, set()).update(c.file.path for c in files if c.job_id == plan.job_id)
    for f in plan.fragments:
        if f.action is Action.REUSE and f.file is not None:
            mine.setdefault(f.id, set()).add(f.file.path)
    if not any(mine.values()):
        return set()
    import lance

    ds = lance.dataset(plan.table_uri, storage_options=storage_options)
    if ds.version == plan.read_version:  # nothing was committed since the plan: no attempt of it committed either
        return set()
    live = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    return {f.id for f in plan.fragments
            if f.action in (Action.COMPUTE, Action.REUSE) and f.id in live
            and output_files(live[f.id], plan.output_field_ids) in mine.get(f.id, set())}


@dataclass(frozen=True)
class CommitGroup:
    """The fragments of one commit: those a writer task writes, and those whose file is ready (staged by apply
    or reused from an earlier job)."""

    to_write: list[FragmentPlan]
    staged: dict[int, DataFileRef]


def commit_groups(plan: ColumnPlan, to_write: list[FragmentPlan], staged: dict[int, DataFileRef],
                  granularity: int) -> list[CommitGroup]:
    """``commit_granularity`` as one rule over the plan's fragment order: every ``granularity`` fragments to
    commit, in order, make one commit (the last may hold fewer) -- whichever path made their file: a writer
    task, the apply task that computed the fragment whole, or an earlier job's file reused."""
    writing = {f.id: f for f in to_write}
    order = [f.id for f in plan.fragments if f.id in writing or f.id in staged]
    chunks = [order[i:i + granularity] for i in range(0, len(order), granularity)]
    return [CommitGroup([writing[fid] for fid in chunk if fid in writing],
                        {fid: staged[fid] for fid in chunk if fid in staged}) for chunk in chunks]


class _Committer:
    """Commits groups in order on the driver, chaining each commit's version into the next."""

    def __init__(self, plan: ColumnPlan, storage_options: dict[str, str] | None) -> None:
        self.plan = plan
        self.storage_options = storage_options
        self.version = plan.read_version
        self.committed: list[int] = []
        self.vanished: list[int] = []
        self.changed: list[int] = []
        self.staged: dict[int, str] = {}
        self.entries = {f.id: f for f in plan.fragments}
        self.rows = {f.id: f.rows for f in plan.fragments}
        self.base = {f.id: f.base_file for f in plan.fragments}
        self.complete: set[int] = set()  # staged fragments valid in every live row
        self.ready = sum(f.rows for f in plan.fragments if f.action is Action.REUSE)  # rows staged, to commit
        self.total = sum(f.rows for f in plan.fragments if f.action in (Action.COMPUTE, Action.REUSE))
        self.store = open_store(plan.store_uri, storage_options)
        self.retries = 0
        self.commit_seconds = 0.0

    def commit(self, files: dict[int, DataFileRef]) -> None:
        t0 = time.perf_counter()
        plan = self.plan
        outcome = commit_column_files(
            plan.table_uri, plan.output_columns, {fid: ref.to_lance() for fid, ref in files.items()},
            self.version, output_field_ids=plan.output_field_ids, incarnations=plan.incarnations, base_files=self.base,
            storage_options=self.storage_options, policy=CommitPolicy.of(plan.settings), table=plan.table)
        self.version = outcome.version
        self.committed += outcome.committed
        self.staged.update({fid: files[fid].path for fid in outcome.committed})
        self.vanished += outcome.vanished
        self.changed += outcome.changed
        self.retries += outcome.retries
        self.commit_seconds += time.perf_counter() - t0
        self._record_valid(outcome.committed, outcome.version)
        if outcome.vanished:
            log.warning("write %s: fragments %s no longer exist (compacted or deleted); their rows were not "
                        "committed", plan.job_id, outcome.vanished)
        committed_rows = sum(self.rows[f] for f in self.committed)
        update_record(self.store, plan.job_id, rows_ready=self.ready, rows_committed=committed_rows,
                      version=self.version)
        log.info("commit %s: version %d, %s (%d of %s) committed so far", plan.job_id, self.version,
                 counted(len(self.committed), "fragment"), committed_rows, counted(self.total, "row"))

    def _record_valid(self, committed: list[int], version: int) -> None:
        """Fragments this commit made valid in every row go to the job's ledger, as of the commit's own version."""
        complete = [fid for fid in committed if fid in self.complete]
        if not complete:
            return
        import lance

        plan = self.plan
        metas = {f.fragment_id: f.metadata for f in lance.dataset(
            plan.table_uri, version=version, storage_options=self.storage_options).get_fragments()}
        record_valid(self.store, plan.job_prefix, {
            fid: validity_signature(self.entries[fid].src_files, metas[fid], plan.output_field_ids)
            for fid in complete if fid in metas})

    def summary(self, seconds: float) -> WriteResult:
        return WriteResult(job_id=self.plan.job_id, version=self.version, fragments_committed=len(self.committed),
                           rows_committed=sum(self.rows[f] for f in self.committed),
                           fragments_vanished=sorted(self.vanished), commit_retries=self.retries, seconds=seconds)
