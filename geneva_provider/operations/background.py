"""A job running in a background thread (a backfill, refresh or index build): ``status()``, ``result()``, ``cancel()``;
the facade's ``*_async`` methods and the front door's ``submit`` hand one out."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from geneva_provider.core.contracts.kinds import JobKind, Stage
from geneva_provider.core.contracts.models import BackfillResult, JobRecord, JobStatus, PlanSummary
from geneva_provider.core.store.checkpoint import CheckpointStore

if TYPE_CHECKING:
    from geneva_provider.pipeline.jobs import JobControl


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class JobHandle:
    """A backfill, refresh or index build running in a background thread: ``status()``, ``result()``, ``cancel()``."""

    def __init__(self, store: CheckpointStore, label: str, *,
                 kind: Literal[JobKind.BACKFILL, JobKind.REFRESH, JobKind.INDEX] = JobKind.BACKFILL, table: str = "",
                 column: str | None = None) -> None:
        from geneva_provider.pipeline.jobs import JobControl  # the pipeline, when a job starts: not to plan one

        self.store = store
        self.label = label
        self.kind, self.table, self.column = kind, table, column
        self.created_at = _now()
        self.control = JobControl()  # it learns the job's plan summary (and id) when planned
        self.future: Future[BackfillResult] = Future()

    def start(self, run: Callable[[JobControl], BackfillResult]) -> JobHandle:
        def target() -> None:
            try:
                self.future.set_result(run(self.control))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever calls result()
                self.future.set_exception(exc)

        self.future.set_running_or_notify_cancel()
        threading.Thread(target=target, name=f"geneva-{self.label}", daemon=True).start()
        return self

    @property
    def job_id(self) -> str | None:
        """The job's id once planned (None before, or when planning failed)."""
        return self.control.summary.job_id if self.control.summary else None

    def wait_for_id(self, poll: float = 0.05) -> str:
        """The job's id as soon as it is planned (the job runs on); its error if it failed before."""
        while self.job_id is None:
            if self.future.done():
                self.future.result()  # raises the error that ended it before the plan
                break
            wait([self.future], timeout=poll)
        if self.job_id is None:
            raise RuntimeError(f"job {self.label} ended without a plan")
        return self.job_id

    def status(self) -> JobRecord:
        """The job's record (status, stage, rows checkpointed / ready / committed), at every moment.

        Before the plan exists it is a PENDING record with no job id yet (FAILED, with the error, if
        planning failed); a job with nothing to do stores no record, and its status is DONE.
        """
        summary = self.control.summary
        error = self._error()
        if summary is None:
            return self._record("", self._failed() if error else JobStatus.PENDING, Stage.PLAN, error=error)
        from geneva_provider.pipeline.stages.job_records import read_record

        record = read_record(self.store, summary.job_id)
        if record is not None:
            return record
        if summary.nothing_to_do:
            return self._record(summary.job_id, JobStatus.DONE, "done", read_version=summary.read_version,
                                version=summary.read_version)
        return self._record(summary.job_id, self._failed() if error else JobStatus.PENDING, Stage.PLAN, error=error,
                            read_version=summary.read_version, rows_planned=summary.rows_to_compute)

    def _failed(self) -> JobStatus:
        """How the job ended, once it raised: CANCELLED when it was stopped on request, else FAILED."""
        from geneva_provider.core.errors import JobCancelledError

        return JobStatus.CANCELLED if isinstance(self.future.exception(), JobCancelledError) else JobStatus.FAILED

    def _error(self) -> str | None:
        """The job's error once it failed (None while it runs or after it succeeded)."""
        if not self.future.done() or self.future.exception() is None:
            return None
        exc = self.future.exception()
        return f"{type(exc).__name__}: {exc}"

    def _record(self, job_id: str, status: JobStatus, stage: Stage | Literal["done"], **fields: Any) -> JobRecord:
        """A record built here for a moment the store holds none of (before the plan, or nothing to do)."""
        now = _now()
        ended = now if status in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED) else None
        return JobRecord(job_id=job_id, kind=self.kind, table=self.table, column=self.column, status=status,
                         stage=stage, created_at=self.created_at, updated_at=now, finished_at=ended, **fields)

    def done(self) -> bool:
        return self.future.done()

    def result(self, timeout: float | None = None) -> BackfillResult:
        """Waits for the job; returns its result or raises its error."""
        return self.future.result(timeout)

    def cancel(self) -> bool:
        """Cancels the job (its Spark jobs, and every stage not started); False if it already finished."""
        if self.future.done():
            return False
        self.control.cancel()
        return True

    def __repr__(self) -> str:
        return f"JobHandle({self.label}, job_id={self.job_id!r}, done={self.done()})"


#: a job's plan step: ``plan(parallelism, airflow_run_id)`` stores the plan and returns its summary
Planner = Callable[[int | None, str | None], PlanSummary]


@dataclass
class PreparedJob:
    """A job checked against its table, not started: ``run(control)`` runs it to its end; ``plan(parallelism,
    airflow_run_id)`` runs only its plan step (what an Airflow plan task does, the stages after it being tasks of
    their own), with the very options ``run`` would plan with."""

    run: Callable[[JobControl], Any]
    plan: Planner
    store: CheckpointStore
    label: str
    kind: Literal[JobKind.BACKFILL, JobKind.REFRESH, JobKind.INDEX]
    table: str
    column: str | None = None
    # Its plan step asked only whether there is anything to do (nothing stored unless there is not, no job
    # started): a job whose plan reads nothing but its own table -- a backfill; None for the others.
    dry_plan: Callable[[], PlanSummary] | None = None
