"""A request whose table has not changed since it found nothing to do is answered again without opening the table.

An hourly backfill DAG over a table that took no new rows plans a no-op every hour.  Planning it opens the table
with pylance -- whose ``pyarrow.dataset`` imports pandas -- and the pipeline's planning modules: ~0.5 s of imports
in the plan task (issue 44: a no-op DAG run's tasks, 1 s in all, of which Airflow's own five tasks take ~0.3 to
0.6 s).  But a plan is a function of its table's state and of the request: the UDF, its version and its inputs are
in the table's schema; the rows to compute, in its fragments; ``where`` and the options, in the request.  So when a
request found its table up to date at a state (:mod:`geneva_provider.core.table_state`: the newest manifest, which
every commit replaces), the same request at the same state is up to date again: its no-op plan document is stored
again under a new job id (every stage after it, ``describe_job`` and the job link take that id as before) and its
summary returned, without ``import lance``.

Only requests whose plan reads no table but their own (a backfill: a view's refresh reads its source too, an index
build its index), on a local disk, and not pinned to a version; anything else plans as usual.  The record is kept
in the table's checkpoint store (``uptodate-<md5(request)>``); clean-up removes it once the table has moved on.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from functools import singledispatch
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.operations import BackfillColumn, Operation
from geneva_provider.core.store.layout import JobStore, md5_hex, new_job_id
from geneva_provider.core.table_state import PlanOrigin, TableState, UpToDate, local_table_state

if TYPE_CHECKING:
    from collections.abc import Callable

    from geneva_provider.core.catalog import Catalog
    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore

log = logging.getLogger(__name__)


@singledispatch
def own_table(request: Operation) -> str | None:
    """The table whose state alone decides the plan of ``request``; None: its plan reads more (or is pinned)."""
    return None


@own_table.register(BackfillColumn)
def _backfill_table(request: BackfillColumn) -> str | None:
    return request.table if request.read_version is None else None


def request_digest(request: Operation, options: dict[str, Any] | None) -> str:
    """What names a request for its up-to-date record: every field and option that could change its plan."""
    return md5_hex(json.dumps({"request": request.model_dump(mode="json"), "options": options or {}},
                              sort_keys=True, default=str))


def planned_once(catalog: Catalog, request: Operation, options: dict[str, Any] | None,
                 checkpoint_store: CheckpointStore | None, plan: Callable[[], PlanSummary]) -> PlanSummary:
    """The summary of ``plan()`` -- or, for a request found up to date at the table's present state, of a copy of
    that no-op plan under a new job id, without ``plan()`` opening the table."""
    name = own_table(request)
    ref = _ref(catalog, name) if name is not None else None
    if ref is None:
        return plan()
    store = checkpoint_store or ref.checkpoint_store()
    digest = request_digest(request, options)
    before, known = recorded(ref, store, digest)
    if known is not None and known.plan is not None:
        return _again(JobStore(store), known.plan, known.state, ref)
    summary = plan()
    if before is not None and summary.nothing_to_do:
        record(ref, store, digest, before, summary.read_version, JobStore(store).plan_text(summary.job_id))
    elif before is not None:  # its verify task asks again once the job is done (:func:`confirm`)
        JobStore(store).put_origin(summary.job_id, PlanOrigin(
            request=request.model_dump_json(), options=options, digest=digest))
    return summary


def confirm(catalog: Catalog, store: CheckpointStore, job_id: str,
            dry_plan: Callable[[Operation, dict[str, Any] | None], Callable[[], PlanSummary] | None]) -> bool:
    """After job ``job_id`` was verified: its request planned again, dry (``dry_plan(request, options)``: the request's
    dry plan step, if its kind has one), at the table's state now, and recorded when there is nothing left to do --
    so the next plan of it (an hourly DAG's next run) does not open the table.  Returns whether it was recorded.
    A hint for later plans, never a reason to fail the verify task: a failure here is logged and nothing is
    recorded."""
    from geneva_provider.core.contracts.operations import parse_operation

    origin = JobStore(store).origin(job_id)
    if origin is None:
        return False
    try:
        request = parse_operation(origin.request)
        name = own_table(request)
        ref = _ref(catalog, name) if name is not None else None
        before = local_table_state(ref.uri) if ref is not None else None
        step = dry_plan(request, origin.options) if ref is not None and before is not None else None
        if ref is None or before is None or step is None:
            return False
        summary = step()
        if not summary.nothing_to_do:
            log.info("job %s: table '%s' still has %d rows to compute for its request", job_id, ref.name,
                     summary.rows_to_compute)
            return False
        record(ref, store, origin.digest, before, summary.read_version, JobStore(store).plan_text(summary.job_id))
    except Exception as exc:  # noqa: BLE001 - a hint for later plans: never fails the task that asks
        log.warning("job %s: could not check whether its table is now up to date for its request: %s", job_id, exc)
        return False
    return True


def recorded(ref: TableRef, store: CheckpointStore, digest: str) -> tuple[TableState | None, UpToDate | None]:
    """The table's state now (None: not on a local disk), and what the request of ``digest`` found up to date at
    that very state, if it did."""
    before = local_table_state(ref.uri)
    if before is None:
        return None, None
    known = JobStore(store).up_to_date(digest)
    return before, known if known is not None and known.state == before else None


def record(ref: TableRef, store: CheckpointStore, digest: str, before: TableState, read_version: int,
           plan: str | None) -> None:
    """Records that the request of ``digest`` found nothing to do at ``before`` -- the state taken before it
    looked, which it read (``read_version``) and which no commit replaced while it looked; else nothing."""
    if read_version == before.version and local_table_state(ref.uri) == before:
        JobStore(store).put_up_to_date(digest, UpToDate(state=before, plan=plan))


def _ref(catalog: Catalog, name: str) -> TableRef | None:
    """The table's reference; None when it cannot be had (the plan then raises the error naming it)."""
    from geneva_provider.core.errors import GenevaError

    try:
        return catalog.ref(name)
    except (GenevaError, OSError):
        return None


def _again(jobs: JobStore, text: str, state: TableState, ref: TableRef) -> PlanSummary:
    """The no-op plan ``text`` stored again under a new job id; its summary."""
    from geneva_provider.core.contracts.models import plan_from_json

    now = dt.datetime.now(dt.UTC)
    job_id = new_job_id(now)
    plan = plan_from_json(text, f"up-to-date record of table '{ref.name}'")
    plan = plan.model_copy(update={"job_id": job_id, "created_at": now.isoformat()})
    jobs.put_plan(job_id, plan.model_dump_json(exclude_none=True))
    summary = plan.summary(jobs.plan_uri(job_id))
    log.info("plan %s: %s: %s (table unchanged since version %d's manifest: not opened)", job_id, plan.label(),
             summary.describe(), state.version)
    return summary
