"""A benchmark's results as an aligned text table (shared by the benchmarks).

Each benchmark prints its rows as it measures them (a long run shows progress) and the whole table at the end,
aligned for copying into docs/benchmarks.md: the first column (the run's label) left-aligned, the figures
right-aligned.
"""

from __future__ import annotations

from collections.abc import Sequence


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """``header`` and ``rows`` as lines of equal-width columns (every line as long as the header's)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in [header, *rows]]


class ResultTable:
    """The rows of a benchmark's table, printed one by one as they come and together by :meth:`show`."""

    def __init__(self, *header: str) -> None:
        self.header = header
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells: str) -> None:
        self.rows.append(cells)
        print("  " + " | ".join(cells), flush=True)

    def show(self, width: int = 100) -> None:
        print("\n" + "=" * width)
        for line in aligned(self.header, self.rows):
            print(line)
        print("=" * width, flush=True)
