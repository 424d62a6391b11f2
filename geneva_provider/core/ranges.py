"""Range maths over fragment-local row ranges ``[start, end)`` in the planner's logical domain.

Plans, apply tasks and the writer all reason about which rows of a fragment are covered by
checkpoints; doing it in one place keeps their answers identical.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import ArrayLike, Positions


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


def pack_tasks(work: list[tuple[int, int]], parallelism: int, min_rows: int, task_size: int | None = None
               ) -> list[list[tuple[int, int, int]]]:
    """Cuts ``(fragment, rows)`` work into tasks of ``(fragment, first, last)`` parts, sized by rows.

    A task takes parts of consecutive fragments until it holds its size, so small fragments are
    packed together and cost one Spark task between them; a large fragment is split.  A part never
    spans fragments, so every checkpoint stays fragment-local.  With ``task_size`` tasks hold that
    many rows; without, they shrink as the work runs out (guided self-scheduling): each takes
    ``1 / parallelism`` of the rows still unplanned, but never fewer than ``1 / (16 * parallelism)``
    of all rows (nor ``min_rows``), so slots finish together while task launches (~20 ms each) stay few.
    A guided task half full ends at a fragment's edge rather than split the fragment: a fragment one task
    holds whole is written by that task.
    """
    slots = max(parallelism, 1)
    left = sum(n for _, n in work)
    floor = task_size or max(math.ceil(left / (16 * slots)), min_rows, 1)
    tasks: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    held = 0
    target = 0
    for fid, n in work:
        pos = 0
        while pos < n:
            if not current:
                target = task_size or max(math.ceil(left / slots), floor)
            take = min(n - pos, target - held)
            if not task_size and pos == 0 and n - take >= floor and held >= target / 2:
                # The fragment would be split: a task half full ends here instead, and the fragment starts
                # the next one (a fragment one task holds whole is written by that task).
                tasks.append(current)
                current, held = [], 0
                continue
            if not task_size and 0 < n - (pos + take) < floor:  # no sliver at the end of a fragment
                take = n - pos
            current.append((fid, pos, pos + take))
            held += take
            pos += take
            left -= take
            if held >= target:
                tasks.append(current)
                current, held = [], 0
    if current:
        tasks.append(current)
    return tasks


def runs_of(mask: ArrayLike) -> list[tuple[int, int]]:
    """The runs ``[start, end)`` of True in a boolean array (positions needing work, as ranges)."""
    import numpy as np

    m = np.asarray(mask, dtype=bool)
    if m.all():  # the usual mask of a fragment never computed: one run (and ~10x cheaper than the edges)
        return [(0, len(m))] if len(m) else []
    if not m.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate([[False], m, [False]]).astype(np.int8)))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


def count_of(runs: Iterable[tuple[int, int]]) -> int:
    """Positions covered by disjoint runs."""
    return sum(e - s for s, e in runs)


def positions_of(runs: Iterable[tuple[int, int]]) -> Positions:
    """The positions of disjoint runs, ascending, as an int64 array."""
    import numpy as np

    parts = [np.arange(s, e, dtype=np.int64) for s, e in runs]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def sorted_unique(ids: ArrayLike) -> Positions:
    """``ids`` as a sorted int64 array without repeats.  Ids that come sorted (a plan's mostly do, and a view's
    parents in its rows' order) cost a pass or two instead of ``np.unique``'s hash and sort."""
    import numpy as np

    ids = np.asarray(ids, np.int64)
    if len(ids) < 2:
        return ids
    step = ids[1:] - ids[:-1]
    if not bool((step >= 0).all()):
        return np.unique(ids)
    return ids if bool(step.all()) else ids[np.concatenate([[True], step != 0])]


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
