"""Plan stage of a backfill: which rows of which fragments still need the column's UDF.

A row needs its value when its stored fingerprint is missing or differs from the fingerprint of
its current inputs (seeded with the UDF version) and the job's ``where`` selects it.  Everything
that can be known without Spark (column, UDF, inputs, filter, options) is validated here, so bad
input fails before any JVM starts and changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from geneva_provider.core.column_names import user_columns
from geneva_provider.core.column_paths import missing_paths, path_column
from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.models import JobSpec, OutputGroup, PlanSummary, UdfRef
from geneva_provider.core.contracts.options import BackfillOptions
from geneva_provider.core.errors import ColumnError, InvalidArgumentError
from geneva_provider.core.filters import check_where
from geneva_provider.core.fingerprints import (
    fingerprint_column,
    fingerprint_field,
    holds_fingerprints_of,
    left_by_a_rename,
    row_fingerprints,
)
from geneva_provider.core.fragments import column_field_ids, column_leaf_ids, files_holding, live_row_addresses
from geneva_provider.core.functions.udf import UdfColumnInfo, lead_column, udf_column_info
from geneva_provider.core.incarnations import incarnations
from geneva_provider.core.lineage import backfill_lineage
from geneva_provider.core.refs import TableRef, check_table_ref
from geneva_provider.core.resources import ResourceAsk
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import job_prefix
from geneva_provider.core.table_status import ColumnState
from geneva_provider.pipeline.columns.layout import complete_output_layout
from geneva_provider.pipeline.schema_changes import UpdateColumns
from geneva_provider.pipeline.stages.planning import Exam, PlanCall, plan_fragments, store_plan

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, Fragment

log = logging.getLogger(__name__)
_HALF_RENAMED = ("renamed outside the package, or by an alter_columns an earlier version of the package left half "
                 "done; run that alter_columns again to finish it")


def plan_backfill(
    table: TableRef,
    column: str,
    options: BackfillOptions | None = None,
    *,
    store: CheckpointStore | None = None,
    parallelism: int | None = None,
    airflow_run_id: str | None = None,
    dry: bool = False,
) -> PlanSummary:
    """Plans a backfill of ``column``, stores the plan, and returns its small summary (``dry``: a plan with work is
    not stored, :class:`~geneva_provider.pipeline.stages.planning.PlanCall`)."""
    check_table_ref(table, "table", "plan_backfill")
    job = f"backfill of table '{table.name}'"
    options = BackfillOptions.coerce(options, job)
    call = PlanCall.of(table, job, store=store, parallelism=parallelism, airflow_run_id=airflow_run_id, dry=dry)

    try:
        ds = table.dataset(options.read_version)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"backfill of table '{table.name}': read_version {options.read_version}: "
                                   f"{exc}") from None
    named, column = column, lead_column(ds.schema, column)  # any column of a multi-output group backfills the group
    if named != column and column not in ds.schema.names:
        raise ColumnError(f"column '{named}' of table '{table.name}' belongs to the multi-output group of column "
                          f"'{column}', which is not in the table: {_HALF_RENAMED}")
    info = udf_with_inputs(ds, table.name, column)
    options = with_udf_defaults(options, info, job)
    outputs = info.columns(column)
    gone = [c for c in outputs if c not in ds.schema.names]
    if gone:
        raise ColumnError(f"column '{column}' of table '{table.name}': UDF '{info.name}' computes the columns "
                          f"{outputs} in one call, but {gone} are not in the table: {_HALF_RENAMED}")
    inputs = info.input_columns or []
    where = options.where or None
    check_where(ds, where, f"table '{table.name}'")
    ds = _with_fingerprints(table, ds, column, options.read_version)  # the last check, and the first change
    fp = fingerprint_column(column)
    if options.read_version is None:  # values kept by a table changed outside the package: made committable
        ds = complete_output_layout(table, ds, [*outputs, fp])

    out_leaves = [i for c in [*outputs, fp] for i in column_leaf_ids(ds, c)]
    prefix = backfill_prefix(info, column, table.uri)
    examiner = BackfillExaminer(ds, inputs, where, info.version, fp)
    fragments, work = plan_fragments(ds, call.store, prefix, examiner, out_leaves, info.column_uid, where,
                                     limit=options.num_frags)
    spec = JobSpec(
        kind=JobKind.BACKFILL, table=table.name, table_uri=table.uri, column=column,
        outputs=[OutputGroup(columns=outputs, fingerprint=fp)], row_fingerprint=fp,
        input_columns=inputs, where=where, read_version=ds.version, output_field_ids=out_leaves,
        column_uid=info.column_uid, data_storage_version=str(ds.data_storage_version), job_prefix=prefix,
        incarnations=incarnations(ds, [*outputs, fp]),
        udf=UdfRef(name=info.name, version=info.version, kind=info.kind), max_failed_rows=info.max_failed_rows,
        max_failed_fraction=info.max_failed_fraction, rows_total=ds.count_rows(),
        resource_asks=[ResourceAsk(udf=info.name, column=column, resources=info.resources)] if info.resources else [],
        lineage=backfill_lineage(table.uri, ds.version, ds.schema, outputs, inputs, (info.name, info.version), where))
    return store_plan(spec, fragments, work, options, call, f"table '{table.name}' column '{column}'",
                      rows_stale=examiner.rows_stale)


def with_udf_defaults(options: BackfillOptions, info: UdfColumnInfo, job: str) -> BackfillOptions:
    """The options with the sizes the column's UDF gives (``@udf(checkpoint_size=...)``) where the backfill gives
    none: the backfill's own win, as in the reference."""
    unset: dict[str, Any] = {k: v for k, v in info.job_defaults.items() if getattr(options, k) is None}
    if not unset:
        return options
    BackfillOptions.check({**dataclasses.asdict(options), **unset}, f"{job} (with UDF '{info.name}' sizes {unset})")
    return dataclasses.replace(options, **unset)


