"""Job records: every backfill, refresh and compaction leaves its status and progress in its store.

A record is a :class:`~geneva_provider.core.contracts.models.JobRecord` document (a ``JobRecordKey``) in the
table's checkpoint store, written by the stages as they run -- so Airflow tasks, spark-submit
programs and notebooks all update the same record, and ``db.list_jobs()`` reads it back from any
process.  Writes replace the whole document (atomic on local disks and object stores); a record
can never stop a job: a failure to write one is logged and ignored.

A job is live while its record is PENDING or RUNNING and its lease has not lapsed: while a stage
runs, a daemon thread refreshes ``heartbeat_at`` every tenth of :data:`LEASE_SECONDS`; the plan and
the end of each stage leave the longer :data:`GAP_LEASE_SECONDS`, because in Airflow the next stage
starts later, in another task.  A killed process stops heartbeating, so its record reads ABANDONED
(with its last stage and counts) once the lease lapses, and it no longer holds its fragments.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from geneva_provider.core.contracts.models import JobRecord, JobStatus
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import JobStore

log = logging.getLogger(__name__)

_LOCK = threading.Lock()  # the driver's progress thread and its stage share a record

LEASE_SECONDS = 300.0       # a running stage heartbeats every tenth of this; silent longer, its process is gone
GAP_LEASE_SECONDS = 1800.0  # after the plan and between stages: the next stage's task may start much later
LIVE_JOB_HOURS = 24.0       # records without a heartbeat (written by older versions) and plans without a record
LEASE_ENV = "GENEVA_JOB_LEASE_SECONDS"          # overrides LEASE_SECONDS (tests, very slow clusters)
GAP_LEASE_ENV = "GENEVA_JOB_GAP_LEASE_SECONDS"  # overrides GAP_LEASE_SECONDS
CANCEL_POLL_SECONDS = 1.0   # how often a running in-process job looks for a cancel request from another process

_ACTIVE = (JobStatus.PENDING, JobStatus.RUNNING)  # a job that may still commit
_beating: dict[str, int] = {}  # job id -> heartbeats running in this process (a whole in-process job, its stage)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def lease_seconds() -> float:
    """How long a running stage may go without a heartbeat before its job reads ABANDONED."""
    return _seconds(LEASE_ENV, LEASE_SECONDS)


def gap_lease_seconds() -> float:
    """How long a job stays live after its plan or a stage ended, waiting for its next stage."""
    return _seconds(GAP_LEASE_ENV, GAP_LEASE_SECONDS)


def _seconds(env: str, default: float) -> float:
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InvalidArgumentError(f"environment variable {env} must be a positive number of seconds, got {raw!r}")
    return value


def check_leases() -> None:
    """Raises InvalidArgumentError for a lease setting that is not a positive number (plans call it first)."""
    lease_seconds()
    gap_lease_seconds()


def start_record(store: CheckpointStore, record: JobRecord) -> None:
    """Writes a new job's first record (live until its first stage starts, or the gap lease lapses)."""
    _write(store, record.model_copy(update={"heartbeat_at": _now(), "lease_seconds": gap_lease_seconds()}))


def expired(record: JobRecord, now: dt.datetime | None = None) -> bool:
    """True when the process running the job has been silent longer than its lease.

    A record without a heartbeat (written by an older version) is judged by its last update and the
    old day-long rule.
    """
    now = now or dt.datetime.now(dt.UTC)
    if record.heartbeat_at is None:
        return dt.datetime.fromisoformat(record.updated_at) + dt.timedelta(hours=LIVE_JOB_HOURS) < now
    lease = record.lease_seconds if record.lease_seconds is not None else lease_seconds()
    return dt.datetime.fromisoformat(record.heartbeat_at) + dt.timedelta(seconds=lease) < now


def is_live(record: JobRecord, now: dt.datetime | None = None) -> bool:
    """PENDING or RUNNING, and heartbeating: the job may still commit what it planned."""
    return record.status in _ACTIVE and not expired(record, now)


def plan_live(record: JobRecord | None, created_at: str, committed: bool, now: dt.datetime | None = None) -> bool:
    """Whether a stored plan's job may still commit: its record says so, or -- a plan without a record,
    written by an older version -- its commits are not done and it is less than a day old."""
    now = now or dt.datetime.now(dt.UTC)
    if record is not None:
        return is_live(record, now)
    return not committed and dt.datetime.fromisoformat(created_at) >= now - dt.timedelta(hours=LIVE_JOB_HOURS)


