"""Verify stage: every planned fragment's committed column file is the one the job staged.

Runs on the Airflow worker (no Spark) and fails loudly, naming fragments and row counts, when
a planned row did not end up committed -- the signal a DAG must not miss.
"""

from __future__ import annotations

import logging

from geneva_provider.core.checkpoint import fragment_key
from geneva_provider.core.errors import VerificationError
from geneva_provider.core.fragments import column_file
from geneva_provider.core.models import Action, FragmentCheckpoint, VerifyResult
from geneva_provider.pipeline.planning import load_plan

log = logging.getLogger(__name__)

_VERIFIED = (Action.COMPUTE, Action.REUSE, Action.DONE)


def verify(plan_uri: str, storage_options: dict[str, str] | None = None) -> VerifyResult:
    """Checks the job's result in the latest table version; raises VerificationError naming what is missing."""
    import lance

    plan, store = load_plan(plan_uri, storage_options)
    ds = lance.dataset(plan.table_uri, storage_options=storage_options)
    live = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    problems, rows_ok, frags_ok = [], 0, 0
    for entry in plan.fragments:
        if entry.action not in _VERIFIED:
            continue
        meta = live.get(entry.id)
        if meta is None:
            problems.append(f"fragment {entry.id} ({entry.rows} rows) no longer exists")
            continue
        key = fragment_key(plan.job_prefix, entry.id)
        staged = store.get_model(key, FragmentCheckpoint).file.path if key in store else None
        if staged is None or column_file(meta, plan.output_field_ids) != staged:
            problems.append(f"fragment {entry.id}: {entry.rows} rows lack their computed value")
            continue
        rows_ok += entry.rows
        frags_ok += 1
    if problems:
        raise VerificationError(
            f"job {plan.job_id} ({plan.label()}) is incomplete at version {ds.version}: " + "; ".join(problems)
            + ". Rerun the job to finish it.")
    log.info("verify %s: %d fragments, %d rows of %s committed at version %d",
             plan.job_id, frags_ok, rows_ok, plan.label(), ds.version)
    return VerifyResult(job_id=plan.job_id, table=plan.table, column=plan.column, version=ds.version,
                        fragments_verified=frags_ok, rows_verified=rows_ok)
