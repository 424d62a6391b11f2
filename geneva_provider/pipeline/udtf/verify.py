"""The UDTF kind's verify: the refresh landed, and the view is exact (no chunk twice, none of an unselected parent).

A view that is not is marked so that its next refresh compares it with its whole source
(:mod:`geneva_provider.pipeline.udtf.check` holds the checks).
"""

from __future__ import annotations

import logging

from geneva_provider.core.contracts.models import ExpandPlan, VerifyResult
from geneva_provider.core.errors import VerificationError
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import JobStore
from geneva_provider.core.views.udtf_meta import udtf_view_state
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.udtf.check import check_udtf_view
from geneva_provider.pipeline.udtf.lineage import mark_for_rebuild

log = logging.getLogger(__name__)

def verify_udtf(plan: ExpandPlan, store: CheckpointStore, storage_options: dict[str, str] | None) -> VerifyResult:
    """Checks the refresh landed -- its commit recorded, the view holding the planned source version -- and
    that the view is exact: no (parent, chunk index) pair twice, no rows of a parent the source version does
    not select.  A view that is not is marked so the next refresh compares it with its whole source."""
    import lance

    commit = JobStore(store).committed(plan.job_id)
    if commit is None:
        raise VerificationError(f"job {plan.job_id} ({plan.label()}) is not committed: run its write+commit stage")
    ds = lance.dataset(plan.table_uri, storage_options=storage_options)
    state = udtf_view_state(ds.schema.metadata, plan.table)
    work = plan.udtf
    if state.base_version < work.source_version:
        raise VerificationError(f"job {plan.job_id} ({plan.label()}): the view holds source version "
                                f"{state.base_version}, not {work.source_version}, which the job expanded")
    try:
        source = lance.dataset(work.source_uri, version=state.base_version, storage_options=storage_options)
    except (ValueError, OSError):
        log.warning("verify %s: version %d of source table '%s' was cleaned up: the view's rows are not checked "
                    "against it", plan.job_id, state.base_version, state.spec.base_table)
    else:
        check = check_udtf_view(ds, plan.table, state, source)
        problems = check.problems()
        if problems:
            mark_for_rebuild(ds)
            raise VerificationError(f"job {plan.job_id}: {problems}. The next refresh compares the view with its "
                                    "whole source and repairs it")
    log.info("verify %s: view '%s' holds source version %d at version %d (%s added; no parent's rows twice, "
             "none of a parent the source does not select)", plan.job_id, plan.table, work.source_version,
             ds.version, counted(commit.result.rows_committed, "row"))
    return VerifyResult(job_id=plan.job_id, table=plan.table, column=None, version=ds.version,
                        fragments_verified=commit.result.fragments_committed,
                        rows_verified=commit.result.rows_committed)
