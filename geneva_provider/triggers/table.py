"""Triggers that wait, in the triggerer, for a Lance table to change or a column to be filled.

A trigger here is a way of waiting -- poll every ``poll_interval`` seconds until a probe holds or
an absolute ``deadline`` passes -- over a probe of :mod:`geneva_provider.pipeline.table_probes`
(what is looked at).  Everything a trigger does follows from its serialized kwargs: no clock is
read when it is built (the sensor turns its ``timeout`` into the ``deadline``), so the same
kwargs make the same trigger, a triggerer restart resumes the wait instead of starting it over,
and an event trigger for an ``AssetWatcher`` (:class:`LanceTableChangedTrigger`) loops over a table's versions.

They carry the table name and connection id, never the storage location's credentials: the
triggerer looks the connection up itself.  Lance calls are blocking, so they run in a thread.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from geneva_provider.core.table_events import ErrorEvent, SuccessEvent, TableSeen, TimeoutEvent
from geneva_provider.core.table_watch import TableLook, WatchArguments, WatchCursor
from geneva_provider.hooks.lance import LanceHook

if TYPE_CHECKING:
    from geneva_provider.pipeline.table_probes import Probe

_log = logging.getLogger(__name__)


class _PollingTrigger(BaseTrigger):
    """Polls a table through :meth:`probe` until it holds, or until ``deadline`` (an absolute time, seconds
    since the epoch; None: no deadline) passes.

    A table that does not exist is waited for like any other unmet condition (it may be created by
    an upstream DAG); the polls say so in the log, and so does a timeout's message.
    """

    def __init__(self, table: str, lance_conn_id: str, poll_interval: float, deadline: float | None) -> None:
        super().__init__()
        self.table = table
        self.lance_conn_id = lance_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = float(deadline) if deadline is not None else None

    def kwargs(self) -> dict[str, Any]:
        """What the trigger looks at besides the table: its own ``__init__`` kwargs."""
        raise NotImplementedError

    def probe(self) -> Probe:
        """What each poll checks (built from the kwargs)."""
        raise NotImplementedError

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "lance_conn_id": self.lance_conn_id, "poll_interval": self.poll_interval,
                 "deadline": self.deadline, **self.kwargs()})

    def poll(self) -> tuple[bool, TableSeen]:
        """One look at the table (blocking; the sensors' ``poke`` too): done?, and what was seen."""
        return LanceHook(self.lance_conn_id).look(self.table, self.probe())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = None
        while True:
            try:
                done, seen = await asyncio.to_thread(self.poll)
            except Exception as exc:  # noqa: BLE001 - delivered to execute_complete as an error event
                yield TriggerEvent(ErrorEvent.of(self.table, exc).to_dict())
                return
            if done:
                yield TriggerEvent(SuccessEvent(**seen.to_dict()).to_dict())
                return
            if seen.describe() != last:  # what changed, not every poll
                last = seen.describe()
                self.log.info("Not yet: %s", last)
            remaining = self.deadline - time.time() if self.deadline is not None else None
            if remaining is not None and remaining <= 0:
                when = dt.datetime.fromtimestamp(self.deadline or 0, dt.UTC).isoformat(timespec="seconds")
                yield TriggerEvent(TimeoutEvent(table=self.table, message=(
                    f"condition not met by the deadline {when}; last seen: {last}")).to_dict())
                return
            await asyncio.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining))


class GenevaTableChangedTrigger(_PollingTrigger):
    """Fires when the table passes a watermark (see :func:`~geneva_provider.pipeline.table_probes.table_changed`)."""

    def __init__(self, table: str, lance_conn_id: str = LanceHook.default_conn_name, min_version: int | None = None,
                 min_rows: int | None = None, column: str | None = None, poll_interval: float = 60.0,
                 deadline: float | None = None) -> None:
        super().__init__(table, lance_conn_id, poll_interval, deadline)
        self.min_version = min_version
        self.min_rows = min_rows
        self.column = column

    def kwargs(self) -> dict[str, Any]:
        return {"min_version": self.min_version, "min_rows": self.min_rows, "column": self.column}

    def probe(self) -> Probe:
        from geneva_provider.pipeline.table_probes import table_changed

        return table_changed(self.min_version, self.min_rows, self.column)


class GenevaColumnBackfilledTrigger(_PollingTrigger):
    """Fires when no row of the table still lacks ``column``.

    See :func:`~geneva_provider.core.table_status.column_backlog` for what counts as lacking it.
    """

    def __init__(self, table: str, column: str, lance_conn_id: str = LanceHook.default_conn_name,
                 poll_interval: float = 60.0, deadline: float | None = None) -> None:
        super().__init__(table, lance_conn_id, poll_interval, deadline)
        self.column = column

    def kwargs(self) -> dict[str, Any]:
        return {"column": self.column}

    def probe(self) -> Probe:
        from geneva_provider.pipeline.table_probes import ColumnBackfilled

        return ColumnBackfilled(column=self.column)


CURSOR_KEY = "geneva.reported_version"  # the asset state store key of a watcher's last reported table version
INCARNATION_KEY = "geneva.reported_incarnation"  # "<version>@<commit time>": which table that version was of


