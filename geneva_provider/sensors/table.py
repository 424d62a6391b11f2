"""Sensors on Lance tables: deferrable by default, so waiting holds no worker slot.

Imported by the scheduler and dag-processor: the table facts are imported inside ``poke``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout, AirflowSkipException

from geneva_provider.hooks.lance import LanceHook
from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger, GenevaTableChangedTrigger


class _GenevaDeferrableSensor(BaseSensorOperator):
    """Deferrable unless ``deferrable=False``: waiting for new data is what these sensors do most."""

    def __init__(self, *, table: str, lance_conn_id: str = LanceHook.default_conn_name,
                 deferrable: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.lance_conn_id = lance_conn_id
        self.deferrable = deferrable

    def _dataset(self) -> Any:
        return LanceHook(self.lance_conn_id).dataset(self.table)

    def _trigger(self) -> Any:
        raise NotImplementedError

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)  # no deferral when the condition already holds
        if first.is_done:
            return first.xcom_value
        self.defer(trigger=self._trigger(), method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        status = event.get("status")
        if status == "success":
            return {k: v for k, v in event.items() if k != "status"}
        message = f"{type(self).__name__} on table '{self.table}': {event.get('message', status)}"
        if status == "timeout":
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        raise AirflowException(message)


class GenevaTableChangedSensor(_GenevaDeferrableSensor):
    """Waits until a table moves past a watermark.

    The watermark is a version above ``min_version``, more than ``min_rows`` rows, or -- with
    ``column`` -- rows whose column was never computed (new fragments since the last backfill).
    Returns (XCom) the table's ``version``, ``rows`` and ``fragments`` (and the column's backlog).
    """

    template_fields: Sequence[str] = ("table", "min_version", "min_rows", "column")

    def __init__(self, *, min_version: int | None = None, min_rows: int | None = None, column: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if min_version is None and min_rows is None and column is None:
            raise ValueError(f"{type(self).__name__} '{self.task_id}': set min_version, min_rows or column")
        self.min_version = min_version
        self.min_rows = min_rows
        self.column = column

    def _watermarks(self) -> tuple[int | None, int | None]:
        as_int = lambda v: int(v) if v not in (None, "", "None") else None  # noqa: E731 - templated values
        return as_int(self.min_version), as_int(self.min_rows)

    def poke(self, context: Any) -> PokeReturnValue:
        from geneva_provider.core.table_status import table_changed

        status = table_changed(self._dataset(), *self._watermarks(), self.column, self.table)
        return PokeReturnValue(is_done=status is not None, xcom_value={"table": self.table, **(status or {})})

    def _trigger(self) -> GenevaTableChangedTrigger:
        min_version, min_rows = self._watermarks()
        return GenevaTableChangedTrigger(table=self.table, lance_conn_id=self.lance_conn_id, min_version=min_version,
                                         min_rows=min_rows, column=self.column, poll_interval=self.poke_interval,
                                         timeout=self.timeout)


class GenevaColumnBackfilledSensor(_GenevaDeferrableSensor):
    """Waits until no fragment of a table lacks ``column`` (for DAGs downstream of a backfill)."""

    template_fields: Sequence[str] = ("table", "column")

    def __init__(self, *, column: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.column = column

    def poke(self, context: Any) -> PokeReturnValue:
        from geneva_provider.core.table_status import column_backlog

        backlog = column_backlog(self._dataset(), self.column, self.table)
        self.log.info("Column '%s' of table '%s': %d fragments (%d rows) not backfilled yet", self.column,
                      self.table, backlog["fragments_pending"], backlog["rows_pending"])
        return PokeReturnValue(is_done=backlog["fragments_pending"] == 0,
                               xcom_value={"table": self.table, "column": self.column, **backlog})

    def _trigger(self) -> GenevaColumnBackfilledTrigger:
        return GenevaColumnBackfilledTrigger(table=self.table, column=self.column, lance_conn_id=self.lance_conn_id,
                                             poll_interval=self.poke_interval, timeout=self.timeout)
