"""Documents of the checkpoint store already parsed in this process, by where they were read and their text.

Plans and staged-files records are written once under keys of their own (a job id, a uuid), and every stage of a
job, and every plan of its column, reads them again: one backfill over 1,000 fragments parsed its plan 3 times
and staged-files records 57 times, ~1 s of pydantic on a loaded 2-core machine (issue 44).  The text is still read
each time, so a document rewritten, truncated or removed is seen as it now is; only the parse is skipped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ParsedDocs(Generic[T]):
    """At most ``size`` parsed documents, the least recently used dropped first; ``where`` None: never kept."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._docs: OrderedDict[tuple[str, str], T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, where: str | None, text: str, parse: Callable[[str], T]) -> T:
        if where is None:
            return parse(text)
        key = (where, text)
        with self._lock:
            if (doc := self._docs.get(key)) is not None:
                self._docs.move_to_end(key)
                return doc
        doc = parse(text)
        with self._lock:
            self._docs[key] = doc
            while len(self._docs) > self._size:
                self._docs.popitem(last=False)
        return doc
