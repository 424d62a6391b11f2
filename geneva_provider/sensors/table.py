"""Sensors on Lance tables: deferrable (as ``default_deferrable`` says), so waiting holds no worker slot.

Imported by the scheduler and dag-processor: the table facts are imported inside ``poke``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout, AirflowSkipException

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.options import parse_count, rendered_later
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.triggers.table import (
    GenevaColumnBackfilledTrigger,
    GenevaTableChangedTrigger,
    check_computed_column,
)


class _GenevaDeferrableSensor(BaseSensorOperator):
    """Deferrable as the deployment's ``[operators] default_deferrable`` says (or ``deferrable=``).

    It logs what it waits for and its absolute deadline when it starts, and why it ended.
    """

    def __init__(self, *, table: str, lance_conn_id: str = LanceHook.default_conn_name,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.lance_conn_id = lance_conn_id
        self.deferrable = deferrable

    def _dataset(self) -> Any:
        return LanceHook(self.lance_conn_id).dataset(self.table)

    def _trigger(self, deadline: float | None) -> Any:
        raise NotImplementedError

    def waiting_for(self) -> str:
        """What the sensor waits for, in words (for its log)."""
        raise NotImplementedError

    def execute(self, context: Any) -> Any:
        deadline = time.time() + self.timeout if self.timeout is not None else None
        when = dt.datetime.fromtimestamp(deadline, dt.UTC).isoformat(timespec="seconds") if deadline else "none"
        self.log.info("Waiting for %s; %s every %gs, deadline %s", self.waiting_for(),
                      "deferred to the triggerer, polling" if self.deferrable else "poking", self.poke_interval, when)
        if not self.deferrable:
            result = super().execute(context)
            self.log.info("Done: %s", result)
            return result
        first = self.poke(context)  # no deferral when the condition already holds
        if first.is_done:
            self.log.info("Done at once: %s", first.xcom_value)
            return first.xcom_value
        self.defer(trigger=self._trigger(deadline), method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        status = event.get("status")
        if status == "success":
            result = {k: v for k, v in event.items() if k != "status"}
            self.log.info("Done: %s holds (%s)", self.waiting_for(), result)
            return result
        message = f"{type(self).__name__} on table '{self.table}' waiting for {self.waiting_for()}: " \
                  f"{event.get('message', status)}"
        self.log.info("Ended: %s", message)
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
            raise InvalidArgumentError(f"{type(self).__name__} '{self.task_id}' on table '{self.table}': "
                                       "set min_version, min_rows or column")
        self.min_version = min_version
        self.min_rows = min_rows
        self.column = column
        self._watermarks(only_known=True)  # bad literals fail when the DAG is parsed; templates once rendered

    def _watermarks(self, only_known: bool = False) -> tuple[int | None, int | None]:
        """The (rendered) watermarks as non-negative ints, or InvalidArgumentError naming the argument."""
        job = f"{type(self).__name__} '{self.task_id}' on table '{self.table}'"
        return tuple(None if only_known and rendered_later(value) else parse_count(value, name, job, zero=True)
                     for name, value in (("min_version", self.min_version), ("min_rows", self.min_rows)))

    def poke(self, context: Any) -> PokeReturnValue:
        from geneva_provider.core.table_status import table_changed

        ds = self._dataset()
        if self.column is not None:
            check_computed_column(ds, self.column, self.table)
        status = table_changed(ds, *self._watermarks(), self.column, self.table)
        return PokeReturnValue(is_done=status is not None, xcom_value={"table": self.table, **(status or {})})

    def _trigger(self, deadline: float | None) -> GenevaTableChangedTrigger:
        min_version, min_rows = self._watermarks()
        return GenevaTableChangedTrigger(table=self.table, lance_conn_id=self.lance_conn_id, min_version=min_version,
                                         min_rows=min_rows, column=self.column, poll_interval=self.poke_interval,
                                         deadline=deadline)

    def waiting_for(self) -> str:
        min_version, min_rows = self._watermarks()
        wants = [f"a version above {min_version}" if min_version is not None else "",
                 f"more than {min_rows} rows" if min_rows is not None else "",
                 f"rows whose column '{self.column}' was never computed" if self.column else ""]
        return f"table '{self.table}' to reach " + " or ".join(w for w in wants if w)


class GenevaColumnBackfilledSensor(_GenevaDeferrableSensor):
    """Waits until no fragment of a table lacks ``column`` (for DAGs downstream of a backfill)."""

    template_fields: Sequence[str] = ("table", "column")

    def __init__(self, *, column: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.column = column

    def poke(self, context: Any) -> PokeReturnValue:
        from geneva_provider.core.table_status import column_backlog

        ds = self._dataset()
        check_computed_column(ds, self.column, self.table)
        backlog = column_backlog(ds, self.column, self.table)
        self.log.info("Column '%s' of table '%s': %d fragments (%d rows) not backfilled yet", self.column,
                      self.table, backlog["fragments_pending"], backlog["rows_pending"])
        return PokeReturnValue(is_done=backlog["fragments_pending"] == 0,
                               xcom_value={"table": self.table, "column": self.column, **backlog})

    def _trigger(self, deadline: float | None) -> GenevaColumnBackfilledTrigger:
        return GenevaColumnBackfilledTrigger(table=self.table, column=self.column, lance_conn_id=self.lance_conn_id,
                                             poll_interval=self.poke_interval, deadline=deadline)

    def waiting_for(self) -> str:
        return f"every fragment of table '{self.table}' to hold column '{self.column}'"
