"""Triggers that wait, in the triggerer, for a Lance table to change or a column to be filled.

A trigger here is a way of waiting -- poll every ``poll_interval`` seconds until a probe holds or
an absolute ``deadline`` passes -- over a probe of :mod:`geneva_provider.pipeline.table_probes`
(what is looked at).  Everything a trigger does follows from its serialized kwargs: no clock is
read when it is built (the sensor turns its ``timeout`` into the ``deadline``), so the same
kwargs make the same trigger, a triggerer restart resumes the wait instead of starting it over,
and an event trigger for an ``AssetWatcher`` can reuse the probes with a loop of its own.

They carry the table name and connection id, never the storage location's credentials: the
triggerer looks the connection up itself.  Lance calls are blocking, so they run in a thread.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

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
