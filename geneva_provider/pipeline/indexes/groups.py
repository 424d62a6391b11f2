"""Contiguous, row-balanced fragment groups: the unit of work of one segment task (pipeline).

Groups are runs of fragments in fragment-id order, so a group's segment covers neighbours that compaction
may coalesce later (Lance only compacts fragments covered by the identical set of segments), and each group
holds about the same number of rows, so the tasks take about the same time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


def balanced_groups(sizes: Sequence[tuple[int, int]], target_groups: int) -> list[list[int]]:
    """``(fragment id, rows)`` pairs cut into at most ``target_groups`` contiguous runs of about equal rows.

    A fragment goes to the group its rows' midpoint falls in, so no group is empty and the cuts fall
    where the running total of rows crosses a multiple of ``total / target_groups``.
    """
    if isinstance(target_groups, bool) or not isinstance(target_groups, int) or target_groups < 1:
        raise InvalidArgumentError(f"fragment_groups: target_groups must be a positive whole number, "
                                   f"got {target_groups!r}")
    ordered = sorted(sizes)
    total = sum(rows for _, rows in ordered)
    if not ordered:
        return []
    if total == 0:
        return [[f for f, _ in ordered]]
    groups: dict[int, list[int]] = {}
    seen = 0
    for fragment, rows in ordered:
        slot = min(int((seen + rows / 2) * target_groups / total), target_groups - 1)
        groups.setdefault(slot, []).append(fragment)
        seen += rows
    return [groups[slot] for slot in sorted(groups)]


def fragment_groups(ds: Dataset, target_groups: int, fragment_ids: Sequence[int] | None = None) -> list[list[int]]:
    """The fragments of ``ds`` (or only ``fragment_ids``) in at most ``target_groups`` contiguous, row-balanced
    groups."""
    wanted = None if fragment_ids is None else set(fragment_ids)
    sizes = [(f.fragment_id, f.count_rows()) for f in ds.get_fragments()
             if wanted is None or f.fragment_id in wanted]
    return balanced_groups(sizes, target_groups)
