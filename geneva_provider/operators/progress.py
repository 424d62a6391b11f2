"""Progress lines of a running Spark stage, read from its job record: rows and rows/s, not Spark task counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.pipeline.stages.registry import spark_stage

PROGRESS_SECONDS = 10.0


class ProgressLogger:
    """Logs a running job's progress from its record at a steady cadence: rows, rows/s, not Spark task counts.

    ``note`` says what is wrong while the record cannot show it (a Spark Connect server the task cannot
    reach): the line then carries it, as a warning, instead of looking healthy.
    """

    def __init__(self, store: Any, job_id: str, stage: str, log: Any, seconds: float = PROGRESS_SECONDS,
                 note: Callable[[], str | None] | None = None) -> None:
        self.store, self.job_id, self.stage, self.log, self.seconds = store, job_id, stage, log, seconds
        self.note = note
        self._t0 = time.monotonic()
        self._first: int | None = None  # rows done when the stage began (a retry resumes), read on entry
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"geneva-progress-{job_id}")

    def __enter__(self) -> ProgressLogger:
        from geneva_provider.pipeline.stages.job_records import read_record

        record = read_record(self.store, self.job_id)
        self._first = self._done(record) if record is not None else 0  # the rate counts this stage's rows only
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._log()

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            self._log()

    def _log(self) -> None:
        from geneva_provider.pipeline.stages.job_records import read_record

        record = read_record(self.store, self.job_id)
        if record is None:
            return
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = (self._done(record) - (self._first or 0)) / elapsed
        note = self.note() if self.note is not None else None
        status = f"{record.status}, but {note}" if note else record.status
        say = self.log.warning if note else self.log.info
        if JobKind(record.kind).rewrites:  # a rewrite: no checkpoints, its rows land at its one commit
            say("%s %s: %s; %d of %d rows rewritten and committed (%.0f rows/s)", self.stage,
                self.job_id, status, record.rows_committed, record.rows_planned, rate)
            return
        say("%s %s: %s; %d of %d rows checkpointed, %d ready to commit, %d committed (%.0f rows/s)",
            self.stage, self.job_id, status, record.rows_checkpointed, record.rows_planned,
            record.rows_ready, record.rows_committed, rate)

    def _done(self, record: Any) -> int:
        """The rows this stage moves forward: its registry entry names the counter (apply's checkpointed rows...)."""
        return getattr(record, spark_stage(self.stage).progress_counter)
