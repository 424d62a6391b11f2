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
    epoch) passes -- absolute, so a triggerer restart resumes the wait instead of starting it over."""

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

    def check(self) -> dict[str, Any] | None:
        """Returns the event payload when done, else None (runs in a thread)."""
        raise NotImplementedError

    def _dataset(self) -> Any:
        return LanceHook(self.lance_conn_id).dataset(self.table)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                payload = await asyncio.to_thread(self.check)
            except Exception as exc:  # noqa: BLE001 - delivered to execute_complete as an error event
                yield TriggerEvent({"status": "error", "table": self.table, "message": str(exc)})
                return
            if payload is not None:
                yield TriggerEvent({"status": "success", "table": self.table, **payload})
                return
            remaining = self.deadline - time.time() if self.deadline is not None else self.poll_interval
            if remaining <= 0:
                when = dt.datetime.fromtimestamp(self.deadline, dt.UTC).isoformat(timespec="seconds")
                yield TriggerEvent({"status": "timeout", "table": self.table,
                                    "message": f"condition not met by the deadline {when}"})
                return
            await asyncio.sleep(min(self.poll_interval, remaining))


class GenevaTableChangedTrigger(_PollingTrigger):
    """Fires when the table passes a watermark (see :func:`table_changed`)."""

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

    def check(self) -> dict[str, Any] | None:
        from geneva_provider.core.table_status import table_changed

        ds = self._dataset()
        if self.column is not None:
            check_computed_column(ds, self.column, self.table)
        return table_changed(ds, self.min_version, self.min_rows, self.column, self.table)


class GenevaColumnBackfilledTrigger(_PollingTrigger):
    """Fires when no fragment of the table still lacks ``column``."""

    def __init__(self, table: str, column: str, lance_conn_id: str = LanceHook.default_conn_name,
                 poll_interval: float = 60.0, deadline: float | None = None, timeout: float | None = None) -> None:
        super().__init__(table, lance_conn_id, poll_interval, deadline, timeout)
        self.column = column

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {**self._common(), "column": self.column})

    def check(self) -> dict[str, Any] | None:
        from geneva_provider.core.table_status import column_backlog

        ds = self._dataset()
        check_computed_column(ds, self.column, self.table)
        backlog = column_backlog(ds, self.column, self.table)
        return {"column": self.column, **backlog} if backlog["fragments_pending"] == 0 else None
