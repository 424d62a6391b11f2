"""How many rows (or parents) the next batch checkpoint holds: a small probe, then a few seconds of work.

A checkpoint is the unit of work a kill throws away: rows computed since the last one are computed
again by the rerun.  A fixed first size cannot suit every function.  10,000 rows is 15 s of a GPU model
at 1.5 ms/row, all lost by a kill a task in (and a task of 8,000 rows never checkpointed at all), while
a small fixed size costs a vectorised UDF at 1 us/row thousands of tiny checkpoint files and UDF calls.
So the size is measured, not guessed, by one rule shared by the backfill and view-refresh apply
(``pipeline/columns/compute.py``) and the UDTF view apply (``pipeline/udtf/expand.py``):

* ``checkpoint_size`` alone (min == max bound): always that size -- the user chose it, e.g. as the
  batch of one forward pass on a GPU.
* otherwise the first checkpoint is a probe of ``min(min bound, PROBE_ROWS)`` rows, then each next one
  holds ``TARGET_CHECKPOINT_SECONDS`` of work at the measured speed, within the bounds, growing at most
  ``MAX_GROWTH`` times per checkpoint and shrinking at once.
* the job option ``batch_checkpoint_flush_interval_seconds`` (the reference's name: how long its workers
  buffer computed batches before a checkpoint is written) sets that target instead; 0 means no buffering:
  after the probe every checkpoint holds the min bound, written as soon as it is computed.

Figures: at 1.5 ms/row the sizes are 100, 1,000 (the min bound), then ~1,960 -- a kill loses at most ~3 s
of work per task in flight; at 1 us/row (a vectorised UDF, where the per-checkpoint costs dominate) 100,
1,000, 8,000, 64,000, then the 100,000 max bound from the fifth checkpoint on (after 73,100 rows; the old
doubling from 10,000 got there at its fifth too, after 150,000 rows), and the job's later tasks in the
same worker start there.  The min bound wins over the target: a function slower than 3 ms/row checkpoints
``min_checkpoint_size`` rows (1,000 by default) at a time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from geneva_provider.core.contracts.models import PlanSettings

# Seconds of work one checkpoint holds once the speed is known.  A kill loses at most about this much
# per task in flight; each checkpoint costs a read, a UDF call and one Lance file (~10-50 ms), so at 3 s
# that cost stays near 1% of the work.
TARGET_CHECKPOINT_SECONDS = 3.0
# Rows of the first checkpoint: a slow model (10 ms/row) finishes it in about a second, a GPU model at
# 1.5 ms/row in 0.15 s, and it is still a batch large enough for a vectorised UDF's call to mean something.
PROBE_ROWS = 100
# Growth per checkpoint at most: a probe dominated by fixed costs, or a lucky fast one, must not jump
# straight to the max bound; x8 still reaches 100,000 rows from the probe in four checkpoints.
MAX_GROWTH = 8
# Weight of the older observations in the speed estimate, halved at each checkpoint.  The estimate is
# rows / seconds over the decayed sums, so a checkpoint counts by the time it took: a short, noisy probe
# or the few rows ending a task weigh little once a checkpoint of seconds has been measured.
DECAY = 0.5
_MIN_SECONDS = 1e-6  # a checkpoint measured as taking no time (a coarse clock) still gives a finite speed


class CheckpointSizer:
    """The size of the next checkpoint of one worker, learnt from the checkpoints it computed before.

    It outlives a task: :func:`job_sizer` hands a job's next task in the same Python worker the sizer
    its earlier tasks left.  Not thread-safe, and not shared between processes.
    """

    def __init__(self, lo: int, hi: int, *, target_seconds: float = TARGET_CHECKPOINT_SECONDS,
                 function: tuple[str, str] | None = None) -> None:
        if not 1 <= lo <= hi:
            raise ValueError(f"checkpoint bounds must satisfy 1 <= min <= max, got min {lo}, max {hi}")
        if target_seconds < 0:
            raise ValueError(f"target_seconds must be positive (or 0: every checkpoint the min bound), got "
                             f"{target_seconds}")
        self.lo, self.hi, self.target_seconds = lo, hi, target_seconds
        self.function = function  # (name, version): its measured speed is kept for its next job in this process
        self._size = lo if lo == hi else min(lo, PROBE_ROWS)
        self._rows = 0.0     # decayed sums of the observed checkpoints
        self._seconds = 0.0
        self._work = (0.0, 0.0)   # decayed (rows, seconds) of computing chunks: read, function, fingerprints
        self._store = (0.0, 0.0)  # decayed (rows, seconds) of storing their checkpoints

    @classmethod
    def of(cls, settings: PlanSettings, function: tuple[str, str] | None = None) -> CheckpointSizer:
        """The sizer for a plan's settings: its min and max bounds (equal when ``checkpoint_size`` was given alone).

        ``settings.checkpoint_size`` is not the first size: unless the bounds fix it, it is 10,000 by
        default, which is the very size that cost a slow UDF its whole task.
        """
        seconds = settings.checkpoint_seconds
        return cls(settings.min_checkpoint_size, settings.max_checkpoint_size,
                   target_seconds=TARGET_CHECKPOINT_SECONDS if seconds is None else seconds, function=function)

    @property
    def fixed(self) -> bool:
        """Whether the size never changes (``checkpoint_size`` given alone)."""
        return self.lo == self.hi

    @property
    def size(self) -> int:
        """Rows (or parents) for the next checkpoint."""
        return self._size

    @property
    def rows_per_second(self) -> float | None:
        """The smoothed speed measured so far (None before the first checkpoint)."""
        return self._rows / max(self._seconds, _MIN_SECONDS) if self._rows else None

    def observe_costs(self, rows: int, work_seconds: float, stored_rows: int, store_seconds: float) -> None:
        """Records what computing a chunk of ``rows`` took, and storing ``stored_rows`` of them as checkpoints."""
        if rows > 0:
            self._work = (self._work[0] * DECAY + rows, self._work[1] * DECAY + max(work_seconds, 0.0))
        if stored_rows > 0:
            self._store = (self._store[0] * DECAY + stored_rows, self._store[1] * DECAY + max(store_seconds, 0.0))

    @property
    def recomputing_is_cheaper(self) -> bool:
        """Whether computing rows again costs less than keeping them in a checkpoint, written and read back once
        (as measured in this worker; False until both are): a checkpoint that saves less than it costs is not
        worth writing -- a vectorised function's, not a model's."""
        (wr, ws), (sr, ss) = self._work, self._store
        if not wr or not sr:
            return False
        return ws / wr <= 2 * ss / sr

    def assume(self, row_seconds: float) -> None:
        """Starts from a speed measured before (the column's last apply) instead of a probe, as if one checkpoint
        of ``TARGET_CHECKPOINT_SECONDS`` had been measured at it; nothing when the size is fixed or already learnt.

        What the driver's tasks start from when an apply runs on the driver (:mod:`.on_driver`): a cheap column's
        increment is then one chunk, not a probe of 100 rows and a ramp of small checkpoints.
        """
        if self.fixed or self._rows or not self.target_seconds or row_seconds <= 0:
            return
        rows = self.target_seconds / row_seconds
        self._rows, self._seconds = rows, self.target_seconds
        self._size = max(self.lo, min(self.hi, int(rows)))

    def observe(self, rows: int, seconds: float) -> None:
        """Records a checkpoint of ``rows`` computed (and stored) in ``seconds``; sets the next size.

        The next size is the smoothed speed x the target, at most ``MAX_GROWTH`` x the current size and
        within the bounds -- the min bound applies from the second checkpoint on, so only the probe is
        smaller.  A short checkpoint (the rest of a task) counts for its speed like any other, by the
        little time it took; one that took over twice the target replaces the estimate.
        """
        if rows <= 0 or self.fixed:
            return
        if not self.target_seconds:  # no time target: every checkpoint after the probe is the min bound
            self._size = self.lo
            return
        seconds = max(seconds, 0.0)
        if seconds > 2 * self.target_seconds:
            # Far too long: the function slowed down (harder data, a contended device).  Seconds of work
            # are a reliable measure on their own, and the decayed rows of earlier fast checkpoints would
            # keep the estimate high for several checkpoints more: the speed is this checkpoint's alone.
            self._rows, self._seconds = float(rows), seconds
        else:
            self._rows = self._rows * DECAY + rows
            self._seconds = self._seconds * DECAY + seconds
        if self.function is not None and rows >= SPEED_KEPT_MIN_ROWS:
            remember_row_seconds(self.function, max(self._seconds, _MIN_SECONDS) / self._rows)
        want = int(self._rows / max(self._seconds, _MIN_SECONDS) * self.target_seconds)
        self._size = max(self.lo, min(self.hi, want, self._size * MAX_GROWTH))


# The sizers of the jobs this Python worker ran tasks of, by job id, the latest last.  Spark reuses a worker
# process for the next task (spark.python.worker.reuse), and that task then starts at the size learnt
# rather than at a new probe: with one Spark partition per task, a probe and its ramp in every task cost
# a fast UDF a few small checkpoints each (~10 ms apiece).  A job's tasks run the same function, so its
# speed carries over; another job (a rerun included) starts with a probe -- unless it names its function.
_SIZERS: dict[str, CheckpointSizer] = {}
_SIZERS_KEPT = 8
# What a row of each function (by name and version) last cost in this process, whatever the job or table: a
# sizer naming its function keeps the speed of each checkpoint of at least SPEED_KEPT_MIN_ROWS rows, and a
# planner what an apply measured (``planning.record_row_seconds``).  A job's first task here then starts at that
# speed instead of a probe and a ramp (issue 44: each checkpoint of a chunker's probe and ramp wrote view fragments
# of its own, so a first refresh wrote 20 small fragments where 16 do), and a warm process plans a cheap UDF's
# first backfill of a table like its increments.  A function's name and version say what it computes, where its
# pickle does not: pickling one function by value twice can give other bytes.  The most recent are kept.
_FUNCTION_ROW_SECONDS: OrderedDict[tuple[str, str], float] = OrderedDict()
_FUNCTIONS_KEPT = 256
_FUNCTIONS_LOCK = threading.Lock()  # jobs of one process may run in threads (a namespace's in-process runner)
SPEED_KEPT_MIN_ROWS = 100  # rows (or parents) a checkpoint must hold for its speed to be kept for another job


def job_sizer(job_id: str | None, settings: PlanSettings, function: tuple[str, str] | None = None
              ) -> CheckpointSizer:
    """The sizer of job ``job_id`` in this process: the one its earlier tasks here left, or a new one -- which
    starts at the speed ``function`` (name, version) last had here, when it names one this process measured.

    Not for concurrent tasks of one process (none runs two: a Spark task has a Python worker to itself).
    """
    sizer = _SIZERS.pop(job_id, None) if job_id is not None else None
    if sizer is None:
        sizer = CheckpointSizer.of(settings, function=function)
        if function is not None and (known := function_row_seconds(function)) is not None:
            sizer.assume(known)
    if job_id is None:  # not a stored job's task: nothing names its tasks' speed
        return sizer
    _SIZERS[job_id] = sizer
    while len(_SIZERS) > _SIZERS_KEPT:
        del _SIZERS[next(iter(_SIZERS))]
    return sizer


def function_row_seconds(function: tuple[str, str]) -> float | None:
    """What a row of ``function`` (name, version) last cost in this process; None: never measured here."""
    return _FUNCTION_ROW_SECONDS.get(function)


def remember_row_seconds(function: tuple[str, str], row_seconds: float) -> None:
    """Keeps what a row of ``function`` (name, version) cost, for its next job in this process."""
    with _FUNCTIONS_LOCK:
        _FUNCTION_ROW_SECONDS[function] = row_seconds
        _FUNCTION_ROW_SECONDS.move_to_end(function)
        while len(_FUNCTION_ROW_SECONDS) > _FUNCTIONS_KEPT:
            _FUNCTION_ROW_SECONDS.popitem(last=False)
