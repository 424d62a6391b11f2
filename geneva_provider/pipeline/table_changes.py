"""Which commits to a table matter to the jobs that follow it, and what follows it (pipeline: never sees Airflow).

A table watcher (``LanceTableChangedTrigger``) asks :func:`changes_since` what happened after the version it last
reported: the commits of other writers that change rows -- appends, deletes, updates (``merge_insert`` is an
``Update`` to Lance), overwrites, a column's data replaced -- and not this package's own (a backfill's column
writes, a view's refresh, schema changes: their commit messages start with
:data:`~geneva_provider.pipeline.committer.OWN_COMMIT_PREFIX`), nor those that move no row (a compaction's
``Rewrite``, an index, a config change), so a DAG that listens to a table and backfills it does not start itself.
:func:`watched_change` adds what a watcher must not miss: a table that appeared, or was dropped and re-created (its
incarnation, :mod:`geneva_provider.core.table_watch`), is reported whole; :func:`look_at` never raises.
What a change is followed by is the follower graph's (:mod:`geneva_provider.pipeline.followers`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import TableNotFoundError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.table_events import TableChanged
from geneva_provider.core.table_watch import CHANGE_OPERATIONS, UNKNOWN, TableLook, WatchCursor
from geneva_provider.pipeline.committer import is_own_commit

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


def look_at(open_dataset: Callable[[], Dataset]) -> TableLook:
    """One look at a table (its latest version and that version's commit time); never raises.

    A table that does not exist is an empty look; any other failure to open it (a ``<table>.lance`` directory
    with no manifest yet, a storage error) is a look with the ``problem``, in Lance's words.
    """
    try:
        ds = open_dataset()
    except TableNotFoundError:
        return TableLook()
    except Exception as exc:  # noqa: BLE001 - a watcher's look never raises: it says why and is tried again
        return TableLook(problem=f"{type(exc).__name__}: {lance_reason(exc, 300)}")
    return TableLook(version=ds.version, committed_at=commit_time(ds))


def commit_time(ds: Dataset) -> str:
    """When ``ds``'s version was committed, from its manifest (already loaded), in UTC: its table's incarnation.

    Lance gives it as a naive datetime in the process's local time zone: turned into UTC, so triggerers in
    different time zones read one value for one commit.
    """
    stamp = ds.get_version()["timestamp"]  # a datetime (Lance's stubs also allow an int)
    return stamp.astimezone(dt.UTC).isoformat() if isinstance(stamp, dt.datetime) else str(stamp)


def watched_change(ds: Dataset, table: str, cursor: WatchCursor, operations: Sequence[str] | None = None,
                   columns: Sequence[str] | None = None) -> TableChanged | None:
    """What a watcher whose cursor is ``cursor`` reports of ``ds`` (the table's latest version), or None.

    A table that did not exist at the cursor (version 0), or is another incarnation than the cursor's (dropped
    and re-created: the cursor's version is past its latest, or has another commit time), is reported whole
    (:func:`table_appeared`); else what :func:`changes_since` says.
    """
    if cursor.version == 0 or ds.version < cursor.version or not _same_incarnation(ds, cursor):
        return table_appeared(ds, table, operations)
    return changes_since(ds, table, cursor.version, operations, columns)


def _same_incarnation(ds: Dataset, cursor: WatchCursor) -> bool:
    """Whether ``ds`` is the table whose version ``cursor.version`` was committed at ``cursor.committed_at``.

    When Lance no longer has that version (``cleanup_old_versions``) it cannot be told: taken as the same table,
    whose commits since then :func:`changes_since` reports as ``Unknown``.
    """
    if cursor.committed_at is None:
        return True
    if ds.version == cursor.version:
        return commit_time(ds) == cursor.committed_at
    try:
        then = ds.checkout_version(cursor.version)
    except Exception:  # noqa: BLE001 - the version is gone (Lance says so in OSError / RuntimeError / ValueError)
        return True
    return commit_time(then) == cursor.committed_at


def table_appeared(ds: Dataset, table: str, operations: Sequence[str] | None = None) -> TableChanged:
    """A table new to its watcher, reported whole, whatever its commits: from version 0, with every row it holds.

    Its ``operations`` are those of its history that ``operations`` (default :data:`CHANGE_OPERATIONS`) names,
    and ``Unknown`` for each commit whose transaction Lance no longer has.
    """
    wanted = set(operations or CHANGE_OPERATIONS)
    history = _transactions(ds, ds.version)
    own = sum(1 for tx in history if tx is not None and is_own_commit(tx.transaction_properties))
    names = [n for tx in reversed(history) if tx is None or not is_own_commit(tx.transaction_properties)
             if (n := UNKNOWN if tx is None else type(tx.operation).__name__) in wanted or n == UNKNOWN]
    return TableChanged(table=table, from_version=0, to_version=ds.version, operations=names, own_commits=own,
                        rows_added=ds.count_rows(), created=True)


def _transactions(ds: Dataset, count: int) -> list[Any]:
    """The transactions of ``ds``'s last ``count`` versions, newest first; None for each one Lance no longer has.

    Lance stops at the first version whose manifest ``cleanup_old_versions`` removed: the rest are None too.
    """
    found = list(ds.get_transactions(count)) if count > 0 else []
    return found + [None] * (count - len(found))


def changes_since(ds: Dataset, table: str, since: int, operations: Sequence[str] | None = None,
                  columns: Sequence[str] | None = None) -> TableChanged | None:
    """The commits after version ``since`` up to ``ds``'s that matter, or None when none does.

    ``operations`` (default :data:`CHANGE_OPERATIONS`) are the Lance operations reported; a commit whose
    transaction Lance no longer has (``cleanup_old_versions`` removed it, or its version) is reported as
    ``Unknown`` whatever the filters: missing a change is worse than a no-op run.
    With ``columns``, an ``Update`` or ``DataReplacement`` that says which fields it wrote and wrote none of
    them (an unrelated column) is left out; an ``Update`` that rewrote whole rows always counts.
    """
    if ds.version <= since:
        return None
    wanted = set(operations or CHANGE_OPERATIONS)
    watched = _field_ids(ds, columns) if columns else None
    kept: list[tuple[int, str, Any]] = []
    own = 0
    for offset, tx in enumerate(_transactions(ds, ds.version - since)):
        version = ds.version - offset
        if tx is None:
            kept.append((version, UNKNOWN, None))
            continue
        if is_own_commit(tx.transaction_properties):
            own += 1
            continue
        name = type(tx.operation).__name__
        if name in wanted and (watched is None or _touches(tx.operation, watched)):
            kept.append((version, name, tx.operation))
    if not kept:
        return None
    kept.reverse()
    added, deleted, updated = _counts(ds, kept)
    return TableChanged(table=table, from_version=since, to_version=ds.version, operations=[n for _, n, _ in kept],
                        own_commits=own, rows_added=added, rows_deleted=deleted, rows_updated=updated)


def _counts(ds: Dataset, kept: list[tuple[int, str, Any]]) -> tuple[int | None, int | None, int | None]:
    """Rows added, deleted and updated by the ``kept`` commits; each None when it cannot be known.

    Appended rows are counted from the commits' fragments: not known when a transaction is gone (``Unknown``:
    its rows could be any number).  Deletes and updates are counted by Lance's change feed of each version
    (exact with stable row ids, silently empty without them), which needs the version before it: not known
    when that one or a transaction is gone.
    """
    lost = any(name == UNKNOWN for _, name, _ in kept)
    added, known = 0, ds.has_stable_row_ids and not lost
    deleted = updated = 0
    for version, name, op in kept:
        if name in ("Append", "Overwrite"):
            added += sum(f.physical_rows for f in op.fragments)
        elif name in ("Delete", "Update") and ds.has_stable_row_ids:
            try:
                delta = ds.delta(begin_version=version - 1, end_version=version)
                deleted += delta.get_deleted_row_ids().read_all().num_rows
                updated += delta.get_updated_rows().read_all().num_rows
                added += delta.get_inserted_rows().read_all().num_rows
            except Exception:  # noqa: BLE001 - the version before it is gone (cleanup_old_versions): not known
                known = False
    return None if lost else added, deleted if known else None, updated if known else None


def _field_ids(ds: Dataset, columns: Sequence[str]) -> set[int]:
    from geneva_provider.core.fragments import column_field_ids

    return {i for c in columns if c in ds.schema.names for i in column_field_ids(ds, c)}


def _touches(op: Any, watched: set[int]) -> bool:
    """False only when the operation says which fields it wrote and none is watched."""
    name = type(op).__name__
    if name == "Update" and op.fields_modified:
        return bool(watched & set(op.fields_modified))
    if name == "DataReplacement":
        return any(watched & set(r.new_file.fields) for r in op.replacements)
    return True
