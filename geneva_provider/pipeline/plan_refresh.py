"""Plan stage of a view refresh: bring the placeholders up to the source version, then plan the view.

Source rows appended since the last refresh that match the filter are appended as new placeholder
fragments first, so an incremental refresh computes only them.  A view fragment is recomputed only
when the source files it reads change: each view fragment is mapped to the source fragments that
hold its ``__source_row_id``s (one scan of the source's ``_rowid``/``_rowaddr``, no data columns),
so appending to the source, or backfilling a source column the view does not read, costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any

import numpy as np
import pyarrow as pa

from geneva_provider.core.catalog import Catalog, TableResolver
from geneva_provider.core.checkpoint import CheckpointStore, job_prefix
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.fragments import column_field_ids, deletion_marker, files_holding, leaf_field_ids
from geneva_provider.core.models import JobSpec, PlanSummary, SourceSpec
from geneva_provider.core.options import RefreshOptions
from geneva_provider.core.refs import TableRef
from geneva_provider.core.udf import udf_column_info
from geneva_provider.core.view_meta import (
    IS_SET,
    META_BASE_VERSION,
    META_SCANNED_ROW_ID,
    SOURCE_ROW_ID,
    ViewInfo,
    view_info,
)
from geneva_provider.pipeline.planning import plan_fragments, store_plan
from geneva_provider.pipeline.view_create import matching_row_ids, shuffled

log = logging.getLogger(__name__)


def plan_refresh(
    view: TableRef,
    options: RefreshOptions | None = None,
    *,
    resolve: TableResolver | None = None,
    store: CheckpointStore | None = None,
    parallelism: int | None = None,
) -> PlanSummary:
    """Plans a refresh: appends placeholders for new source rows, then plans the view's fragments.

    ``resolve`` finds the source table from the view's metadata (default: a directory database
    at the recorded URI).  View fragments whose fragment checkpoint still matches the source
    files they read are reused or left alone; everything else is computed by copy tasks.
    """
    options = options or RefreshOptions()
    options.validate(f"refresh of view '{view.name}'")
    store = store or view.checkpoint_store()
    info = view_info(view.dataset().schema.metadata, view.name)
    resolve = resolve or (lambda db_uri, name: Catalog(db_uri, view.storage_options).ref(name))
    source = resolve(info.base_table_db_uri, info.base_table)
    src = source.dataset(options.src_version)
    if not info.stable and src.version != info.base_table_version:
        raise InvalidArgumentError(
            f"view '{view.name}' stores source row addresses (format 1), valid only at source version "
            f"{info.base_table_version}, not {src.version}: recreate the source table '{info.base_table}' "
            "with stable row ids (stable_row_ids=True) and the view on it to refresh to other versions")
    appended = append_new_source_rows(view, src, info, options.max_rows_per_fragment)

    ds = view.dataset()
    q = info.query
    udf_cols = list(q.udf_columns)
    output_columns = [*q.columns, *udf_cols, IS_SET]
    src_read = q.source_columns()
    read_ids = sorted({i for c in src_read for i in column_field_ids(src, c)})
    query_version = hashlib.md5(json.dumps(
        [q.model_dump(mode="json"), [udf_column_info(ds.schema.field(c).metadata).version for c in udf_cols]],
        sort_keys=True).encode()).hexdigest()[:16]
    out_leaves = [i for c in output_columns for i in leaf_field_ids(ds.lance_schema.field(c))]
    src_files = source_files_by_view_fragment(ds, src, read_ids, stable=info.stable)
    prefix = job_prefix("view", query_version, view.name, None, view.uri)
    uids = [udf_column_info(ds.schema.field(c).metadata).column_uid for c in udf_cols]
    column_uid = ":".join([query_version, *uids])
    fragments, ranges = plan_fragments(ds, store, prefix, src_files, out_leaves, column_uid, None)
    job = JobSpec(
        kind="refresh", table=view.name, table_uri=view.uri, output_columns=output_columns, read_version=ds.version,
        output_field_ids=out_leaves, column_uid=column_uid, data_storage_version=str(ds.data_storage_version),
        job_prefix=prefix, rows_appended=appended,
        source=SourceSpec(uri=source.uri, version=src.version, copied=q.columns, udf_columns=udf_cols,
                          read_columns=src_read))
    return store_plan(job, fragments, ranges, options, store, parallelism or os.cpu_count() or 1,
                      f"view '{view.name}' from source version {src.version} ({appended} rows appended)")


def append_new_source_rows(view: TableRef, src: Any, info: ViewInfo, max_rows_per_fragment: int | None) -> int:
    """Appends placeholders for source rows added since the last refresh; returns how many."""
    import lance

    q = info.query
    if not info.stable or src.version == info.base_table_version:
        return 0
    cond = f"_rowid >= {info.next_row_id}"
    where = f"({q.where}) AND {cond}" if q.where else cond
    ids, next_id = matching_row_ids(src, where, True)
    ds = view.dataset()
    if len(ids):
        # A plan that crashed after appending but before recording next_row_id must not append twice.
        present = ds.to_table(columns=[SOURCE_ROW_ID], filter=f"{SOURCE_ROW_ID} >= {int(ids.min())}")
        ids = ids[~np.isin(ids, present.column(SOURCE_ROW_ID).to_numpy())]
    ids = shuffled(ids, q.shuffle, q.seed)
    if q.limit is not None:
        ids = ids[:max(q.limit - ds.count_rows(), 0)]
    if len(ids):
        table = pa.table({SOURCE_ROW_ID: pa.array(ids, pa.int64())})
        kwargs = {"max_rows_per_file": max_rows_per_fragment} if max_rows_per_fragment else {}
        ds = lance.write_dataset(table, view.uri, mode="append", storage_options=view.storage_options, **kwargs)
    ds.update_schema_metadata({META_BASE_VERSION: str(src.version), META_SCANNED_ROW_ID: str(next_id)})
    return len(ids)


def source_files_by_view_fragment(view_ds: Any, src: Any, read_field_ids: list[int], stable: bool
                                  ) -> dict[int, list[str]]:
    """For each view fragment, the source data files holding its rows' fields (what it depends on).

    One scan of the source's ``_rowid``/``_rowaddr`` (no data columns) maps row ids to source
    fragments; a view fragment is then valid as long as those fragments' files are unchanged, so
    appending to the source never invalidates the rows already refreshed.
    """
    meta = {f.fragment_id: f for f in src.get_fragments()}
    if stable:
        m = src.to_table(columns=[], with_row_id=True, with_row_address=True)
        order = np.argsort(m.column("_rowid").to_numpy())
        sorted_ids = m.column("_rowid").to_numpy()[order]
        frag_of_sorted = (m.column("_rowaddr").to_numpy()[order] >> 32).astype(np.int64)
    out = {}
    for frag in view_ds.get_fragments():
        ids = frag.to_table(columns=[SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_numpy().astype(np.uint64)
        if stable:
            pos = np.clip(np.searchsorted(sorted_ids, ids), 0, max(len(sorted_ids) - 1, 0))
            frags = set(frag_of_sorted[pos].tolist()) if len(sorted_ids) else set()
        else:
            frags = set((ids >> np.uint64(32)).astype(np.int64).tolist())
        files = []
        for fid in sorted(frags):
            if fid in meta:
                files += files_holding(meta[fid].metadata, read_field_ids)
                files.append(f"deletions:{fid}:{deletion_marker(meta[fid])}")
        out[frag.fragment_id] = files
    return out
