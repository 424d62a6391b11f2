"""Triggers that wait, in the triggerer, for a Lance table to change or a column to be filled.

They carry the table name and connection id, never the storage location's credentials: the
triggerer looks the connection up itself.  Lance calls are blocking, so they run in a thread.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from geneva_provider.core.table_events import ErrorEvent, SuccessEvent, TableSeen, TimeoutEvent
from geneva_provider.hooks.lance import LanceHook


def check_computed_column(ds: Any, column: str, table: str) -> None:
    """ColumnError unless a job writes ``column``: a UDF column, or a column a view's refresh copies.

    A plain column is never "pending", so waiting on it would succeed at once for the wrong reason;
    the error is the one a backfill of that column raises.
    """
    from geneva_provider.core.view_meta import META_QUERY, view_info
    from geneva_provider.pipeline.plan_backfill import udf_of

    metadata = ds.schema.metadata or {}
    if META_QUERY.encode() in metadata and column in view_info(metadata, table).query.columns:
        return
    udf_of(ds, table, column)


class _PollingTrigger(BaseTrigger):
    """Polls a table until ``check`` says done, or until ``deadline`` (an absolute time, seconds since the
    epoch) passes -- absolute, so a triggerer restart resumes the wait instead of starting it over.

    A table that does not exist is waited for like any other unmet condition (it may be created by
    an upstream DAG); the polls say so in the log, and so does a timeout's message.
    """

    def __init__(self, table: str, lance_conn_id: str, poll_interval: float, deadline: float | None = None,
                 timeout: float | None = None) -> None:
        super().__init__()
        self.table = table
        self.lance_conn_id = lance_conn_id
        self.poll_interval = float(poll_interval)
        if deadline is None and timeout is not None:  # a relative timeout starts now
            deadline = time.time() + float(timeout)
        self.deadline = float(deadline) if deadline is not None else None

    def _common(self) -> dict[str, Any]:
        return {"table": self.table, "lance_conn_id": self.lance_conn_id, "poll_interval": self.poll_interval,
                "deadline": self.deadline}

    def check(self, ds: Any) -> tuple[bool, TableSeen]:
        """Whether the condition holds on ``ds``, and what was seen (the success event's payload)."""
        raise NotImplementedError

    def poll(self) -> tuple[bool, TableSeen]:
        """One look at the table (blocking; the sensors' ``poke`` too): done?, and what was seen."""
        from geneva_provider.core.errors import TableNotFoundError

        try:
            ds = LanceHook(self.lance_conn_id).dataset(self.table)
        except TableNotFoundError:
            return False, TableSeen(table=self.table, exists=False)
        done, seen = self.check(ds)
        return done, TableSeen(table=self.table, **seen.model_dump(exclude_unset=True, exclude={"table"}))

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
            remaining = self.deadline - time.time() if self.deadline is not None else self.poll_interval
            if remaining <= 0:
                when = dt.datetime.fromtimestamp(self.deadline, dt.UTC).isoformat(timespec="seconds")
                yield TriggerEvent(TimeoutEvent(table=self.table, message=(
                    f"condition not met by the deadline {when}; last seen: {last}")).to_dict())
                return
            await asyncio.sleep(min(self.poll_interval, remaining))


class GenevaTableChangedTrigger(_PollingTrigger):
    """Fires when the table passes a watermark (see :func:`~geneva_provider.core.table_status.table_changed`)."""

    def __init__(self, table: str, lance_conn_id: str = LanceHook.default_conn_name, min_version: int | None = None,
                 min_rows: int | None = None, column: str | None = None, poll_interval: float = 60.0,
                 deadline: float | None = None, timeout: float | None = None) -> None:
        super().__init__(table, lance_conn_id, poll_interval, deadline, timeout)
        self.min_version = min_version
        self.min_rows = min_rows
        self.column = column

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {**self._common(), "min_version": self.min_version, "min_rows": self.min_rows, "column": self.column})

    def check(self, ds: Any) -> tuple[bool, TableSeen]:
        from geneva_provider.core.table_status import table_changed

        if self.column is not None:
            check_computed_column(ds, self.column, self.table)
        return table_changed(ds, self.min_version, self.min_rows, self.column, self.table)


class GenevaColumnBackfilledTrigger(_PollingTrigger):
    """Fires when no row of the table still lacks ``column``.

    See :func:`~geneva_provider.core.table_status.column_backlog` for what counts as lacking it.
    """

    def __init__(self, table: str, column: str, lance_conn_id: str = LanceHook.default_conn_name,
                 poll_interval: float = 60.0, deadline: float | None = None, timeout: float | None = None) -> None:
        super().__init__(table, lance_conn_id, poll_interval, deadline, timeout)
        self.column = column

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {**self._common(), "column": self.column})

    def check(self, ds: Any) -> tuple[bool, TableSeen]:
        from geneva_provider.core.table_status import column_backlog

        check_computed_column(ds, self.column, self.table)
        backlog = column_backlog(ds, self.column, self.table)
        return backlog.rows_pending == 0, TableSeen(column=self.column, **backlog.model_dump())
