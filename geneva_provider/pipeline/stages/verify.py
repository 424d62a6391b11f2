"""Verify stage, for every job kind: the committed result checked in the latest table version (no Spark).

It fails loudly, naming what is missing, when a planned result did not end up committed -- the
signal a DAG must not miss.  What is checked is the job kind's; a job that had nothing to do
verifies as up to date, with no record.
"""

from __future__ import annotations

import logging
from typing import Any

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.contracts.models import PlanSummary, VerifyResult
from geneva_provider.core.store.layout import JobStore
from geneva_provider.pipeline.stages.job_records import finish_record, job_stage
from geneva_provider.pipeline.stages.kinds import job_kind
from geneva_provider.pipeline.stages.planning import load_plan

log = logging.getLogger(__name__)


def verify(plan: str | PlanSummary | dict[str, Any], storage_options: dict[str, str] | None = None) -> VerifyResult:
    """Checks the job's result in the latest table version; raises VerificationError naming what is missing.

    ``plan`` is the plan's URI or the plan stage's summary; a job that had nothing to do verifies as
    up to date, with no record.
    """
    if not isinstance(plan, str | PlanSummary):
        plan = PlanSummary.from_xcom(plan)  # the summary as XCom carries it, or InvalidArgumentError
    if isinstance(plan, PlanSummary) and plan.nothing_to_do:
        log.info("verify %s: %s was up to date at version %d", plan.job_id, plan.table, plan.read_version)
        return VerifyResult(job_id=plan.job_id, table=plan.table, column=plan.column, version=plan.read_version,
                            fragments_verified=plan.fragments_done, rows_verified=plan.rows_reused)
    uri = plan.plan_uri if isinstance(plan, PlanSummary) else plan
    doc, store = load_plan(uri, storage_options)
    if doc.nothing_to_do:
        return verify(doc.summary(uri), storage_options)
    with job_stage(store, doc.job_id, Stage.VERIFY):
        result = job_kind(doc.kind).verify(doc, store, storage_options)
    record = finish_record(store, doc.job_id, version=result.version)
    committed = JobStore(store).committed(doc.job_id)
    result = result.model_copy(update={"written": committed.result if committed is not None else None})
    return result.model_copy(update={"rows_failed": record.rows_failed}) if record is not None else result
