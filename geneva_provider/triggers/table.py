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
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from geneva_provider.core.table_events import ErrorEvent, SuccessEvent, TableSeen, TimeoutEvent
from geneva_provider.hooks.lance import LanceHook

if TYPE_CHECKING:
    from geneva_provider.pipeline.table_probes import Probe


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


class LanceTableChangedTrigger(BaseEventTrigger):
    """An ``AssetWatcher``'s trigger: an event each time the table's version moves through commits that matter.

    What matters is :func:`~geneva_provider.pipeline.table_changes.changes_since`'s answer: other writers'
    appends, deletes, updates (``merge_insert`` too), overwrites, replaced columns (``operations``), touching
    ``columns`` when given -- never this package's own commits (column writes, view refreshes, schema changes),
    nor a compaction's, so a DAG that listens to a table and backfills it does not start itself.  The event's
    payload is :class:`~geneva_provider.core.table_events.TableChanged` (versions from -> to, operations, rows
    added / deleted / updated): the asset event's ``extra["payload"]``.

    The last version reported is the cursor, kept in the asset state store (Airflow 3.3) under
    :data:`CURSOR_KEY`, written once the event was handed to the triggerer: a triggerer restart resumes from
    it, so a change made while it was down is reported when it is back, and none twice.  With no cursor yet
    (the watcher's first start) the table's version is recorded and nothing is reported.  Outside a watcher
    (no asset state store) the cursor lives in the trigger.  The kwargs are the table, the connection id
    (never its secrets), the poll interval and the filters: no clock, so the same kwargs make the same trigger.

    Triggers over one connection with one poll interval share one poll loop (the 3.3 shared-stream API): it
    reads the version of every table of the database each ``poll_interval`` seconds; each trigger reads its
    table's transactions only when its version moved.
    """

    def __init__(self, table: str, lance_conn_id: str = LanceHook.default_conn_name, poll_interval: float = 10.0,
                 operations: list[str] | None = None, columns: list[str] | None = None) -> None:
        super().__init__()
        self.table = table
        self.lance_conn_id = lance_conn_id
        self.poll_interval = float(poll_interval)
        self.operations = list(operations) if operations is not None else None
        self.columns = list(columns) if columns is not None else None
        self._memory: int | None = None  # the cursor when no asset state store was given

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "lance_conn_id": self.lance_conn_id, "poll_interval": self.poll_interval,
                 "operations": self.operations, "columns": self.columns})

    # ------------------------------------------------------------------ the cursor
    async def cursor(self) -> int | None:
        """The last version reported (or recorded at the first start), None before the first look."""
        if self.asset_state_store is None:
            return self._memory
        value = await self.asset_state_store.aget(CURSOR_KEY)
        return int(value) if value is not None else None  # type: ignore[arg-type]

    async def set_cursor(self, version: int) -> None:
        self._memory = version
        if self.asset_state_store is not None:
            await self.asset_state_store.aset(CURSOR_KEY, version)

    # ------------------------------------------------------------------ one look
    def version(self) -> int | None:
        """The table's latest version (blocking), None while it does not exist."""
        from geneva_provider.core.errors import TableNotFoundError

        try:
            return int(LanceHook(self.lance_conn_id).dataset(self.table).version)
        except TableNotFoundError:
            return None

    def changes(self, since: int) -> tuple[int, dict[str, Any] | None]:
        """(the version looked at, the payload of what changed after ``since`` or None) -- blocking."""
        from geneva_provider.pipeline.table_changes import changes_since

        ds = LanceHook(self.lance_conn_id).dataset(self.table)
        change = changes_since(ds, self.table, since, self.operations, self.columns)
        return ds.version, change.to_dict() if change is not None else None

    async def on_version(self, version: int | None) -> TriggerEvent | None:
        """What a look that saw ``version`` makes of it: the first look records it; a move is analysed, and the
        cursor advanced past the package's own commits at once, or past others' once their event was handed over
        (by :meth:`advance`)."""
        if version is None:
            return None
        cursor = await self.cursor()
        if cursor is None:
            self.log.info("Watching table '%s' from version %d", self.table, version)
            await self.set_cursor(version)
            return None
        if version == cursor:
            return None
        seen, payload = await asyncio.to_thread(self.changes, cursor)
        if payload is None:
            self.log.info("Table '%s' moved to version %d through commits that do not matter here", self.table, seen)
            await self.set_cursor(seen)
            return None
        from geneva_provider.core.table_events import TableChanged

        self.log.info("Changed: %s", TableChanged.model_validate(payload).describe())
        return TriggerEvent(payload)

    async def advance(self, event: TriggerEvent) -> None:
        await self.set_cursor(int(event.payload["to_version"]))

    # ------------------------------------------------------------------ the two ways of polling
    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            event = await self.on_version(await asyncio.to_thread(self.version))
            if event is not None:
                yield event
                await self.advance(event)
            await asyncio.sleep(self.poll_interval)

    def shared_stream_key(self) -> tuple[str, ...]:
        return ("geneva-lance-versions", self.lance_conn_id, str(self.poll_interval))

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[dict[str, int]]:
        """Every ``poll_interval`` seconds: the version of each table of the connection's database."""
        hook_id, interval = kwargs.get("lance_conn_id", LanceHook.default_conn_name), float(kwargs["poll_interval"])
        while True:
            yield await asyncio.to_thread(_table_versions, hook_id)
            await asyncio.sleep(interval)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for versions in shared_stream:
            event = await self.on_version(versions.get(self.table))
            if event is not None:
                yield event
                await self.advance(event)


def _table_versions(lance_conn_id: str) -> dict[str, int]:
    """Table name -> latest version, of every table of the connection's database (blocking)."""
    from geneva_provider.core.errors import TableNotFoundError

    db = LanceHook(lance_conn_id).database
    versions = {}
    for name in db.table_names():
        try:
            versions[name] = int(db.open_table(name).dataset().version)
        except TableNotFoundError:  # dropped between the listing and the look
            continue
    return versions
