"""Checkpoint clean-up: remove what no live job needs and no future job can use.

Decided from the table's state, not from file ages: a batch checkpoint or staged-files record is garbage once
its UDF version or column is gone, its fragment is gone, its fragment's inputs changed (it can never
match again), or its fragment is known valid (the values are committed).  Plans are removed once
finished (the job ended, failed, or went silent past its lease) and older than ``older_than``; so
are the records of jobs that ended longer than ``older_than`` ago (the error store is kept).
Everything of a live job is kept, so a clean-up never breaks a running job.
Staged data files that lose their last checkpoint are left to Lance's ``cleanup_old_versions``,
which removes unreferenced files once they are old enough.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.models import JobStatus, PlanBase, StagedFiles, plan_from_json
from geneva_provider.core.fragments import files_holding, output_files
from geneva_provider.core.refs import TableRef
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import (
    BatchKey,
    CommittedKey,
    JobRecordKey,
    JobStore,
    LedgerKey,
    PlanFamilyKey,
    PlanKey,
    StagedKey,
    UpToDateKey,
    batch_prefix,
    parse_key,
)
from geneva_provider.core.table_state import UpToDate, local_table_state
from geneva_provider.pipeline.stages.job_records import plan_live, read_record, read_records
from geneva_provider.pipeline.stages.kinds import CheckpointFamily, kind_of, table_kind
from geneva_provider.pipeline.stages.planning import load_ledger, validity_signature

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

log = logging.getLogger(__name__)


@dataclass
class CleanupResult:
    """What a clean-up removed, by kind, and what it kept for live jobs."""

    removed: dict[str, int] = field(default_factory=dict)
    kept_for_live_jobs: int = 0

    @property
    def total(self) -> int:
        return sum(self.removed.values())


def cleanup_checkpoints(table: TableRef, store: CheckpointStore, older_than: dt.timedelta) -> CleanupResult:
    """Removes the plans, batch checkpoints, staged-files records and ledgers nothing can use any more."""
    now = dt.datetime.now(dt.UTC)
    older_than = min(older_than, now - dt.datetime.min.replace(tzinfo=dt.UTC))  # nothing is older than the year 1
    keys = {key: parse_key(key) for key in store.list_keys("")}
    result = CleanupResult()
    live: dict[str, list[PlanBase]] = {}  # job prefix -> its live plans (which keep the checkpoints they need)
    plans = {k.job_id: key for key, k in keys.items() if isinstance(k, PlanKey)}
    done = {k.job_id for k in keys.values() if isinstance(k, CommittedKey)}
    stale_plans: set[str] = set()
    for job_id, key in plans.items():
        try:
            plan = plan_from_json(store.get_text(key), key)
        except (ValueError, KeyError, OSError):
            stale_plans.add(job_id)
            continue
        created = dt.datetime.fromisoformat(plan.created_at)
        finished = plan.nothing_to_do or not plan_live(read_record(store, job_id), plan.created_at, job_id in done, now)
        prefix = kind_of(plan).checkpoint_prefix(plan)  # the kind says which checkpoints its plan reads
        if not finished and prefix is not None:
            live.setdefault(prefix, []).append(plan)
        if finished and created < now - older_than:
            stale_plans.add(job_id)
    for key, k in keys.items():
        if isinstance(k, PlanFamilyKey) and k.job_id in stale_plans:
            _remove(store, key, "plans" if isinstance(k, PlanKey) else "plan results", result)
    for record in read_records(store):  # history of finished jobs, kept for older_than
        ended = record.finished_at or record.updated_at
        if record.status in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.ABANDONED) and \
                dt.datetime.fromisoformat(ended) < now - older_than:
            _remove(store, JobRecordKey(record.job_id).key(), "job records", result)

    ds = table.dataset()
    jobs = _current_jobs(ds, table)
    fragments = {f.fragment_id: f for f in ds.get_fragments()}
    ledgers = {prefix: load_ledger(store, prefix) for prefix in jobs}
    current_ledgers = {LedgerKey.of(p) for p in jobs}
    for key, batch in keys.items():
        if isinstance(batch, StagedKey):
            _clean_staged(store, key, batch.job_prefix, jobs, fragments, result)
            continue
        if not isinstance(batch, BatchKey):
            if isinstance(batch, LedgerKey) and batch not in current_ledgers:
                _remove(store, key, "ledgers", result)
            if isinstance(batch, UpToDateKey) and not _current(JobStore(store).up_to_date(batch.digest), table):
                _remove(store, key, "up-to-date records", result)
            continue
        job, fid = batch.job_prefix, batch.frag_id
        if any(kind_of(plan).keeps_checkpoint(plan, batch) for plan in live.get(job, ())):
            result.kept_for_live_jobs += 1
            continue
        spec, frag = jobs.get(job), fragments.get(fid)
        if spec is None or frag is None:
            _remove(store, key, "batch checkpoints", result)
            continue
        valid = ledgers[job].fragments.get(fid)
        if spec.read_ids is not None:
            src_files = files_holding(frag.metadata, spec.read_ids)
            useless = batch_prefix(job, src_files) != batch.prefix or (
                valid == validity_signature(src_files, frag.metadata, spec.out_leaves))
        else:  # a view: its values were committed and found valid since
            outputs = files_holding(frag.metadata, spec.out_leaves)
            useless = valid is not None and bool(outputs) and set(outputs) <= set(valid)
        if useless:
            _remove(store, key, "batch checkpoints", result)
    log.info("checkpoint clean-up of table '%s': removed %s; kept %d keys of live jobs", table.name,
             result.removed or "nothing", result.kept_for_live_jobs)
    return result


def _current(found: UpToDate | None, table: TableRef) -> bool:
    """Whether a request's up-to-date record is of the table's state now (one of an earlier state is never read)."""
    return found is not None and found.state == local_table_state(table.uri)


def _current_jobs(ds: Dataset, table: TableRef) -> dict[str, CheckpointFamily]:
    """The job prefixes the table's current jobs (its UDF columns' backfills, or its view's refresh) would plan with."""
    return table_kind(ds.schema.metadata).checkpoint_families(ds, table)


def _clean_staged(store: CheckpointStore, key: str, job: str, jobs: dict[str, CheckpointFamily],
                  fragments: dict[int, Any], result: CleanupResult) -> None:
    """Removes a staged-files record once none of its files can still be committed.

    A file is committable while its fragment's output files are still those it was merged over; one
    a running job staged and has yet to commit is, so a running job never loses its staged files.
    """
    try:
        record: StagedFiles | None = store.get_model(key, StagedFiles)
    except (KeyError, OSError):
        record = None
    spec = jobs.get(job)
    if spec is not None and record is not None:
        for fid, ckpt in record.files.items():
            frag = fragments.get(fid)
            if frag is None:
                continue
            current = output_files(frag.metadata, spec.out_leaves)
            if ckpt.base_file == current and not (current and ckpt.file.path in current.split(";")):
                return  # still committable
    _remove(store, key, "staged-file records", result)


def _remove(store: CheckpointStore, key: str, kind: str, result: CleanupResult) -> None:
    store.delete(key)
    result.removed[kind] = result.removed.get(kind, 0) + 1
