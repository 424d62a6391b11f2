"""What ``Table.status()`` and ``geneva-provider table status`` say of a table: its UDF columns' rows valid, stale
and missing, and a view's lag behind its source.

Unlike a probe (``core/table_status.py``), this reads every UDF column's inputs, to fingerprint them as the next
backfill's plan does (:func:`~geneva_provider.pipeline.columns.plan_backfill.column_state`): in this process, with
no Spark job and no change to the table.
"""

from __future__ import annotations

from geneva_provider.core.catalog import TableResolver
from geneva_provider.core.functions.udf import udf_column_info
from geneva_provider.core.refs import TableRef
from geneva_provider.core.table_status import TableReport, ViewLag
from geneva_provider.core.views.meta import META_QUERY, view_info
from geneva_provider.core.views.udtf_meta import is_udtf_view, udtf_view_state
from geneva_provider.pipeline.columns.plan_backfill import column_state
from geneva_provider.pipeline.source_versions import view_lag, view_source


def table_report(table: TableRef, resolve: TableResolver | None = None) -> TableReport:
    """The table's version and rows, each UDF column's rows valid / stale / missing, and a view's lag.

    A query view's UDF columns read source columns, so they are judged by the view's lag, not by fingerprints.
    """
    ds = table.dataset()
    metadata = ds.schema.metadata or {}
    lag: ViewLag | None = None
    if META_QUERY.encode() in metadata:
        info = view_info(metadata, table.name)
        source = view_source(table, info.base_table_db_uri, info.base_table, resolve, doing="status")
        lag = view_lag(source, info.base_table_version)
    elif is_udtf_view(metadata):
        state = udtf_view_state(metadata, table.name)
        source = view_source(table, state.spec.base_table_db_uri, state.spec.base_table, resolve, doing="status")
        lag = view_lag(source, state.base_version if state.refreshed else None)
    columns = [] if META_QUERY.encode() in metadata else [
        column_state(ds, table.name, f.name) for f in ds.schema if udf_column_info(f.metadata) is not None]
    return TableReport(table=table.name, version=ds.version, rows=ds.count_rows(), columns=columns, view=lag)
