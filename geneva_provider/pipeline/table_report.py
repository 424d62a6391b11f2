"""What ``Table.status()`` and ``geneva-provider table status`` say of a table: its UDF columns' rows valid, stale
and missing, a view's lag behind its source, and each index's rows indexed and unindexed.

Unlike a probe (``core/table_status.py``), this reads every UDF column's inputs, to fingerprint them as the next
backfill's plan does (:func:`~geneva_provider.pipeline.columns.plan_backfill.column_state`): in this process, with
no Spark job and no change to the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geneva_provider.core.catalog import TableResolver
from geneva_provider.core.functions.udf import udf_column_info
from geneva_provider.core.refs import TableRef
from geneva_provider.core.table_status import ColumnState, TableReport, ViewLag
from geneva_provider.pipeline.columns.plan_backfill import column_state
from geneva_provider.pipeline.indexes.stats import list_indices
from geneva_provider.pipeline.source_versions import view_lag, view_source
from geneva_provider.pipeline.stages.kinds import table_kind

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


def table_report(table: TableRef, resolve: TableResolver | None = None, ds: Dataset | None = None) -> TableReport:
    """The table's version and rows, each UDF column's rows valid / stale / missing, and a view's lag; of ``ds``,
    the table at the version a handle is checked out at, when given (else the latest).

    What the table is, the job kind that makes its rows says (:func:`table_kind`): a view's kind names the source
    and version its rows hold; a kind that computes its UDF columns from that source (a query view's refresh) has
    them judged by the view's lag, not by fingerprints.
    """
    ds = ds if ds is not None else table.dataset()
    kind = table_kind(ds.schema.metadata)
    held = kind.held_source(ds, table)
    lag: ViewLag | None = None
    if held is not None:
        source = view_source(table, held.db_uri, held.table, resolve, doing="status")
        lag = view_lag(source, held.version)
    return TableReport(table=table.name, version=ds.version, rows=ds.count_rows(), columns=column_states(table, ds),
                       view=lag, indexes=list_indices(ds))


def column_states(table: TableRef, ds: Dataset | None = None) -> list[ColumnState]:
    """Each UDF column's rows valid / stale / missing (none for a kind that computes its UDF columns from its
    source, whose lag judges them); ``ds``: the table's dataset, when already open."""
    ds = ds if ds is not None else table.dataset()
    if table_kind(ds.schema.metadata).computes_udf_columns:
        return []
    infos = ((f.name, udf_column_info(f.metadata)) for f in ds.schema)
    return [column_state(ds, table.name, name).model_copy(update={"expression": info.expression})
            for name, info in infos if info is not None]
