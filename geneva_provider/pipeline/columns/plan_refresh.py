"""Plan stage of a view refresh: bring the view's rows up to the source version, then plan the values.

Membership first.  Source rows appended since the last refresh that match the filter become new
placeholder rows (in the query's order among themselves); after any other source change (deletes,
updates, merges, a refresh to an older version), and after any change under ``offset``/``limit``,
the view's rows are synchronised with the rows the query selects at that version: rows whose
source row is gone, no longer matches or left the offset/limit window are deleted from the view,
rows that now belong are added.

Values second, row by row: a view row is valid while its stored fingerprint equals the fingerprint
of its source row's read columns, so an update recomputes exactly the rows it changed and a
compaction of the source or of the view recomputes nothing.  A view fragment whose files and
source files are those of a fragment already known valid is not read at all; the others are
examined by taking their source rows (no UDF).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from geneva_provider.core.catalog import TableResolver
from geneva_provider.core.column_paths import path_column
from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.models import JobSpec, PlanSummary, SourceSpec
from geneva_provider.core.contracts.options import RefreshOptions
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.fingerprints import fingerprint_column, fingerprint_field, row_fingerprints
from geneva_provider.core.fragments import column_field_ids, column_leaf_ids, files_holding
from geneva_provider.core.functions.udf import udf_column_info
from geneva_provider.core.incarnations import incarnations
from geneva_provider.core.lineage import query_view_lineage
from geneva_provider.core.refs import TableRef, check_table_ref
from geneva_provider.core.resources import ResourceAsk
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import job_prefix
from geneva_provider.core.views.meta import (
    META_BASE_VERSION,
    META_SCANNED_ROW_ID,
    ROW_FINGERPRINT,
    SOURCE_ROW_ID,
    ViewInfo,
    query_order,
    view_info,
)
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.columns.inputs import udf_info
from geneva_provider.pipeline.columns.layout import complete_output_layout
from geneva_provider.pipeline.columns.view_create import matching_row_ids
from geneva_provider.pipeline.committer import OWN_COMMIT_PREFIX
from geneva_provider.pipeline.row_deletes import delete_rows
from geneva_provider.pipeline.schema_changes import UpdateColumns
from geneva_provider.pipeline.source_versions import only_appends, readable_source, view_source
from geneva_provider.pipeline.stages.kinds import view_kind
from geneva_provider.pipeline.stages.planning import Exam, PlanCall, plan_fragments, store_plan

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, Fragment

log = logging.getLogger(__name__)

FP = ROW_FINGERPRINT
_CHECKPOINT_LAYOUT = "-fp-per-udf"


def plan_refresh(
    view: TableRef,
    options: RefreshOptions | None = None,
    *,
    resolve: TableResolver | None = None,
    store: CheckpointStore | None = None,
    parallelism: int | None = None,
    airflow_run_id: str | None = None,
) -> PlanSummary:
    """Plans a view's refresh with the planner of the view's kind (a query view's, a chunker's or batch UDTF's).

    ``resolve`` finds the source table from the view's metadata (default: a directory database
    at the recorded URI).  Fails before changing anything when the source version cannot be had.
    """
    check_table_ref(view, "view", "plan_refresh")
    job = f"refresh of view '{view.name}'"
    options = RefreshOptions.coerce(options, job)
    call = PlanCall.of(view, job, store=store, parallelism=parallelism, airflow_run_id=airflow_run_id,
                       resolve=resolve)
    planner = view_kind(view.dataset().schema.metadata).planner
    return planner(view, options, call)


def plan_query_refresh(view: TableRef, options: RefreshOptions, call: PlanCall) -> PlanSummary:
    """Plans a query view's refresh: synchronises the view's rows with the source, then plans the stale values."""
    ds = view.dataset()
    info = view_info(ds.schema.metadata, view.name)
    source = view_source(view, info.base_table_db_uri, info.base_table, call.resolve)
    version = options.src_version if options.src_version is not None else info.refresh_version
    src = readable_source(view.name, source, version, info.query.source_columns(), info.query.where)
    if not info.stable and src.version != info.base_table_version:
        raise InvalidArgumentError(
            f"view '{view.name}' stores source row addresses (format 1), valid only at source version "
            f"{info.base_table_version}, not {src.version}: recreate the source table '{info.base_table}' "
            "with stable row ids (stable_row_ids=True) and the view on it to refresh to other versions")
    q = info.query
    outputs = q.output_groups()
    output_columns = q.output_columns()
    lacking = [fingerprint_field(of) for of in [None, *q.udf_columns] if fingerprint_column(of) not in ds.schema.names]
    if lacking:  # a view made by an older version of the package: fingerprints, per UDF column too
        UpdateColumns(view).add_fields(lacking).commit()
        ds = view.dataset()
    complete_output_layout(view, ds, output_columns)  # values kept without those fingerprints: made committable
    added, removed = sync_rows(view, src, info, options.max_rows_per_fragment)

    ds = view.dataset()
    udf_cols = list(q.udf_columns)
    src_read = q.source_columns()
    out_leaves = [i for c in output_columns for i in column_leaf_ids(ds, c)]
    prefix, column_uid = refresh_identity(ds, info, view)
    examiner = RefreshExaminer(ds, src, src_read, column_uid, info.stable)
    fragments, work = plan_fragments(ds, call.store, prefix, examiner, out_leaves, column_uid, None)
    udf_infos = [udf_column_info(ds.schema.field(c).metadata) for c in udf_cols]
    rows_limits = [u.max_failed_rows for u in udf_infos if u and u.max_failed_rows is not None]
    fraction_limits = [u.max_failed_fraction for u in udf_infos if u and u.max_failed_fraction is not None]
    spec = JobSpec(
        kind=JobKind.REFRESH, table=view.name, table_uri=view.uri, outputs=outputs, row_fingerprint=FP,
        read_version=ds.version,
        output_field_ids=out_leaves, column_uid=column_uid, data_storage_version=str(ds.data_storage_version),
        incarnations=incarnations(ds, output_columns),
        job_prefix=prefix, rows_appended=added, max_failed_rows=min(rows_limits, default=None),
        max_failed_fraction=min(fraction_limits, default=None), rows_total=ds.count_rows(),
        resource_asks=[ResourceAsk(udf=u.name, column=c, resources=u.resources)
                       for c, u in zip(udf_cols, udf_infos, strict=True) if u is not None and u.resources is not None],
        source=SourceSpec(uri=source.uri, version=src.version, copied=q.columns, udf_columns=udf_cols,
                          read_columns=src_read),
        lineage=query_view_lineage(source.uri, src.version, src.schema.names, view.uri, ds.schema, q))
    return store_plan(spec, fragments, work, options, call,
                      f"view '{view.name}' from source version {src.version} ({added} rows added, {removed} removed)")


def refresh_identity(ds: Dataset, info: ViewInfo, view: TableRef) -> tuple[str, str]:
    """A view's job prefix and the identity of its computed columns (query, UDF versions, column incarnations).

    The prefix also names the layout of the refresh's outputs (``_CHECKPOINT_LAYOUT``: with per-UDF
    fingerprints), so checkpoints of another layout are never read; the identity, which seeds the
    rows' fingerprints, does not, so a view keeps its valid rows across the change of layout.
    """
    q = info.query
    udfs = [udf_info(ds, c) for c in q.udf_columns]
    query_version = hashlib.md5(json.dumps([q.model_dump(mode="json"), [u.version for u in udfs]],
                                           sort_keys=True).encode()).hexdigest()[:16]
    return (job_prefix("view", f"{query_version}{_CHECKPOINT_LAYOUT}", view.name, None, view.uri),
            ":".join([query_version, *(u.column_uid for u in udfs)]))


def sync_rows(view: TableRef, src: Dataset, info: ViewInfo, max_rows_per_fragment: int | None) -> tuple[int, int]:
    """Brings the view's rows to the ones the query selects at ``src``'s version; returns (added, removed).

    Appends to a view without ``offset`` or ``limit`` only add rows: the new matching ones.  Any
    other change -- or any change at all under ``offset``/``limit``, where a new row may take the
    place of an old one -- recomputes the query's rows (row ids only) and moves the view to them.
    """
    if not info.stable or src.version == info.base_table_version:
        return 0, 0
    q = info.query
    ds = view.dataset()
    windowed = bool(q.offset) or q.limit is not None
    if not windowed and only_appends(src, info.base_table_version):
        cond = f"_rowid >= {info.next_row_id}"
        new, next_id = matching_row_ids(src, f"({q.where}) AND {cond}" if q.where else cond, True)
        removed = 0
    else:
        wanted, next_id = matching_row_ids(src, q.where, True)
        wanted = q.rows(wanted)
        have = ds.to_table(columns=[SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_numpy()
        gone = have[~np.isin(have, wanted)]
        removed = delete_rows(view, SOURCE_ROW_ID, gone, f"{OWN_COMMIT_PREFIX}view refresh") if len(gone) else 0
        new = wanted[~np.isin(wanted, have)]
        ds = view.dataset()
    if len(new):
        # A plan that crashed after appending but before recording the source version must not append twice.
        present = ds.to_table(columns=[SOURCE_ROW_ID], filter=f"{SOURCE_ROW_ID} >= {int(new.min())}")
        new = new[~np.isin(new, present.column(SOURCE_ROW_ID).to_numpy())]
    new = query_order(new, q.shuffle, q.seed)
    if len(new):
        import lance

        kwargs: dict[str, Any] = {"max_rows_per_file": max_rows_per_fragment} if max_rows_per_fragment else {}
        ds = lance.write_dataset(pa.table({SOURCE_ROW_ID: pa.array(new, pa.int64())}), view.uri, mode="append",
                                 storage_options=view.storage_options,
                                 commit_message=f"{OWN_COMMIT_PREFIX}view refresh", **kwargs)
    UpdateColumns(view).set_table_metadata({META_BASE_VERSION: str(src.version),
                                            META_SCANNED_ROW_ID: str(next_id)}).commit()
    if removed:
        log.info("view '%s': %s removed (their source rows were deleted, no longer match, or left the "
                 "query's offset/limit window)", view.name, counted(removed, "row"))
    return len(new), removed


class RefreshExaminer:
    """Judges a view fragment: fingerprints of its source rows' read columns against the stored ones."""

    def __init__(self, view_ds: Dataset, src: Dataset, read_columns: list[str], seed: str, stable: bool) -> None:
        self.src, self.read_columns, self.seed, self.stable = src, read_columns, seed, stable
        self.read_ids = sorted({i for c in read_columns for i in column_field_ids(src, c)})
        self.fp_ids = column_leaf_ids(view_ds, FP)
        self.src_meta = {f.fragment_id: f.metadata for f in src.get_fragments()}
        if stable:  # one scan of the source's row ids and addresses: which source fragment holds each row
            m = src.to_table(columns=[], with_row_id=True, with_row_address=True)
            order = np.argsort(m.column("_rowid").to_numpy())
            self.sorted_ids = m.column("_rowid").to_numpy()[order]
            self.frag_of = (m.column("_rowaddr").to_numpy()[order] >> 32).astype(np.int64)

    def _ids(self, frag: Fragment) -> np.ndarray:
        return frag.to_table(columns=[SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_numpy().astype(np.uint64)

    def src_files(self, frag: Fragment) -> list[str]:
        """The source files holding the read columns of the view fragment's rows."""
        ids = self._ids(frag)
        if not self.stable:
            frags = set((ids >> np.uint64(32)).astype(np.int64).tolist())
        elif len(self.sorted_ids):
            pos = np.clip(np.searchsorted(self.sorted_ids, ids), 0, len(self.sorted_ids) - 1)
            frags = set(self.frag_of[pos].tolist())
        else:
            frags = set()
        return sorted({f for fid in frags if fid in self.src_meta for f in files_holding(self.src_meta[fid],
                                                                                          self.read_ids)})

    def examine(self, frag: Fragment) -> Exam:
        live = frag.count_rows()
        if not files_holding(frag.metadata, self.fp_ids):
            return Exam(needed=np.ones(live, bool), invalid=live)
        t = frag.to_table(columns=[SOURCE_ROW_ID, FP])
        rows = self.src._take_rows(t.column(SOURCE_ROW_ID).combine_chunks().cast(pa.uint64()),
                                   columns=self.read_columns)
        current = row_fingerprints([path_column(rows, c) for c in self.read_columns], self.seed, rows.num_rows)
        stored = t.column(FP).combine_chunks()
        valid = stored.is_valid().to_numpy(zero_copy_only=False) & np.equal(
            stored.fill_null(0).to_numpy(zero_copy_only=False), current.to_numpy())
        return Exam(needed=~valid, invalid=int((~valid).sum()))
