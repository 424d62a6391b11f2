"""Lists inside error messages (core): long ones are cut to their first few items and a count of the rest.

A job over thousands of fragments can leave thousands missing; an error naming every one is a
log line nobody reads, so messages name at most ``SHOWN`` and say how many more there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SHOWN = 10


def shortened(items: Sequence[Any], shown: int = SHOWN, sep: str = ", ") -> str:
    """``items`` joined with ``sep``, the first ``shown`` of them and "... and N more" for the rest."""
    head = sep.join(str(i) for i in items[:shown])
    more = len(items) - shown
    return f"{head}{sep}... and {more} more" if more > 0 else head
