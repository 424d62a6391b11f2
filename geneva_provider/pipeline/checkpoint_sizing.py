"""How many rows the next batch checkpoint holds: a few seconds of the function's measured work."""

from __future__ import annotations

from geneva_provider.core.models import PlanSettings

TARGET_CHECKPOINT_SECONDS = 3.0
PROBE_ROWS = 100


class CheckpointSizer:
    """A probe first, then rows/s x the target, within the plan's bounds (a lone checkpoint_size fixes it)."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self._size = lo if lo == hi else min(lo, PROBE_ROWS)

    @classmethod
    def of(cls, settings: PlanSettings) -> CheckpointSizer:
        return cls(settings.min_checkpoint_size, settings.max_checkpoint_size)

    @property
    def size(self) -> int:
        return self._size

    def observe(self, rows: int, seconds: float) -> None:
        if self.lo == self.hi or rows <= 0:
            return
        want = int(rows / max(seconds, 1e-3) * TARGET_CHECKPOINT_SECONDS)
        self._size = max(self.lo, min(self.hi, want, self._size * 8))