class BackfillExaminer:
    """Judges a fragment of a backfill: fingerprints of the inputs against the stored ones."""

    def __init__(self, ds: Dataset, inputs: list[str], where: str | None, udf_version: str, fp: str) -> None:
        self.inputs, self.where, self.seed, self.fp = inputs, where, udf_version, fp
        self.read_ids = sorted({i for c in inputs for i in column_field_ids(ds, c)})
        self.fp_ids = column_leaf_ids(ds, fp)
        self.rows_stale = 0  # over the fragments examined: computed, but not from these inputs by this version

    def src_files(self, frag: Fragment) -> list[str]:
        return files_holding(frag.metadata, self.read_ids)

    def examine(self, frag: Fragment) -> Exam:
        if not files_holding(frag.metadata, self.fp_ids):  # never computed here: every live row, none stale
            rows = frag.count_rows()
            return Exam(needed=self.selected(frag) if self.where else np.ones(rows, bool), invalid=rows)
        computed, valid = self.row_states(frag)
        invalid = ~valid
        self.rows_stale += int(np.count_nonzero(computed & invalid))
        needed = invalid & self.selected(frag) if self.where else invalid
        return Exam(needed=needed, invalid=int(np.count_nonzero(invalid)))

    def row_states(self, frag: Fragment) -> tuple[np.ndarray, np.ndarray]:
        """Per live row (in scan order): whether it holds a fingerprint (was computed), and whether that equals
        the fingerprint of its current inputs (its value is valid).  Computed but not valid is stale."""
        if not files_holding(frag.metadata, self.fp_ids):  # never computed here: every row lacks its value
            none = np.zeros(frag.count_rows(), bool)
            return none, none
        t = frag.to_table(columns=[*self.inputs, self.fp])
        current = row_fingerprints([path_column(t, c) for c in self.inputs], self.seed, t.num_rows)
        stored = t.column(self.fp).combine_chunks()
        computed = stored.is_valid().to_numpy(zero_copy_only=False)
        return computed, computed & np.equal(stored.fill_null(0).to_numpy(zero_copy_only=False), current.to_numpy())

    def selected(self, frag: Fragment) -> np.ndarray:
        """The ``where`` as a mask over the fragment's live rows."""
        chosen = frag.to_table(columns=[], filter=self.where, with_row_address=True).column("_rowaddr").to_numpy()
        return np.isin(live_row_addresses(frag), chosen)


