"""Job records: every backfill, refresh and compaction leaves its status and progress in its store.

A record is a :class:`~geneva_provider.core.models.JobRecord` document keyed ``job-<id>`` in the
table's checkpoint store, written by the stages as they run -- so Airflow tasks, spark-submit
programs and notebooks all update the same record, and ``db.list_jobs()`` reads it back from any
process.  Writes replace the whole document (atomic on local disks and object stores); a record
can never stop a job: a failure to write one is logged and ignored.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from geneva_provider.core.checkpoint import CheckpointStore
from geneva_provider.core.models import JobRecord, JobStatus

log = logging.getLogger(__name__)

JOB_PREFIX = "job-"
_LOCK = threading.Lock()  # the driver's progress thread and its stage share a record


def job_key(job_id: str) -> str:
    return f"{JOB_PREFIX}{job_id}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def start_record(store: CheckpointStore, record: JobRecord) -> None:
    """Writes a new job's first record."""
    _write(store, record)


def read_record(store: CheckpointStore, job_id: str) -> JobRecord | None:
    key = job_key(job_id)
    try:
        return store.get_model(key, JobRecord) if key in store else None
    except (ValueError, KeyError, OSError):
        return None


def read_records(store: CheckpointStore) -> list[JobRecord]:
    """Every job record in ``store`` (unreadable ones are left out)."""
    records = []
    for key in store.list_keys(JOB_PREFIX):
        try:
            records.append(store.get_model(key, JobRecord))
        except (ValueError, KeyError, OSError):
            continue
    return records


def update_record(store: CheckpointStore, job_id: str, **changes: Any) -> JobRecord | None:
    """Applies ``changes`` to the job's record (nothing when the job has none)."""
    with _LOCK:
        record = read_record(store, job_id)
        if record is None:
            return None
        record = record.model_copy(update={**changes, "updated_at": _now()})
        _write(store, record)
        return record


@contextmanager
def job_stage(store: CheckpointStore, job_id: str, stage: str) -> Iterator[None]:
    """Marks the job RUNNING in ``stage``; a stage that raises marks it FAILED with the error."""
    update_record(store, job_id, status=JobStatus.RUNNING, stage=stage, error=None)
    try:
        yield
    except BaseException as exc:
        update_record(store, job_id, status=JobStatus.FAILED, finished_at=_now(),
                      error=f"{stage}: {type(exc).__name__}: {exc}"[:2_000])
        raise


def finish_record(store: CheckpointStore, job_id: str, **changes: Any) -> None:
    update_record(store, job_id, status=JobStatus.DONE, stage="done", finished_at=_now(), error=None, **changes)


def _write(store: CheckpointStore, record: JobRecord) -> None:
    try:
        store.put_model(job_key(record.job_id), record)
    except (OSError, ValueError) as exc:  # a record must never fail the job it describes
        log.warning("job %s: could not write its record: %s", record.job_id, exc)
