"""Verify stage: every planned fragment now holds the file the job staged for it.

Runs on the Airflow worker (no Spark) and fails loudly, naming fragments and row counts, when a
planned row did not end up committed -- the signal a DAG must not miss.  A fragment deleted whole
during the job is reported, not failed: its rows need no value.  One compacted or rewritten away
is a failure: its rows now live elsewhere without their value, and the next run computes them there.
"""

from __future__ import annotations

import logging
from typing import Any

from geneva_provider.core.checkpoint import fragment_key
from geneva_provider.core.errors import VerificationError
from geneva_provider.core.models import Action, FragmentCheckpoint, FragmentPlan, VerifyResult
from geneva_provider.pipeline.planning import load_plan

log = logging.getLogger(__name__)

_VERIFIED = (Action.COMPUTE, Action.REUSE)


def verify(plan_uri: str, storage_options: dict[str, str] | None = None) -> VerifyResult:
    """Checks the job's result in the latest table version; raises VerificationError naming what is missing."""
    import lance

    plan, store = load_plan(plan_uri, storage_options)
    ds = lance.dataset(plan.table_uri, storage_options=storage_options)
    live = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    problems, deleted, rows_ok, frags_ok = [], [], 0, 0
    for entry in plan.fragments:
        if entry.action not in _VERIFIED:
            continue
        meta = live.get(entry.id)
        if meta is None:
            if _rows_gone(ds, entry):
                deleted.append(entry.id)
            else:
                problems.append(f"fragment {entry.id} ({entry.rows} rows) no longer exists: it was compacted or "
                                "rewritten during the job, so its rows were not committed")
            continue
        key = fragment_key(plan.job_prefix, entry.id)
        staged = store.get_model(key, FragmentCheckpoint).file.path if key in store else None
        if staged is None or staged not in {df.path for df in meta.files}:
            problems.append(f"fragment {entry.id}: {entry.rows} rows lack their computed value")
            continue
        rows_ok += entry.rows
        frags_ok += 1
    if problems:
        raise VerificationError(
            f"job {plan.job_id} ({plan.label()}) is incomplete at version {ds.version}: " + "; ".join(problems)
            + ". Rerun the job to finish it.")
    if deleted:
        log.warning("verify %s: fragments %s were deleted during the job (their rows need no value)",
                    plan.job_id, deleted)
    log.info("verify %s: %d fragments, %d rows of %s committed at version %d",
             plan.job_id, frags_ok, rows_ok, plan.label(), ds.version)
    return VerifyResult(job_id=plan.job_id, table=plan.table, column=plan.column, version=ds.version,
                        fragments_verified=frags_ok, rows_verified=rows_ok, fragments_deleted=deleted)


def _rows_gone(ds: Any, entry: FragmentPlan) -> bool:
    """True when none of a vanished fragment's rows is live any more (it was deleted, not moved)."""
    if entry.row_ids is None:  # no stable row ids: its rows cannot be followed, so they may have moved
        return False
    lo, hi = entry.row_ids
    return ds.count_rows(filter=f"_rowid >= {lo} AND _rowid <= {hi}") == 0
