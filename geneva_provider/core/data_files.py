"""Lance ``DataFile``s handed to a commit, with a ``path`` that costs nothing to read (imports lance: load lazily).

pylance 14's ``DataFile.path`` property defines a class on every read (a ``str`` subclass kept callable for
backwards compatibility), and Lance's commit reads it once for every file it is handed: ~40 us a file, 40 ms of
the 50 ms a ``DataReplacement`` of 1,000 column files took (issue 44: 1,000 fragments backfilled).  The files a job
commits are :class:`PlainPathDataFile`, whose ``path`` is the string itself; everything else is pylance's.
"""

from __future__ import annotations

from lance.fragment import DataFile


class PlainPathDataFile(DataFile):
    """pylance's ``DataFile`` whose ``path`` is the plain string it holds (not callable, as no caller here needs)."""

    @property
    def path(self) -> str:  # a plain str, where pylance returns a callable str subclass
        return self._path
