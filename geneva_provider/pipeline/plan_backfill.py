"""Plan stage of a backfill: which rows of which fragments still need the column's UDF.

Validates everything that can be known without Spark (column, UDF, inputs, filter, options)
so that bad input fails here, before any JVM starts, and changes nothing.
"""

from __future__ import annotations

import os
from typing import Any

from geneva_provider.core.checkpoint import CheckpointStore, job_prefix
from geneva_provider.core.errors import ColumnError
from geneva_provider.core.filters import check_where, referenced_columns
from geneva_provider.core.fragments import column_field_ids, files_holding, leaf_field_ids
from geneva_provider.core.models import JobSpec, PlanSummary, UdfRef
from geneva_provider.core.options import BackfillOptions
from geneva_provider.core.refs import TableRef
from geneva_provider.core.udf import UdfColumnInfo, udf_column_info
from geneva_provider.pipeline.planning import plan_fragments, store_plan


def plan_backfill(
    table: TableRef,
    column: str,
    options: BackfillOptions | None = None,
    *,
    store: CheckpointStore | None = None,
    parallelism: int | None = None,
) -> PlanSummary:
    """Plans a backfill of ``column``, stores the plan, and returns its small summary."""
    options = options or BackfillOptions()
    options.validate(f"backfill of table '{table.name}'")
    store = store or table.checkpoint_store()
    parallelism = parallelism or os.cpu_count() or 1

    ds = table.dataset(options.read_version)
    info = udf_of(ds, table.name, column)
    inputs = info.input_columns or []
    names = ds.schema.names
    missing = [c for c in inputs if c not in names]
    if missing:
        raise ColumnError(f"column '{column}' of table '{table.name}': UDF input columns {missing} not found "
                          f"at version {ds.version}")
    where = options.where or None
    check_where(ds, where, f"table '{table.name}'")

    out_leaves = leaf_field_ids(ds.lance_schema.field(column))
    filter_cols = [c for c in referenced_columns(where, names) if c != column]
    read_ids = sorted({i for c in dict.fromkeys(inputs + filter_cols) for i in column_field_ids(ds, c)})
    prefix = job_prefix(info.name, info.version, column, where, table.uri)
    fragments, ranges = plan_fragments(
        ds, store, prefix, {f.fragment_id: files_holding(f.metadata, read_ids) for f in ds.get_fragments()},
        out_leaves, info.column_uid, where)
    job = JobSpec(
        kind="backfill", table=table.name, table_uri=table.uri, column=column, output_columns=[column],
        input_columns=inputs, where=where, read_version=ds.version, output_field_ids=out_leaves,
        column_uid=info.column_uid, data_storage_version=str(ds.data_storage_version), job_prefix=prefix,
        udf=UdfRef(name=info.name, version=info.version, kind=info.kind))
    return store_plan(job, fragments, ranges, options, store, parallelism, f"table '{table.name}' column '{column}'")


def udf_of(ds: Any, table: str, column: str) -> UdfColumnInfo:
    """The UDF recorded on ``column``; ColumnError naming the table if there is none."""
    if column not in ds.schema.names:
        raise ColumnError(f"column '{column}' not found in table '{table}' (columns: {ds.schema.names})")
    info = udf_column_info(ds.schema.field(column).metadata)
    if info is None:
        raise ColumnError(f"column '{column}' of table '{table}' is not a UDF column; declare it with add_columns")
    return info
