"""Jobs for notebook users: run in the background with a handle, or in the foreground with a progress bar."""

from __future__ import annotations

import datetime as dt
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal, TextIO

from geneva_provider.core.contracts.kinds import JobKind, Stage
from geneva_provider.core.contracts.models import BackfillResult, JobRecord, JobStatus, PlanSummary
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.pipeline.jobs import JobControl
from geneva_provider.pipeline.stages.job_records import read_record

BAR_WIDTH = 30
POLL_SECONDS = 0.5


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class JobHandle:
    """A backfill or refresh running in a background thread: ``status()``, ``result()``, ``cancel()``."""

    def __init__(self, store: CheckpointStore, label: str, *,
                 kind: Literal[JobKind.BACKFILL, JobKind.REFRESH] = JobKind.BACKFILL, table: str = "",
                 column: str | None = None) -> None:
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

    def status(self) -> JobRecord:
        """The job's record (status, stage, rows checkpointed / ready / committed), at every moment.

        Before the plan exists it is a PENDING record with no job id yet (FAILED, with the error, if
        planning failed); a job with nothing to do stores no record, and its status is DONE.
        """
        summary = self.control.summary
        error = self._error()
        if summary is None:
            return self._record("", JobStatus.FAILED if error else JobStatus.PENDING, Stage.PLAN, error=error)
        record = read_record(self.store, summary.job_id)
        if record is not None:
            return record
        if summary.nothing_to_do:
            return self._record(summary.job_id, JobStatus.DONE, "done", read_version=summary.read_version,
                                version=summary.read_version)
        return self._record(summary.job_id, JobStatus.FAILED if error else JobStatus.PENDING, Stage.PLAN, error=error,
                            read_version=summary.read_version, rows_planned=summary.rows_to_compute)

    def _error(self) -> str | None:
        """The job's error once it failed (None while it runs or after it succeeded)."""
        if not self.future.done() or self.future.exception() is None:
            return None
        exc = self.future.exception()
        return f"{type(exc).__name__}: {exc}"

    def _record(self, job_id: str, status: JobStatus, stage: Stage | Literal["done"], **fields: Any) -> JobRecord:
        """A record built here for a moment the store holds none of (before the plan, or nothing to do)."""
        now = _now()
        ended = now if status in (JobStatus.DONE, JobStatus.FAILED) else None
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


class ProgressBar:
    """Draws a job's progress from its record on a terminal: rows checkpointed, ready and committed."""

    def __init__(self, store: CheckpointStore, label: str, stream: TextIO | None = None) -> None:
        self.store, self.label = store, label
        self.stream = stream or sys.stderr
        self.job_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="geneva-progress")

    def attach(self, summary: PlanSummary) -> None:
        if summary.nothing_to_do:
            return
        self.job_id = summary.job_id
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            self._draw(final=True)

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._draw()

    def _draw(self, final: bool = False) -> None:
        record = read_record(self.store, self.job_id) if self.job_id else None
        if record is None:
            return
        total = max(record.rows_planned, 1)
        done = record.rows_checkpointed
        filled = int(BAR_WIDTH * min(done / total, 1.0))
        line = (f"\r{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done:,}/{record.rows_planned:,} rows "
                f"checkpointed, {record.rows_ready:,} ready, {record.rows_committed:,} committed ({record.stage})")
        self.stream.write(line + ("\n" if final else ""))
        self.stream.flush()


def with_progress(store: CheckpointStore, label: str, run: Callable[[JobControl], BackfillResult],
                  progress: bool | None) -> BackfillResult:
    """Runs a job in the foreground, with a progress bar when asked (default: when stderr is a terminal)."""
    show = progress if progress is not None else sys.stderr.isatty()
    if not show:
        return run(JobControl())
    bar = ProgressBar(store, label)
    try:
        return run(JobControl(on_plan=bar.attach))
    finally:
        bar.close()
