"""What a wait on a Lance table looks at, apart from how it waits (pipeline: never sees Airflow).

A probe is a typed, JSON-able condition on one table -- a version above N, more than N rows,
rows whose computed column was never computed, a column computed in every row, or any of these --
and ``probe.check(ds, table)`` says whether it holds on a dataset and what was seen
(:class:`~geneva_provider.core.table_events.TableSeen`).  How to wait is the caller's: a sensor's
poke, a deferrable trigger's polls until a deadline, an event trigger's endless polls for an
``AssetWatcher``.  A probe holds no clock and no connection, so the same kwargs always make the
same probe (``Probe`` validates one back from its ``model_dump``).

What a probe may read is what :mod:`geneva_provider.core.table_status` reads: the manifest and a
computed column's fingerprints.  This module is imported where DAGs are parsed (by the sensors and
triggers): pydantic only at import time; lance, numpy and pyarrow load on the first check.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter

from geneva_provider.core.table_events import TableSeen

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.table_status import ColumnBacklog, TableStatus


class TableLook:
    """One look at a dataset: its status and each column's backlog, read once however many probes ask."""

    def __init__(self, ds: Dataset, table: str = "") -> None:
        self.ds = ds
        self.table = table or str(ds.uri)
        self._backlogs: dict[str, ColumnBacklog] = {}

    @cached_property
    def status(self) -> TableStatus:
        from geneva_provider.core.table_status import table_status

        return table_status(self.ds)

    def backlog(self, column: str) -> ColumnBacklog:
        """Rows whose ``column`` was never computed; ColumnError unless a job computes ``column``."""
        from geneva_provider.core.functions.udf import lead_column
        from geneva_provider.core.table_status import column_backlog

        if column not in self._backlogs:
            check_computed_column(self.ds, column, self.table)
            self._backlogs[column] = column_backlog(self.ds, lead_column(self.ds.schema, column), self.table)
        return self._backlogs[column]


def check_computed_column(ds: Dataset, column: str, table: str) -> None:
    """ColumnError unless a job writes ``column``: a UDF column, or a column a view's refresh copies.

    A plain column is never "pending", so waiting on it would succeed at once for the wrong reason;
    the error is the one a backfill of that column raises.
    """
    from geneva_provider.core.functions.udf import lead_column
    from geneva_provider.core.views.meta import META_QUERY, view_info
    from geneva_provider.pipeline.columns.plan_backfill import udf_of

    metadata = ds.schema.metadata or {}
    if META_QUERY.encode() in metadata and column in view_info(metadata, table).query.columns:
        return
    udf_of(ds, table, lead_column(ds.schema, column))


class _Probe(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def check(self, ds: Dataset, table: str = "") -> tuple[bool, TableSeen]:
        """Whether the condition holds on ``ds`` (the table ``table``), and what was seen."""
        return self.see(TableLook(ds, table))

    def see(self, look: TableLook) -> tuple[bool, TableSeen]:
        raise NotImplementedError


def _status_seen(look: TableLook) -> TableSeen:
    return TableSeen(**look.status.model_dump())


class VersionAbove(_Probe):
    """The table's version is above ``version``."""

    kind: Literal["version_above"] = "version_above"
    version: NonNegativeInt

    def see(self, look: TableLook) -> tuple[bool, TableSeen]:
        return look.status.version > self.version, _status_seen(look)


class RowsAbove(_Probe):
    """The table holds more than ``rows`` live rows."""

    kind: Literal["rows_above"] = "rows_above"
    rows: NonNegativeInt

    def see(self, look: TableLook) -> tuple[bool, TableSeen]:
        return look.status.rows > self.rows, _status_seen(look)


class ColumnPending(_Probe):
    """Some row's ``column`` was never computed: work for the next backfill (see ``column_backlog``)."""

    kind: Literal["column_pending"] = "column_pending"
    column: str

    def see(self, look: TableLook) -> tuple[bool, TableSeen]:
        backlog = look.backlog(self.column)
        return backlog.rows_pending > 0, TableSeen(**look.status.model_dump(), column=self.column,
                                                   rows_pending=backlog.rows_pending,
                                                   fragments_pending=backlog.fragments_pending)


class ColumnBackfilled(_Probe):
    """No row's ``column`` lacks a computed value (values whose inputs changed since are not seen)."""

    kind: Literal["column_backfilled"] = "column_backfilled"
    column: str

    def see(self, look: TableLook) -> tuple[bool, TableSeen]:
        backlog = look.backlog(self.column)
        return backlog.rows_pending == 0, TableSeen(column=self.column, **backlog.model_dump())


class AnyOf(_Probe):
    """Any of ``probes`` holds; what was seen is what they all saw (each is checked, so an error is never hidden)."""

    kind: Literal["any_of"] = "any_of"
    probes: list[Probe] = Field(min_length=1)

    def see(self, look: TableLook) -> tuple[bool, TableSeen]:
        looks = [probe.see(look) for probe in self.probes]
        seen: dict[str, Any] = {}
        for _, part in looks:
            seen.update(part.model_dump(exclude_unset=True))
        return any(done for done, _ in looks), TableSeen(**seen)


Probe = Annotated[VersionAbove | RowsAbove | ColumnPending | ColumnBackfilled | AnyOf, Field(discriminator="kind")]
AnyOf.model_rebuild()
PROBE: TypeAdapter[VersionAbove | RowsAbove | ColumnPending | ColumnBackfilled | AnyOf] = TypeAdapter(Probe)


def table_changed(min_version: int | None = None, min_rows: int | None = None, column: str | None = None) -> Probe:
    """The probe of a table passing a watermark: a version above ``min_version``, more than ``min_rows`` rows,
    or rows whose ``column`` was never computed -- any of those set (and what was seen includes the table's status).
    """
    probes: list[Probe] = [VersionAbove(version=min_version)] if min_version is not None else []
    probes += [RowsAbove(rows=min_rows)] if min_rows is not None else []
    probes += [ColumnPending(column=column)] if column is not None else []
    if not probes:
        from geneva_provider.core.errors import InvalidArgumentError

        raise InvalidArgumentError("a table-changed probe needs min_version, min_rows or column")
    return AnyOf(probes=probes) if len(probes) != 1 else probes[0]
