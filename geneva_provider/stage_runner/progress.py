"""Progress lines of a running Spark stage in a log (:mod:`geneva_provider.pipeline.stages.progress_lines`), from
its job record -- in an Airflow task's log, the stand-alone stage runner's, a service's.

An apply stage's lines count the rows its running UDF calls computed since their last checkpoint too (their
markers' heartbeats, :func:`~geneva_provider.pipeline.spark.worker_deaths.rows_in_flight`): the rows computed
within about a second, and a rate and ETA over the last seconds, not only what the checkpoints hold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from geneva_provider.pipeline.stages.progress_lines import PROGRESS_SECONDS, ProgressLines


class ProgressLogger:
    """Logs a running job's progress from its record while the stage runs: rows, rows/s, not Spark task counts.

    A line every ``seconds`` when rows moved, one now and then when none did, and a last one as the stage
    ends.  ``note`` says what is wrong while the record cannot show it (a Spark Connect server the task
    cannot reach): the line then carries it, as a warning, instead of looking healthy.
    """

    def __init__(self, store: Any, job_id: str, stage: str, log: Any, seconds: float = PROGRESS_SECONDS,
                 note: Callable[[], str | None] | None = None) -> None:
        self.store, self.job_id, self.stage, self.log, self.seconds = store, job_id, stage, log, seconds
        self.note = note
        self._lines: ProgressLines | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"geneva-progress-{job_id}")

    def __enter__(self) -> ProgressLogger:
        self._lines = ProgressLines(self.job_id, self.stage, begin=self._record())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._log(final=True)

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            self._log()

    def _record(self) -> Any:
        from geneva_provider.pipeline.stages.job_records import read_record

        return read_record(self.store, self.job_id)

    def _in_flight(self, record: Any) -> int:
        from geneva_provider.core.contracts.kinds import Stage
        from geneva_provider.pipeline.spark.worker_deaths import rows_in_flight

        if self.stage != Stage.APPLY or record.stage != Stage.APPLY:
            return 0
        return rows_in_flight(self.store, self.job_id)

    def _log(self, final: bool = False) -> None:
        record = self._record()
        if record is None or self._lines is None:
            return
        note = self.note() if self.note is not None else None
        line = self._lines.look(record, note, final=final, in_flight=0 if final else self._in_flight(record))
        if line is not None:
            (self.log.warning if note else self.log.info)("%s", line)
