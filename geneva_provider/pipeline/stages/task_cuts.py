"""Whether a plan splits a fragment over tasks: only where the split can pay for itself (pipeline).

Guided tasks (:func:`~geneva_provider.core.ranges.pack_tasks`) split a large fragment so that every
slot gets a share of an expensive UDF's work.  A split fragment costs the job more than its task
launches: each of its parts leaves a batch checkpoint, and its column file is written by a writer Spark
job that reads them back -- about 0.3 s on a warm ``local[2]`` session for a 100,000-row fragment,
against ~0.02 s for a fragment one task computes whole and writes itself (measured for issue 44: an
incremental +10 % backfill of a vectorised ``x * 2`` spent 0.2 to 0.3 s of its 0.6 to 0.76 s there).
Splitting saves at most the fragment's own compute time, so a fragment whose rows cost less than
:data:`SPLIT_COST_SECONDS` to compute is kept whole.

What a row costs is what the job prefix's last apply measured (reading its inputs, calling the UDF,
fingerprinting), kept in the prefix's ledger (:attr:`~geneva_provider.core.contracts.models.Ledger.row_seconds`),
or what the same UDF last cost in this process on another table
(:func:`~geneva_provider.pipeline.stages.planning.measured_row_seconds`).  A job with no measurement (a UDF this
column and this process never measured) is cut as before: an unknown UDF may be a model.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable

from geneva_provider.core.ranges import pack_tasks

log = logging.getLogger(__name__)

# What splitting a fragment over tasks costs beyond computing it whole: its parts' checkpoints and the writer
# Spark job that reads them back (measured on a warm local[2] session, see the module's docstring).
SPLIT_COST_SECONDS = 0.3


def cut_tasks(work: list[tuple[int, int]], parallelism: int, min_rows: int, task_size: int | None,
              row_seconds: Callable[[], float | None]) -> list[list[tuple[int, int, int]]]:
    """``(fragment, first, last)`` parts per task: guided tasks, with every fragment whole when a split cannot pay.

    ``work`` is ``(fragment, rows to compute)``; ``row_seconds()`` what a row was last measured to cost (None:
    never), asked only when the guided cut splits a fragment.
    """
    pieces = pack_tasks(work, parallelism, min_rows, task_size)
    if task_size or not _splits_fragment(pieces, dict(work)):
        return pieces
    cost = row_seconds()
    largest = max(n for _, n in work)
    if cost is None or largest * cost > SPLIT_COST_SECONDS:
        return pieces
    log.info("plan: %d rows at the %.2g s a row the last apply measured: every fragment is kept whole "
             "(splitting one costs ~%.1f s, more than the largest fragment's ~%.2f s)",
             sum(n for _, n in work), cost, SPLIT_COST_SECONDS, largest * cost)
    return whole_fragments(work, parallelism)


TASKS_PER_SLOT = 4  # whole fragments are dealt over up to this many tasks a slot: a slow slot takes fewer


def whole_fragments(work: list[tuple[int, int]], parallelism: int) -> list[list[tuple[int, int, int]]]:
    """Every fragment whole, dealt over at most ``TASKS_PER_SLOT x parallelism`` tasks, largest first to the least
    loaded; the largest tasks first (Spark launches them in order, the small ones fill the gaps)."""
    slots = max(1, min(TASKS_PER_SLOT * parallelism, len(work)))
    loads = [(0, i) for i in range(slots)]
    tasks: list[list[tuple[int, int, int]]] = [[] for _ in range(slots)]
    for fid, n in sorted(work, key=lambda w: w[1], reverse=True):
        load, i = heapq.heappop(loads)
        tasks[i].append((fid, 0, n))
        heapq.heappush(loads, (load + n, i))
    done = [sorted(t) for t in tasks if t]
    return sorted(done, key=lambda t: sum(b - a for _, a, b in t), reverse=True)


def _splits_fragment(pieces: list[list[tuple[int, int, int]]], rows: dict[int, int]) -> bool:
    return any(b - a != rows[fid] for piece in pieces for fid, a, b in piece)
