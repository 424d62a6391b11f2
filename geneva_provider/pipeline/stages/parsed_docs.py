"""Documents of the checkpoint store already parsed in this process, by where they were read and their text.

Plans and staged-files records are written once under keys of their own (a job id, a uuid), and every stage of a
job, and every plan of its column, reads them again: one backfill over 1,000 fragments parsed its plan 3 times
and staged-files records 57 times, ~1 s of pydantic on a loaded 2-core machine (issue 44).  The text is still read
each time, so a document rewritten, truncated or removed is seen as it now is; only the parse is skipped.

Where the store can tell cheaply that a document has not changed (a local store: the file's inode, modification
time and size, :meth:`~geneva_provider.core.store.checkpoint.CheckpointStore.stamp`), :meth:`ParsedDocs.read`
skips the read too.  That is for documents written once under a key of their own (staged-files records): a
document rewritten in place within the file system's clock tick, at the same size, into a reused inode, would
look unchanged, so a job's record (rewritten by every update) is not read through it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from geneva_provider.core.store.checkpoint import CheckpointStore

T = TypeVar("T")


class ParsedDocs(Generic[T]):
    """At most ``size`` parsed documents, the least recently used dropped first; ``where`` None: never kept."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._docs: OrderedDict[tuple[str, str], T] = OrderedDict()
        self._stamped: OrderedDict[tuple[str, tuple[int, ...]], T] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, store: CheckpointStore, key: str, parse: Callable[[str], T]) -> T:
        """The document at ``key``, parsed; not even read when its stamp is the one it had when last read or
        written here.  KeyError when absent (as the store raises it)."""
        where = store.uri and f"{store.uri}/{key}"
        before = store.stamp(key) if where else None
        if where and before is not None:
            with self._lock:
                doc = self._stamped.get((where, before))
            if doc is not None:
                return doc
        doc = self.get(where, store.get_text(key), parse)
        if where and before is not None and store.stamp(key) == before:  # unchanged while it was read
            self._keep(self._stamped, (where, before), doc)
        return doc

    def _keep(self, docs: OrderedDict[tuple[str, tuple[int, ...]], T], key: tuple[str, tuple[int, ...]], doc: T
              ) -> None:
        with self._lock:
            docs[key] = doc
            docs.move_to_end(key)
            while len(docs) > self._size:
                docs.popitem(last=False)

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