def observed(record: JobRecord, now: dt.datetime | None = None) -> JobRecord:
    """The record as it stands: a PENDING or RUNNING one whose lease lapsed reads ABANDONED.

    Its stage and counts are kept (they say how far it got); the error says since when it is silent.
    """
    if record.status not in _ACTIVE or not expired(record, now):
        return record
    since = record.heartbeat_at or record.updated_at
    return record.model_copy(update={"status": JobStatus.ABANDONED, "error": record.error or (
        f"abandoned in stage {record.stage}: no heartbeat since {since} (its process stopped); "
        "the next run of the same job takes it over")})


def _read(store: CheckpointStore, job_id: str) -> JobRecord | None:
    jobs = JobStore(store)
    try:
        return jobs.record(job_id) if jobs.has_record(job_id) else None
    except (ValueError, KeyError, OSError):
        return None


def read_record(store: CheckpointStore, job_id: str) -> JobRecord | None:
    """The job's record as it stands now (ABANDONED when its process stopped heartbeating)."""
    record = _read(store, job_id)
    return observed(record) if record is not None else None


def find_record(store: CheckpointStore, job_id: str) -> JobRecord | None:
    """The job's record; for a job that had nothing to do -- its plan is stored, it has no record -- a DONE record
    made from the plan.

    Such a job's id is shown like any other (its result, its handle, its log line, an Airflow plan's XCom), so
    looking it up must find it; it is not listed among the jobs that did work (``list_jobs``).
    """
    from geneva_provider.core.contracts.models import plan_from_json
    from geneva_provider.core.store.layout import PlanKey

    record = read_record(store, job_id)
    if record is not None:
        return record
    key = PlanKey(job_id).key()
    try:
        if key not in store:
            return None
        plan = plan_from_json(JobStore(store).plan_text(job_id), key)
    except (ValueError, KeyError, OSError):  # unreadable, or removed meanwhile: not found
        return None
    if not plan.nothing_to_do:  # a job with work whose record is gone (cleaned up): not found
        return None
    return JobRecord(job_id=job_id, kind=plan.kind, table=plan.table, column=getattr(plan, "column", None),
                     status=JobStatus.DONE, stage="done", created_at=plan.created_at, updated_at=plan.created_at,
                     finished_at=plan.created_at, read_version=plan.read_version, version=plan.read_version)


def read_records(store: CheckpointStore) -> list[JobRecord]:
    """Every job record in ``store``, as it stands now (unreadable ones are left out)."""
    records = []
    now = dt.datetime.now(dt.UTC)
    jobs = JobStore(store)
    for job_id in jobs.record_ids():
        try:
            records.append(observed(jobs.record(job_id), now))
        except (ValueError, KeyError, OSError):
            continue
    return records


def update_record(store: CheckpointStore, job_id: str, **changes: Any) -> JobRecord | None:
    """Applies ``changes`` to the job's record (nothing when the job has none)."""
    with _LOCK:
        record = _read(store, job_id)
        if record is None:
            return None
        record = record.model_copy(update={**changes, "updated_at": _now()})
        _write(store, record)
        return record


def _beat(store: CheckpointStore, job_id: str, lease: float) -> None:
    """Refreshes the heartbeat of a PENDING or RUNNING record (one that ended or was taken over stays so)."""
    with _LOCK:
        record = _read(store, job_id)
        if record is not None and record.status in _ACTIVE:
            _write(store, record.model_copy(update={"heartbeat_at": _now(), "lease_seconds": lease}))


@contextmanager
def keep_alive(store: CheckpointStore, job_id: str, *, beaten: bool = False) -> Iterator[None]:
    """Heartbeats the job's record from a daemon thread while the block runs.

    When the last heartbeat of the job in this process ends, the record gets the gap lease: the next
    stage may run later, in another process (an Airflow task), and the job stays live till then.
    ``beaten``: the caller has just written the first heartbeat (:func:`heartbeat`) with a change of its own.
    """
    with _LOCK:
        _beating[job_id] = _beating.get(job_id, 0) + 1
    lease = lease_seconds()
    if not beaten:
        _beat(store, job_id, lease)
    try:
        with _every(lease / 10, f"geneva-heartbeat-{job_id}", lambda: _beat(store, job_id, lease),
                    f"job {job_id}: could not write its heartbeat"):
            yield
    finally:
        with _LOCK:
            _beating[job_id] -= 1
            last = not _beating[job_id]
            if last:
                del _beating[job_id]
        _beat(store, job_id, gap_lease_seconds() if last else lease)


def heartbeat() -> dict[str, Any]:
    """A heartbeat's fields, to write with another change of the record in one write (see ``keep_alive``)."""
    return {"heartbeat_at": _now(), "lease_seconds": lease_seconds()}


