"""The progress lines of a running Spark stage, read from its job record: rows and rows/s, not Spark task counts.

One format and one cadence wherever a stage is waited for: in its task (the operators' progress thread) and
in the triggerer (a deferred stage).  A line when rows moved since the last one, at most once per interval;
while nothing moves, a line every :data:`HEARTBEATS` intervals, so a quiet log still says the stage is alive.

The rate is the recent one (:class:`RecentRate`, over the last :data:`WINDOW_SECONDS`), not the average since
the stage began: a job's first seconds (a JVM, Python workers starting) say nothing of how fast it goes now,
and an ETA from them was several times the real remaining time.  The same window serves the bar and the log
lines of a job run from Python (:mod:`geneva_provider.facade.progress`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from geneva_provider.core.wording import skipped_rows
from geneva_provider.pipeline.stages.registry import spark_stage

PROGRESS_SECONDS = 5.0  # the default interval between two looks (and at most one line per look)
HEARTBEATS = 6          # with nothing moving, one line every this many looks (30 s by default)
WINDOW_SECONDS = 10.0   # the rate is the rows moved over about the last this many seconds


class RecentRate:
    """Rows per second over a sliding window of looks at a growing count, and the ETA it implies.

    Rows arrive in steps (a checkpoint, a heartbeat), so the rate is measured between the looks where the count
    changed, over the last ``window`` seconds: from the oldest change in it (or the one just before it) to the
    newest -- whole steps over the time they took, not one step over the last redraw's interval (tenfold), nor
    the job's rows over its whole time (its start-up counted).  A first change has no start to measure from (the
    job may have spent seconds starting a JVM before it), so the rate needs two, unless :meth:`start` says when
    the count was last known not to move.  When nothing moved for longer than the usual gap between two changes,
    the rate runs to now, and falls: what is shown is what happens now.
    """

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self.window = window
        self._changes: deque[tuple[float, int]] = deque()  # (time, rows) of the looks where the count changed
        self._seen: int | None = None  # the count before its first change
        self._now = 0.0  # the last look's time

    def start(self, rows: int, now: float | None = None) -> None:
        """The count is ``rows`` as the work begins (a stage's start): the first change is measured from here."""
        self._now = time.monotonic() if now is None else now
        self._changes = deque([(self._now, rows)])

    def add(self, rows: int, now: float | None = None) -> None:
        """A look at the count (``now``: its time.monotonic(), now by default)."""
        now = self._now = time.monotonic() if now is None else now
        changes = self._changes
        if not changes:
            if self._seen is not None and rows != self._seen:
                changes.append((now, rows))
            self._seen = rows
            return
        if rows != changes[-1][1]:
            changes.append((now, rows))
        while len(changes) > 2 and changes[1][0] <= now - self.window:
            changes.popleft()

    def rate(self) -> float | None:
        """Rows per second over the window; None until the count has changed twice (or once since :meth:`start`)."""
        if len(self._changes) < 2:
            return None
        (t0, r0), (t1, r1) = self._changes[0], self._changes[-1]
        gap = (t1 - t0) / (len(self._changes) - 1)
        end = max(t1, self._now - 2 * gap)  # a silence past twice the usual gap counts: the rate falls
        return max(r1 - r0, 0) / (end - t0) if end > t0 else None

    def eta(self, total: int) -> float | None:
        """Seconds left to reach ``total`` rows at the recent rate (None: no rate yet)."""
        rate = self.rate()
        if not rate:
            return None
        return max(total - self._changes[-1][1], 0) / rate


def eta_text(seconds: float | None) -> str:
    """``ETA 1m05s`` / ``ETA 12s`` / ``ETA 4.2s`` (tenths under 10 s; empty when there is no ETA)."""
    if seconds is None:
        return ""
    if seconds < 9.95:
        return f"ETA {seconds:.1f}s"
    whole = round(seconds)
    return f"ETA {whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"ETA {whole}s"


class ProgressLines:
    """Decides whether a look at a job record makes a line, and writes it (``rate`` counts this stage's rows).

    ``begin`` (the record as the wait began) sets the rows done before it: a retry that resumes from
    checkpoints does not count them in its rate.  ``in_flight``: rows the stage's running calls computed that no
    checkpoint holds yet (their markers' heartbeats), told with each look: the line then says how many rows are
    computed, within about a second of the UDF, not only the checkpointed ones, and the rate counts them.
    """

    def __init__(self, job_id: str, stage: str, begin: Any | None = None) -> None:
        self.job_id, self.stage = job_id, stage
        self._rate = RecentRate()
        if begin is not None:
            self._rate.start(self._done(begin))
        self._last: tuple[Any, ...] | None = None  # what the last line said
        self._quiet = 0  # looks since the last line
        self._computed = 0  # the most rows computed a look saw (they never go back)

    def look(self, record: Any, note: str | None = None, *, final: bool = False, in_flight: int = 0) -> str | None:
        """The line for this look at ``record`` (None: nothing to say yet); ``final`` always makes one."""
        computed = self._computed = max(self._computed, self._done(record) + in_flight)
        self._rate.add(computed)
        state = (record.status, record.rows_checkpointed, record.rows_ready, record.rows_committed,
                 getattr(record, "segments_done", None), note, computed)
        self._quiet += 1
        if not final and state == self._last and self._quiet < HEARTBEATS:
            return None
        self._last, self._quiet = state, 0
        return self.line(record, note)

    def line(self, record: Any, note: str | None = None) -> str:
        """``<stage> <job>: <status>; <rows> (<rate> rows/s)[; <computed>, ETA]``; ``note`` says what is wrong
        while the record cannot."""
        rate = self._rate.rate() or 0.0
        status = f"{record.status}, but {note}" if note else str(record.status)
        if spark_stage(self.stage).builds_segments:  # its rows are indexed segment by segment, committed at the end
            return (f"{self.stage} {self.job_id}: {status}; {record.segments_done or 0} of "
                    f"{record.segments_planned or 0} segments built ({record.rows_checkpointed} of "
                    f"{record.rows_planned} rows; {rate:.0f} rows/s)")
        if spark_stage(self.stage).rewrites:  # no checkpoints: its rows land at its one commit
            return (f"{self.stage} {self.job_id}: {status}; {record.rows_committed} of {record.rows_planned} rows "
                    f"rewritten and committed ({rate:.0f} rows/s)")
        skipped = skipped_rows(record.rows_failed)
        line = (f"{self.stage} {self.job_id}: {status}; {record.rows_checkpointed} of {record.rows_planned} rows "
                f"checkpointed, {record.rows_ready} ready to commit, {record.rows_committed} committed"
                f"{f', {skipped}' if skipped else ''} ({rate:.0f} rows/s)")
        computed = min(max(self._computed, record.rows_checkpointed), record.rows_planned)
        eta = eta_text(self._rate.eta(record.rows_planned)) if computed < record.rows_planned else ""
        if computed > record.rows_checkpointed or eta:
            line += f"; {computed} computed" + (f", {eta}" if eta else "")
        return line

    def _done(self, record: Any) -> int:
        """The rows this stage moves forward: its registry entry names the counter (apply's checkpointed rows...)."""
        return int(getattr(record, spark_stage(self.stage).progress_counter))