def column_state(ds: Dataset, table: str, column: str) -> ColumnState:
    """``column``'s rows valid, stale and missing, judged as the next backfill's plan judges them (no Spark, no
    change: a table without the fingerprint column has every row missing, as its next backfill computes all)."""
    info = udf_with_inputs(ds, table, column)
    fp = fingerprint_column(column)
    live = ds.count_rows()
    if fp not in ds.schema.names or not (holds_fingerprints_of(ds.schema.field(fp), column)
                                         or left_by_a_rename(ds.schema, column)):
        return ColumnState(column=column, rows_valid=0, rows_stale=0, rows_missing=live)
    examiner = BackfillExaminer(ds, info.input_columns or [], None, info.version, fp)
    computed = valid = 0
    for frag in ds.get_fragments():
        has_fp, ok = examiner.row_states(frag)
        computed += int(has_fp.sum())
        valid += int(ok.sum())
    return ColumnState(column=column, rows_valid=valid, rows_stale=computed - valid, rows_missing=live - computed)


def backfill_prefix(info: UdfColumnInfo, column: str, table_uri: str) -> str:
    """The job prefix of a column's backfills; computed values are shared by every filter, so it names none."""
    return job_prefix(info.name, info.version, column, None, table_uri)


def udf_of(ds: Dataset, table: str, column: str) -> UdfColumnInfo:
    """The UDF recorded on ``column``; ColumnError naming the table if there is none."""
    if column not in ds.schema.names:
        raise ColumnError(f"column '{column}' not found in table '{table}' (columns: {user_columns(ds.schema.names)})")
    info = udf_column_info(ds.schema.field(column).metadata)
    if info is None:
        raise ColumnError(f"column '{column}' of table '{table}' is not a UDF column; declare it with add_columns")
    return info


def udf_with_inputs(ds: Dataset, table: str, column: str) -> UdfColumnInfo:
    """The UDF recorded on ``column``, once its input columns are known to be in ``ds``; ColumnError otherwise."""
    info = udf_of(ds, table, column)
    missing = missing_paths(ds.schema, info.input_columns or [])
    if missing:
        raise ColumnError(f"column '{column}' of table '{table}': UDF input columns {missing} not found "
                          f"at version {ds.version}")
    return info


def _with_fingerprints(table: TableRef, ds: Dataset, column: str, read_version: int | None) -> Dataset:
    """The dataset with ``column``'s fingerprint column (declared by add_columns; added here for older tables)."""
    fp = fingerprint_column(column)
    former = left_by_a_rename(ds.schema, column)
    if former is not None and read_version is None:  # a rename left half done: finished, its values kept
        log.warning("column '%s' of table '%s': finishing its rename from '%s' (its fingerprint column still named "
                    "the former name)", column, table.name, former)
        UpdateColumns(table, subject=f"backfill of table '{table.name}'").alter_column(former, rename=column).commit()
        ds = table.dataset()
    if fp in ds.schema.names:
        if not (holds_fingerprints_of(ds.schema.field(fp), column) or left_by_a_rename(ds.schema, column)):
            raise ColumnError(f"column '{column}' of table '{table.name}': the column '{fp}' holding its fingerprints "
                              "was replaced outside the package by a column of that name: rename or drop it")
        return ds
    if read_version is not None:
        raise InvalidArgumentError(
            f"column '{column}' of table '{table.name}' has no fingerprint column at version {read_version} (it was "
            "declared by an older version of airflow-provider-geneva): backfill it once without read_version")
    UpdateColumns(table).add_fields([fingerprint_field(column)]).commit()
    return table.dataset()
