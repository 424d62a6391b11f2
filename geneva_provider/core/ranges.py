"""Range maths over fragment-local row ranges ``[start, end)`` in the planner's logical domain.

Plans, apply tasks and the writer all reason about which rows of a fragment are covered by
checkpoints; doing it in one place keeps their answers identical.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def missing_ranges(rows: int, covered: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[0, rows)`` minus the union of ``covered`` ranges, as sorted disjoint ranges."""
    out = []
    pos = 0
    for s, e in sorted(covered):
        if s > pos:
            out.append((pos, min(s, rows)))
        pos = max(pos, e)
        if pos >= rows:
            break
    if pos < rows:
        out.append((pos, rows))
    return [(s, e) for s, e in out if e > s]


def uncovered(start: int, end: int, covered: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` that no ``covered`` range holds."""
    return [(max(s, start), e) for s, e in missing_ranges(end, covered) if e > start]


def split_range(start: int, end: int, size: int) -> list[tuple[int, int]]:
    """Splits ``[start, end)`` into pieces of at most ``size`` rows."""
    return [(s, min(s + size, end)) for s in range(start, end, size)]


def guided_split(ranges: list[tuple[int, int, int]], parallelism: int, min_rows: int) -> list[tuple[int, int, int]]:
    """Cuts ``(fragment, start, end)`` ranges into tasks that shrink as the work runs out.

    Guided self-scheduling: each task takes ``1 / parallelism`` of the rows still unplanned,
    but never fewer than ``1 / (16 * parallelism)`` of all rows (nor ``min_rows``) and never
    past its range.  Equal tasks make a slot that runs a little slower finish a whole task
    late; shrinking tasks let the slots finish together while keeping the number of Spark
    task launches (~70 ms each) low.
    """
    slots = max(parallelism, 1)
    left = sum(e - s for _, s, e in ranges)
    floor = max(math.ceil(left / (16 * slots)), min_rows, 1)
    pieces = []
    for fid, start, end in ranges:
        pos = start
        while pos < end:
            size = max(math.ceil(left / slots), floor)
            if end - (pos + size) < floor:  # no sliver at the end of a range
                size = end - pos
            pieces.append((fid, pos, pos + size))
            pos += size
            left -= size
    return pieces


def runs_of(mask: Any) -> list[tuple[int, int]]:
    """The runs ``[start, end)`` of True in a boolean array (positions needing work, as ranges)."""
    import numpy as np

    m = np.asarray(mask, dtype=bool)
    if not m.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate([[False], m, [False]]).astype(np.int8)))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


def count_of(runs: Iterable[tuple[int, int]]) -> int:
    """Positions covered by disjoint runs."""
    return sum(e - s for s, e in runs)


def positions_of(runs: Iterable[tuple[int, int]]) -> Any:
    """The positions of disjoint runs, ascending, as an int64 array."""
    import numpy as np

    parts = [np.arange(s, e, dtype=np.int64) for s, e in runs]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def slice_runs(runs: list[tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """The runs holding the ``first``-th to ``last``-th (exclusive) positions of ``runs``."""
    out = []
    seen = 0
    for s, e in runs:
        n = e - s
        lo, hi = max(first - seen, 0), min(last - seen, n)
        if lo < hi:
            out.append((s + lo, s + hi))
        seen += n
        if seen >= last:
            break
    return out