@contextmanager
def job_stage(store: CheckpointStore, job_id: str, stage: str, **changes: Any) -> Iterator[None]:
    """Marks the job RUNNING in ``stage`` (with ``changes``) and heartbeats it; a stage that raises marks it FAILED
    with the error (CANCELLED when it was stopped on request: a JobCancelledError).

    The RUNNING mark carries the first heartbeat: one read and one write of the record, not two of each.
    A FAILED or CANCELLED record holds nothing: a compaction may rewrite the job's fragments at once.
    """
    from geneva_provider.core.errors import JobCancelledError

    update_record(store, job_id, status=JobStatus.RUNNING, stage=stage, error=None, **changes, **heartbeat())
    try:
        with keep_alive(store, job_id, beaten=True):
            yield
    except BaseException as exc:
        update_record(store, job_id, status=JobStatus.CANCELLED if isinstance(exc, JobCancelledError)
                      else JobStatus.FAILED, finished_at=_now(), error=f"{stage}: {type(exc).__name__}: {exc}"[:2_000])
        raise


def take_over(store: CheckpointStore, record: JobRecord) -> list[JobRecord]:
    """Marks ABANDONED for good the silent jobs of the same kind and column (or view, or table) as ``record``'s.

    Called by a new plan: its job takes over what they left (their checkpoints are its to reuse).
    Returns the records taken over.
    """
    taken = []
    now = dt.datetime.now(dt.UTC)
    jobs = JobStore(store)
    for job_id in jobs.record_ids():
        try:
            old = jobs.record(job_id)
        except (ValueError, KeyError, OSError):
            continue
        if (old.job_id == record.job_id or (old.kind, old.table, old.column) != (record.kind, record.table,
                                                                                 record.column)
                or old.status not in _ACTIVE or not expired(old, now)):
            continue
        gone = observed(old, now)
        done = update_record(store, old.job_id, status=JobStatus.ABANDONED, taken_over_by=record.job_id,
                             finished_at=old.heartbeat_at or old.updated_at, error=gone.error)
        if done is None:
            continue
        taken.append(done)
        log.warning("job %s (%s of table '%s'%s) stopped heartbeating at %s in stage %s (rows planned %d, "
                    "checkpointed %d, committed %d): marked ABANDONED; job %s takes it over", old.job_id, old.kind,
                    old.table, f", column '{old.column}'" if old.column else "", old.heartbeat_at or old.updated_at,
                    old.stage, old.rows_planned, old.rows_checkpointed, old.rows_committed, record.job_id)
    return taken


def finish_record(store: CheckpointStore, job_id: str, **changes: Any) -> JobRecord | None:
    """Marks the job DONE; its record as it now stands (None when it has none)."""
    return update_record(store, job_id, status=JobStatus.DONE, stage="done", finished_at=_now(), error=None, **changes)


def _write(store: CheckpointStore, record: JobRecord) -> None:
    try:
        JobStore(store).put_record(record)
    except (OSError, ValueError) as exc:  # a record must never fail the job it describes
        log.warning("job %s: could not write its record: %s", record.job_id, exc)


def request_cancel(store: CheckpointStore, job_id: str) -> JobRecord:
    """Asks job ``job_id`` to stop, from any process: the job, watching its store while it runs
    (:func:`watch_cancel`), cancels its tasks and records itself CANCELLED.

    JobNotFoundError when the store holds no record of it; InvalidArgumentError when it is no longer live
    (done, failed, cancelled or abandoned: nothing is running to cancel).
    """
    from geneva_provider.core.errors import JobNotFoundError

    record = find_record(store, job_id)
    if record is None:
        raise JobNotFoundError(f"no job {job_id!r} in this table's store")
    if not is_live(record):
        raise InvalidArgumentError(f"job {job_id} is {record.status}, not running: nothing to cancel")
    JobStore(store).request_cancel(job_id, _now())
    return record


@contextmanager
def watch_cancel(store: CheckpointStore, job_id: str, cancel: Callable[[], None],
                 poll: float = CANCEL_POLL_SECONDS) -> Iterator[None]:
    """Calls ``cancel`` once, from a daemon thread, when a cancel request for the job appears (:func:`request_cancel`)
    while the block runs."""
    jobs = JobStore(store)

    def look() -> bool:
        if not jobs.cancel_requested(job_id):
            return False
        log.info("job %s: cancel requested", job_id)
        cancel()
        return True

    with _every(poll, f"geneva-cancel-watch-{job_id}", look, f"job {job_id}: could not look for a cancel request"):
        yield


@contextmanager
def _every(seconds: float, name: str, step: Callable[[], bool | None], failed: str) -> Iterator[None]:
    """Runs ``step`` every ``seconds`` in a daemon thread while the block runs, until it returns True.  What it
    raises is logged (``failed``: what could not be done), never raised: a job's helper never stops the job."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(seconds):
            try:
                if step():
                    return
            except Exception as exc:  # noqa: BLE001 - logged; the job goes on
                log.warning("%s: %s", failed, exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
