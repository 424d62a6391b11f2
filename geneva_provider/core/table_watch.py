"""The table watcher's plain data (core): its checked arguments, what one look saw, and its cursor.

A watcher (``LanceTableChangedTrigger``) must miss nothing and never die.  It tells one table from another of the
same name by its *incarnation*: the commit time Lance writes into each version's manifest.  A table dropped and
re-created gets versions whose commit times differ from the old ones at any version number, so comparing the
commit time of the version last reported (read back from that version's manifest) tells the same table moving
on from a new one, whatever versions the new one has reached.  The commit time lives in the manifest itself, so
it reads the same on every object store (no directory times, e-tags or listings), and it needs nothing written
by this package: tables made by any writer have it.  When Lance no longer has the version last reported
(``cleanup_old_versions``), the watcher cannot tell, and reports what it finds as ``Unknown`` commits.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from geneva_provider.core.catalog import check_table_name
from geneva_provider.core.contracts.options import check_seconds
from geneva_provider.core.errors import InvalidArgumentError

LANCE_OPERATIONS = ("Append", "Delete", "Update", "Overwrite", "DataReplacement", "Merge", "Project", "Rewrite",
                    "CreateIndex", "Restore", "Clone", "DataOverlay", "UpdateConfig")
"""The Lance operation names a watcher's ``operations`` may name (a commit's ``type(tx.operation).__name__``)."""
CHANGE_OPERATIONS = ("Append", "Delete", "Update", "Overwrite", "DataReplacement")
"""The Lance operations that change rows, hence what a watcher reports by default."""
UNKNOWN = "Unknown"
"""The operation reported for a commit whose transaction Lance no longer has: reported whatever the filters."""


class WatchArguments(BaseModel):
    """A watcher's arguments, checked when it is built (the DAG file's parse, the triggerer's load)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str
    lance_conn_id: str
    poll_interval: float
    operations: list[str] | None
    columns: list[str] | None

    @classmethod
    def check(cls, table: Any, lance_conn_id: Any, poll_interval: Any, operations: Any,
              columns: Any) -> WatchArguments:
        """The arguments, or InvalidArgumentError naming the table, the argument and the value."""
        check_table_name(table)
        who = f"the watcher of table '{table}'"
        if not isinstance(lance_conn_id, str) or not lance_conn_id.strip():
            raise InvalidArgumentError(f"{who}: lance_conn_id must be a connection id, got {lance_conn_id!r}")
        interval = check_seconds(poll_interval, "poll_interval", who)
        if interval is None:
            raise InvalidArgumentError(f"{who}: poll_interval must be a positive number of seconds, got None")
        return cls(table=table, lance_conn_id=lance_conn_id, poll_interval=interval,
                   operations=_operations(operations, who), columns=_columns(columns, who))


def _names(value: Any, arg: str, who: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise InvalidArgumentError(f"{who}: {arg} must be a non-empty list of names (or None), got {value!r}")
    bad = [v for v in value if not isinstance(v, str) or not v.strip()]
    if bad:
        raise InvalidArgumentError(f"{who}: {arg} must be names, got {bad[0]!r} in {list(value)!r}")
    return list(value)


def _operations(value: Any, who: str) -> list[str] | None:
    names = _names(value, "operations", who)
    unknown = [n for n in names or [] if n not in LANCE_OPERATIONS]
    if unknown:
        raise InvalidArgumentError(f"{who}: unknown operations {unknown} in operations={names!r}; Lance's are "
                                   f"{', '.join(LANCE_OPERATIONS)} (default: {', '.join(CHANGE_OPERATIONS)})")
    return names


def _columns(value: Any, who: str) -> list[str] | None:
    return _names(value, "columns", who)


class TableLook(BaseModel):
    """What one look at a watched table saw: its latest version and that version's commit time, or why not.

    ``version`` None and no ``problem``: the table does not exist.  A ``problem`` says why no version could be
    read (a ``<table>.lance`` directory with no manifest yet, a storage error): the look is tried again.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int | None = None
    committed_at: str | None = None
    problem: str | None = None


class WatchCursor(BaseModel):
    """The last version of the table a watcher reported (or recorded), and which incarnation of the table.

    ``version`` 0: the table did not exist (or could not be read) when the watcher first looked, so whatever
    appears is reported whole.  ``committed_at`` None: not known (a cursor kept before incarnations were).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    committed_at: str | None = None

    @classmethod
    def of(cls, look: TableLook) -> WatchCursor:
        return cls(version=look.version or 0, committed_at=look.committed_at)

    def holds(self, look: TableLook) -> bool:
        """Whether ``look`` saw the very version this cursor is at, of the same table (nothing to analyse)."""
        return (self.version != 0 and look.version == self.version
                and self.committed_at in (None, look.committed_at))

    def tag(self) -> str:
        """The incarnation as the state store keeps it, beside the version: ``"<version>@<commit time>"``."""
        return f"{self.version}@{self.committed_at or ''}"

    @classmethod
    def from_store(cls, version: Any, tag: Any) -> WatchCursor | None:
        """The cursor from the state store's two keys; a tag of another version (a write cut short) is ignored."""
        if version is None:
            return None
        number, _, committed_at = str(tag or "").partition("@")
        same = number == str(int(version))
        return cls(version=int(version), committed_at=committed_at if same and committed_at else None)
