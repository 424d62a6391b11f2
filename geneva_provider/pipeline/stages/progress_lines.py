"""The progress lines of a running Spark stage, read from its job record: rows and rows/s, not Spark task counts.

One format and one cadence wherever a stage is waited for: in its task (the operators' progress thread) and
in the triggerer (a deferred stage).  A line when rows moved since the last one, at most once per interval;
while nothing moves, a line every :data:`HEARTBEATS` intervals, so a quiet log still says the stage is alive.
"""

from __future__ import annotations

import time
from typing import Any

from geneva_provider.core.wording import skipped_rows
from geneva_provider.pipeline.stages.registry import spark_stage

PROGRESS_SECONDS = 5.0  # the default interval between two looks (and at most one line per look)
HEARTBEATS = 6          # with nothing moving, one line every this many looks (30 s by default)


class ProgressLines:
    """Decides whether a look at a job record makes a line, and writes it (``rate`` counts this stage's rows).

    ``begin`` (the record as the wait began) sets the rows done before it: a retry that resumes from
    checkpoints does not count them in its rate.
    """

    def __init__(self, job_id: str, stage: str, begin: Any | None = None) -> None:
        self.job_id, self.stage = job_id, stage
        self._t0 = time.monotonic()
        self._first = self._done(begin) if begin is not None else None
        self._last: tuple[Any, ...] | None = None  # what the last line said
        self._quiet = 0  # looks since the last line

    def look(self, record: Any, note: str | None = None, *, final: bool = False) -> str | None:
        """The line for this look at ``record`` (None: nothing to say yet); ``final`` always makes one."""
        if self._first is None:
            self._first = self._done(record)
        state = (record.status, record.rows_checkpointed, record.rows_ready, record.rows_committed,
                 getattr(record, "segments_done", None), note)
        self._quiet += 1
        if not final and state == self._last and self._quiet < HEARTBEATS:
            return None
        self._last, self._quiet = state, 0
        return self.line(record, note)

    def line(self, record: Any, note: str | None = None) -> str:
        """``<stage> <job>: <status>; <rows> (<rate> rows/s)``; ``note`` says what is wrong while the record cannot."""
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = (self._done(record) - (self._first or 0)) / elapsed
        status = f"{record.status}, but {note}" if note else str(record.status)
        if spark_stage(self.stage).builds_segments:  # its rows are indexed segment by segment, committed at the end
            return (f"{self.stage} {self.job_id}: {status}; {record.segments_done or 0} of "
                    f"{record.segments_planned or 0} segments built ({record.rows_checkpointed} of "
                    f"{record.rows_planned} rows; {rate:.0f} rows/s)")
        if spark_stage(self.stage).rewrites:  # no checkpoints: its rows land at its one commit
            return (f"{self.stage} {self.job_id}: {status}; {record.rows_committed} of {record.rows_planned} rows "
                    f"rewritten and committed ({rate:.0f} rows/s)")
        skipped = skipped_rows(record.rows_failed)
        return (f"{self.stage} {self.job_id}: {status}; {record.rows_checkpointed} of {record.rows_planned} rows "
                f"checkpointed, {record.rows_ready} ready to commit, {record.rows_committed} committed"
                f"{f', {skipped}' if skipped else ''} ({rate:.0f} rows/s)")

    def _done(self, record: Any) -> int:
        """The rows this stage moves forward: its registry entry names the counter (apply's checkpointed rows...)."""
        return int(getattr(record, spark_stage(self.stage).progress_counter))
