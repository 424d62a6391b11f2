"""Sensors on Lance tables: deferrable (as ``default_deferrable`` says), so waiting holds no worker slot.

What a sensor looks at is a probe (:mod:`geneva_provider.pipeline.table_probes`), the one its trigger
polls: ``poke`` looks once; deferred, the trigger polls it until the absolute deadline the sensor
computed from its ``timeout`` (a trigger reads no clock when it is built).

Imported by the scheduler and dag-processor: the table facts are imported inside ``poke``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout, AirflowSkipException

from geneva_provider.core.contracts.options import parse_count, rendered_later
from geneva_provider.core.docstrings import inherit_params
from geneva_provider.core.errors import GenevaError, InvalidArgumentError
from geneva_provider.core.table_events import SuccessEvent, TimeoutEvent, parse_event
from geneva_provider.hooks.errors import fails_without_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.openlineage import LineageMixin
from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger, GenevaTableChangedTrigger


class _GenevaDeferrableSensor(LineageMixin, BaseSensorOperator):
    """Deferrable as the deployment's ``[operators] default_deferrable`` says (or ``deferrable=``).

    It logs what it waits for and its absolute deadline when it starts, what it saw at each poke,
    and why it ended.  A package error that a retry cannot fix (an unknown or plain column, a bad
    watermark) fails the task once; a table that does not exist is waited for.

    :param table: table name in the Lance database (templated)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    :param deferrable: wait in the triggerer, holding no worker slot (default ``[operators] default_deferrable``)
    """

    lineage_reads_only = True  # OpenLineage: it reads the table it waits on

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__doc__ = inherit_params(cls.__doc__, _GenevaDeferrableSensor.__doc__)

    def __init__(self, *, table: str, lance_conn_id: str = LanceHook.default_conn_name,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.lance_conn_id = lance_conn_id
        self.deferrable = deferrable
        self._last_seen = "nothing (no poke yet)"

    def _trigger(self, deadline: float | None) -> GenevaTableChangedTrigger | GenevaColumnBackfilledTrigger:
        """The trigger that waits for this sensor until ``deadline``; its probe is what ``poke`` looks at."""
        raise NotImplementedError

    def waiting_for(self) -> str:
        """What the sensor waits for, in words (for its log)."""
        raise NotImplementedError

    def _deadline(self, context: Any) -> dt.datetime:
        """Start + ``timeout``, as Airflow times the sensor out.

        In reschedule mode the start is the first reschedule's record, which Airflow writes when the
        first run ends (every reschedule is a new run of ``execute``): every rescheduled run logs that one
        deadline, and the first run's estimate (now + ``timeout``) is earlier by its first poke. Otherwise
        now (a retry starts its timeout over, as Airflow's does).
        """
        start = None
        if self.reschedule and not self.deferrable and context.get("ti") is not None:
            start = context["ti"].get_first_reschedule_date(context)
        return (start or dt.datetime.now(dt.UTC)) + dt.timedelta(seconds=self.timeout)

    def _ended(self, reason: str, last_seen: bool = True) -> str:
        """Why the wait ended, naming the table, the watermark and (``last_seen``) what the last poke saw; logged."""
        message = f"{type(self).__name__} on table '{self.table}' waiting for {self.waiting_for()}: {reason}"
        if last_seen:
            message += f"; last seen: {self._last_seen}"
        self.log.info("Ended: %s", message)
        return message

    @fails_without_retry
    def poke(self, context: Any) -> PokeReturnValue:
        done, seen = LanceHook(self.lance_conn_id).look(self.table, self._trigger(None).probe())
        self._last_seen = seen.describe()
        self.log.info("%s: %s", "Done" if done else "Not yet", self._last_seen)
        return PokeReturnValue(is_done=done, xcom_value=seen.to_dict())

    @fails_without_retry
    def execute(self, context: Any) -> Any:
        deadline = self._deadline(context)
        when = deadline.isoformat(timespec="seconds")
        self.log.info("Waiting for %s; %s every %gs, deadline %s", self.waiting_for(),
                      "deferred to the triggerer, polling" if self.deferrable else f"{self.mode} mode, poking",
                      self.poke_interval, when)
        if not self.deferrable:
            try:
                result = super().execute(context)
            except AirflowSensorTimeout as exc:
                raise AirflowSensorTimeout(self._ended(f"not met by the deadline {when}")) from exc
            except AirflowSkipException as exc:  # soft_fail: a timeout or a failure, skipped
                self._ended(f"skipped (soft_fail): {exc.__cause__ or exc}")
                raise
            return result  # the last poke logged what it saw
        first = self.poke(context)  # no deferral when the condition already holds
        if first.is_done:
            return first.xcom_value
        self.defer(trigger=self._trigger(deadline.timestamp()), method_name="execute_complete")

    @fails_without_retry
    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        parsed = parse_event(event, f"{type(self).__name__} '{self.task_id}' on table '{self.table}'")
        if isinstance(parsed, SuccessEvent):
            result = parsed.seen()
            self.log.info("Done: %s holds (%s)", self.waiting_for(), result)
            return result
        message = self._ended(parsed.message, last_seen=False)  # the trigger's message says it
        if isinstance(parsed, TimeoutEvent):
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        error = parsed.payload.to_exc(message)
        if isinstance(error, GenevaError) and not error.retryable:
            raise error  # as the package's error, failed once (fails_without_retry)
        raise AirflowException(message)


class GenevaTableChangedSensor(_GenevaDeferrableSensor):
    """Waits until a table moves past a watermark.

    The watermark is a version above ``min_version``, more than ``min_rows`` rows, or -- with
    ``column`` -- rows whose column was never computed (see GenevaColumnBackfilledSensor).
    Returns (XCom) the table's ``version``, ``rows`` and ``fragments`` (and the column's backlog).

    :param min_version: fires once the table's version is above this (templated)
    :param min_rows: fires once the table holds more rows than this (templated)
    :param column: fires once rows lack this UDF column's value (templated)
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
    """Waits until no row of a table lacks ``column`` (for DAGs downstream of a backfill).

    A row lacks it when it was never computed: added since the last backfill, left out by a
    backfill's ``where``, or skipped by the UDF's error policy.  Rows whose inputs were updated
    after they were computed are not seen (that takes reading and fingerprinting the inputs: the
    next backfill's plan finds them).

    :param column: the UDF column every row must hold (templated)
    """

    template_fields: Sequence[str] = ("table", "column")

    def __init__(self, *, column: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.column = column

    def _trigger(self, deadline: float | None) -> GenevaColumnBackfilledTrigger:
        return GenevaColumnBackfilledTrigger(table=self.table, column=self.column, lance_conn_id=self.lance_conn_id,
                                             poll_interval=self.poke_interval, deadline=deadline)

    def waiting_for(self) -> str:
        return f"every row of table '{self.table}' to hold a computed value of column '{self.column}'"