class LanceTableChangedTrigger(BaseEventTrigger):
    """An ``AssetWatcher``'s trigger: an event each time the table's version moves through commits that matter.

    What matters is :func:`~geneva_provider.pipeline.table_changes.changes_since`'s answer: other writers'
    appends, deletes, updates (``merge_insert`` too), overwrites, replaced columns (``operations``), touching
    ``columns`` when given -- never this package's own commits (column writes, view refreshes, schema changes),
    nor a compaction's, so a DAG that listens to a table and backfills it does not start itself.  A commit whose
    transaction Lance no longer has (``cleanup_old_versions``) is reported as ``Unknown``.  The event's payload
    is :class:`~geneva_provider.core.table_events.TableChanged` (versions from -> to, operations, rows added /
    deleted / updated): the asset event's ``extra["payload"]``.

    It misses nothing: a table that appears after the watcher started, or is dropped and re-created (another
    incarnation: :mod:`geneva_provider.core.table_watch`), is reported whole (``created``, from version 0,
    with every row it holds).  It never dies: a look that cannot read the table (a ``<table>.lance`` directory
    with no manifest yet, a storage error) is logged and tried again at the next poll, and a move it cannot
    analyse is reported as ``Unknown`` rather than missed; one unreadable table never stops the other watchers'
    shared poll.  The arguments are checked when it is built (:class:`~geneva_provider.core.table_watch.
    WatchArguments`).

    The last version reported is the cursor, kept in the asset state store (Airflow 3.3) under
    :data:`CURSOR_KEY` (and its incarnation under :data:`INCARNATION_KEY`), written once the event was handed
    to the triggerer: a triggerer restart resumes from it, so a change made while it was down is reported when
    it is back, and none twice.  With no cursor yet (the watcher's first start) an existing table's version is
    recorded and nothing is reported; a table that does not exist yet is recorded as version 0, so it is
    reported when it appears.  Outside a watcher (no asset state store) the cursor lives in the trigger.  The
    kwargs are the table, the connection id (never its secrets), the poll interval and the filters: no clock,
    so the same kwargs make the same trigger.

    Triggers over one connection with one poll interval share one poll loop (the 3.3 shared-stream API): it
    reads the version of every table of the database each ``poll_interval`` seconds; each trigger reads its
    table's transactions only when its version moved.
    """

    def __init__(self, table: str, lance_conn_id: str = LanceHook.default_conn_name, poll_interval: float = 10.0,
                 operations: list[str] | None = None, columns: list[str] | None = None) -> None:
        super().__init__()
        args = WatchArguments.check(table, lance_conn_id, poll_interval, operations, columns)
        self.table = args.table
        self.lance_conn_id = args.lance_conn_id
        self.poll_interval = args.poll_interval
        self.operations = args.operations
        self.columns = args.columns
        self._memory: WatchCursor | None = None  # the cursor when no asset state store was given
        self._next: WatchCursor | None = None  # where the cursor goes once the pending event was handed over
        self._problem: str | None = None  # the last problem logged, so a lasting one is logged once

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "lance_conn_id": self.lance_conn_id, "poll_interval": self.poll_interval,
                 "operations": self.operations, "columns": self.columns})

    # ------------------------------------------------------------------ the cursor
    async def cursor(self) -> WatchCursor | None:
        """The last version reported (or recorded at the first start) and its incarnation, None before any look."""
        if self.asset_state_store is None:
            return self._memory
        version = await self.asset_state_store.aget(CURSOR_KEY)
        tag = await self.asset_state_store.aget(INCARNATION_KEY) if version is not None else None
        return WatchCursor.from_store(version, tag)

    async def set_cursor(self, cursor: WatchCursor) -> None:
        self._memory = cursor
        if self.asset_state_store is not None:
            await self.asset_state_store.aset(CURSOR_KEY, cursor.version)
            await self.asset_state_store.aset(INCARNATION_KEY, cursor.tag())

    # ------------------------------------------------------------------ one look
    def look(self) -> TableLook:
        """The table's latest version and its commit time, or why not (blocking; never raises)."""
        from geneva_provider.pipeline.table_changes import look_at

        return look_at(lambda: LanceHook(self.lance_conn_id).dataset(self.table))

    def changes(self, cursor: WatchCursor) -> tuple[WatchCursor, dict[str, Any] | None]:
        """(the version looked at, the payload of what changed after ``cursor`` or None) -- blocking."""
        from geneva_provider.pipeline.table_changes import commit_time, watched_change

        ds = LanceHook(self.lance_conn_id).dataset(self.table)
        change = watched_change(ds, self.table, cursor, self.operations, self.columns)
        seen = WatchCursor(version=ds.version, committed_at=commit_time(ds))
        return seen, change.to_dict() if change is not None else None

    async def on_look(self, look: TableLook) -> TriggerEvent | None:
        """What a look makes of the table: the first look records it (or its absence); a move or a new
        incarnation is analysed, and the cursor advanced past the package's own commits at once, or past
        others' once their event was handed over (by :meth:`advance`).  Never raises."""
        cursor = await self.cursor()
        if look.problem is not None:
            if look.problem != self._problem:
                self.log.warning("Cannot read table '%s' (looking again in %ss): %s", self.table,
                                 self.poll_interval, look.problem)
            self._problem = look.problem
            if cursor is None:  # being made, most likely: whatever it holds once readable is reported
                await self.set_cursor(WatchCursor(version=0))
            return None
        self._problem = None
        if look.version is None:
            if cursor is None:
                self.log.info("Table '%s' does not exist yet: it will be reported when it appears", self.table)
                await self.set_cursor(WatchCursor(version=0))
            return None
        if cursor is None:
            self.log.info("Watching table '%s' from version %d", self.table, look.version)
            await self.set_cursor(WatchCursor.of(look))
            return None
        if cursor.holds(look):
            if cursor.committed_at is None:  # a cursor kept before incarnations were: learn it
                await self.set_cursor(WatchCursor.of(look))
            return None
        return await self._analyse(cursor, look)

    async def _analyse(self, cursor: WatchCursor, look: TableLook) -> TriggerEvent | None:
        from geneva_provider.core.table_events import TableChanged

        try:
            seen, payload = await asyncio.to_thread(self.changes, cursor)
        except Exception as exc:  # noqa: BLE001 - a move that cannot be analysed is reported, never missed
            from geneva_provider.core.filters import lance_reason
            from geneva_provider.core.table_watch import UNKNOWN

            self.log.warning("Table '%s' moved from version %d to %s but its commits cannot be read (%s: %s): "
                             "reported as %s", self.table, cursor.version, look.version, type(exc).__name__,
                             lance_reason(exc, 300), UNKNOWN)
            seen = WatchCursor.of(look)
            payload = TableChanged(table=self.table, from_version=cursor.version, to_version=seen.version,
                                   operations=[UNKNOWN], rows_added=None, rows_deleted=None,
                                   rows_updated=None).to_dict()
        if payload is None:
            self.log.info("Table '%s' moved to version %d through commits that do not matter here", self.table,
                          seen.version)
            await self.set_cursor(seen)
            return None
        self.log.info("Changed: %s", TableChanged.model_validate(payload).describe())
        self._next = seen
        return TriggerEvent(payload)

    async def advance(self, event: TriggerEvent) -> None:
        nxt = self._next
        if nxt is None or nxt.version != int(event.payload["to_version"]):
            nxt = WatchCursor(version=int(event.payload["to_version"]))
        self._next = None
        await self.set_cursor(nxt)

    # ------------------------------------------------------------------ the two ways of polling
    async def _step(self, look: TableLook) -> TriggerEvent | None:
        """:meth:`on_look`, with any failure of its own (the asset state store's, say) logged: the watcher lives on
        and looks again at the next poll."""
        try:
            return await self.on_look(look)
        except Exception:  # a watcher never dies; the cursor is unmoved, so nothing is lost
            self.log.exception("The look at table '%s' failed (looking again in %ss)", self.table, self.poll_interval)
            return None

    async def _handed_over(self, event: TriggerEvent) -> None:
        try:
            await self.advance(event)
        except Exception:  # the cursor stays: the change is reported again (at least once)
            self.log.exception("Could not store the cursor of table '%s' after its event", self.table)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            event = await self._step(await asyncio.to_thread(self.look))
            if event is not None:
                yield event
                await self._handed_over(event)
            await asyncio.sleep(self.poll_interval)

    def shared_stream_key(self) -> tuple[str, ...]:
        return ("geneva-lance-versions", self.lance_conn_id, str(self.poll_interval))

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[dict[str, TableLook]]:
        """Every ``poll_interval`` seconds: a look at each table of the connection's database.

        A round whose listing of the database fails is logged and skipped: the stream never ends.
        """
        hook_id, interval = kwargs.get("lance_conn_id", LanceHook.default_conn_name), float(kwargs["poll_interval"])
        while True:
            try:
                looks = await asyncio.to_thread(_table_looks, hook_id)
            except Exception as exc:  # noqa: BLE001 - the shared poll of every watcher on the connection
                from geneva_provider.core.filters import lance_reason

                _log.warning("Cannot list the tables of connection '%s' (looking again in %ss): "
                                          "%s: %s", hook_id, interval, type(exc).__name__, lance_reason(exc, 300))
            else:
                yield looks
            await asyncio.sleep(interval)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for looks in shared_stream:
            event = await self._step(looks.get(self.table) or TableLook())
            if event is not None:
                yield event
                await self._handed_over(event)


def _table_looks(lance_conn_id: str) -> dict[str, TableLook]:
    """Table name -> a look at it, of every table of the connection's database (blocking).

    A table that cannot be read is a look with its problem, for its own watcher to log: never an error of the
    poll every watcher on the connection shares.
    """
    from geneva_provider.pipeline.table_changes import look_at

    db = LanceHook(lance_conn_id).database
    return {name: look_at(lambda name=name: db.open_table(name).dataset()) for name in db.table_names()}
