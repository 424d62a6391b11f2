"""Job inputs, by kind: what an apply task reads and computes for some live rows of one fragment.

A backfill *scans* the table's own rows (``ScanInput``); a view refresh *copies* the source rows
a view fragment names (``CopyInput``).  Each also fingerprints the inputs it computed from, which
is what later tells a valid value from a stale one.  Each column kind's spec names its input
(:mod:`geneva_provider.pipeline.columns.kind`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.column_paths import path_column, select_paths
from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.error_policy import RowFailure
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.fingerprints import FINGERPRINT_PREFIX, fingerprint_column, row_fingerprints
from geneva_provider.core.fragments import fragment_of
from geneva_provider.core.functions.udf import UDF, UDFCallError, UdfColumnInfo, load_udf, udf_column_info
from geneva_provider.core.views.meta import IS_SET, SOURCE_ROW_ID
from geneva_provider.pipeline.stages.context import StageContext

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, Fragment

# A Python worker serves many tasks: unpickle each UDF (and build a stateful one) once per
# process.  The key names the column incarnation, so a dropped and re-created table or column
# never hits a stale entry; datasets are reopened per task for the same reason (it is cheap).
_UDFS: dict[tuple[str, str, str, int], UDF] = {}


def udf_info(ds: Dataset, column: str) -> UdfColumnInfo:
    """The UDF recorded on ``column``'s field metadata; InvalidArgumentError if it is not a UDF column."""
    info = udf_column_info(ds.schema.field(column).metadata)
    if info is None:
        raise InvalidArgumentError(f"column '{column}' of {ds.uri} is not a UDF column")
    return info


def udf_for(ds: Dataset, column: str) -> UDF:
    """The column's UDF, unpickled from the field metadata at the dataset's version."""
    info = udf_info(ds, column)
    key = (info.column_uid, info.version, column, hash(info.pickle))  # retry_failed may swap the code
    if key not in _UDFS:
        _UDFS[key] = load_udf(info.pickle)
    return _UDFS[key]


Pieces = list[tuple[int, np.ndarray, bool]]  # (fragment id, live-row positions, whether that is every live row)


def read_positions(frag: Fragment, positions: np.ndarray, columns: list[str]) -> pa.Table:
    """The live rows at ``positions`` (ascending) of a fragment: one range read, or a take; a struct field
    named by dot path is a column of that name either way."""
    first, n = int(positions[0]), len(positions)
    if int(positions[-1]) - first + 1 == n:
        return select_paths(frag.to_table(columns=columns, offset=first, limit=n), columns)
    return select_paths(frag.take(positions.tolist(), columns=columns), columns)


def read_pieces(ds: Dataset, pieces: Pieces, columns: list[str]) -> pa.Table:
    """``columns`` of the pieces' rows, in order: consecutive whole fragments in one scan, other parts each."""
    parts: list[pa.Table] = []
    wholes: list[Any] = []

    def scan_wholes() -> None:
        if wholes:
            parts.append(select_paths(ds.scanner(columns=columns, fragments=list(wholes), scan_in_order=True)
                                      .to_table(), columns))
            wholes.clear()

    for fid, positions, whole in pieces:
        if whole:
            wholes.append(fragment_of(ds, fid))
            continue
        scan_wholes()
        parts.append(read_positions(fragment_of(ds, fid), positions, columns))
    scan_wholes()
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


class ComputeError(Exception):
    """A UDF failed on a chunk: carries the column and UDF it was computing."""

    def __init__(self, column: str, udf_name: str, error: UDFCallError) -> None:
        super().__init__(str(error))
        self.column, self.udf_name, self.error = column, udf_name, error


Failures = list[tuple[str, RowFailure]]  # (column, failure) of the rows a UDF failed on in a chunk
# Marks a UDF call (column, UDF name) while it runs, so a call that kills its worker can be named; gives
# what counts the rows the call has computed (its progress within a checkpoint).
Watch = Callable[[str, str], AbstractContextManager[Callable[[int], None] | None]]


def evaluate(column: str, fn: UDF, rows: pa.Table, inputs: list[str], failures: Failures,
             watch: Watch | None = None) -> pa.Array:
    """``fn`` over ``rows`` under its error policy; its failed rows go to ``failures`` tagged with ``column``."""
    found: list[RowFailure] = []
    try:
        with watch(column, fn.name) if watch is not None else nullcontext() as tick:
            return fn.evaluate(rows, inputs, found, done=tick)
    except UDFCallError as exc:
        raise ComputeError(column, fn.name, exc) from exc
    finally:
        failures.extend((column, f) for f in found)


class JobInput(Protocol):
    """Reads some live rows of some fragments and computes the job's outputs and input fingerprints from them."""

    def read(self, pieces: Pieces) -> pa.Table: ...

    def compute(self, rows: pa.Table, failures: Failures, watch: Watch | None = None) -> dict[str, pa.Array]: ...

    def fingerprints(self, rows: pa.Table) -> pa.Array: ...


InputFactory = Callable[[StageContext, Any], JobInput]  # (the job, the table at its read version) -> input


class ScanInput:
    """Backfill input: the fragment's own rows, the UDF's column out (its N columns for a multi-output UDF)."""

    def __init__(self, ctx: StageContext, ds: Dataset) -> None:
        self.job = ctx.job
        self.ds = ds
        self.columns = ctx.job.row_group.columns  # a backfill's one group: its UDF's columns, the lead first
        self.column = self.columns[0]
        self.fn = udf_for(ds, self.column)
        if ctx.settings.intra_applier_concurrency is not None:  # the backfill's, over the UDF's own concurrency
            self.fn = self.fn.with_concurrency(ctx.settings.intra_applier_concurrency)
        self.seed = self.job.udf.version if self.job.udf else ""

    def read(self, pieces: Pieces) -> pa.Table:
        if not self.job.input_columns:  # a UDF of no column: only the row count matters
            return pa.table({"__rows": pa.nulls(sum(len(p) for _, p, _ in pieces))})
        return read_pieces(self.ds, pieces, self.job.input_columns)

    def compute(self, rows: pa.Table, failures: Failures, watch: Watch | None = None) -> dict[str, pa.Array]:
        values = evaluate(self.column, self.fn, rows, self.job.input_columns, failures, watch)
        if not self.fn.multi_output:
            return {self.column: values}
        try:  # one call per row computed every column of the group
            return dict(zip(self.columns, self.fn.split(values), strict=True))
        except UDFCallError as exc:
            raise ComputeError(self.column, self.fn.name, exc) from exc

    def fingerprints(self, rows: pa.Table) -> pa.Array:
        return row_fingerprints([path_column(rows, c) for c in self.job.input_columns], self.seed, rows.num_rows)


def _stored(column: str) -> str:
    """The name under which a refresh reads a view column's stored values beside the source rows.

    Under the reserved ``__geneva_fp`` prefix, so no source column a view can read has it.
    """
    return f"{FINGERPRINT_PREFIX}_stored__{column}"


class CopyInput:
    """Refresh input: a view fragment's ``__source_row_id``s, the source rows they name, the view columns out.

    Copied columns are copied again (cheap); a UDF column runs only on the rows whose own inputs
    changed since its stored value was computed -- its stored fingerprint (``__geneva_fp__<column>``)
    differs from that of the source row's current inputs -- and keeps its stored value elsewhere.
    """

    def __init__(self, ctx: StageContext, ds: Dataset) -> None:
        import lance

        if ctx.job.source is None:
            raise InvalidArgumentError(f"refresh plan of view '{ctx.job.table}' names no source")
        self.source = ctx.job.source
        self.ds = ds
        self.src = lance.dataset(self.source.uri, version=self.source.version, storage_options=ctx.storage_options)
        self.udfs = {c: udf_for(ds, c) for c in self.source.udf_columns}
        self.inputs = {c: udf_info(ds, c).input_columns or [] for c in self.source.udf_columns}
        # A view UDF column's fingerprints are seeded with its UDF's version and the column's incarnation.
        self.udf_seeds = {c: f"{info.version}:{info.column_uid}" for c in self.source.udf_columns
                          if (info := udf_column_info(ds.schema.field(c).metadata)) is not None}
        self.types = {name: ds.schema.field(name).type for name in [*self.source.copied, *self.udfs]}
        self.stored = [c for u in self.udfs for c in (u, fingerprint_column(u)) if c in ds.schema.names]
        self.seed = ctx.job.column_uid

    def read(self, pieces: Pieces) -> pa.Table:
        """The source rows, with the view rows' stored UDF values and fingerprints beside them."""
        view_rows = read_pieces(self.ds, pieces, [SOURCE_ROW_ID, *self.stored])
        ids = view_rows.column(SOURCE_ROW_ID)
        rows = select_paths(self.src._take_rows(ids.combine_chunks().cast(pa.uint64()),
                                                columns=self.source.read_columns), self.source.read_columns)
        if rows.num_rows != len(ids):
            raise RuntimeError(f"view '{self.ds.uri}' names {len(ids)} source rows but only {rows.num_rows} exist "
                               f"at source version {self.source.version}")
        for column in self.stored:
            rows = rows.append_column(_stored(column), view_rows.column(column))
        return rows

    def compute(self, rows: pa.Table, failures: Failures, watch: Watch | None = None) -> dict[str, pa.Array]:
        out = {name: rows.column(col).combine_chunks().cast(self.types[name])
               for name, col in self.source.copied.items()}
        for name, fn in self.udfs.items():
            out[name], out[fingerprint_column(name)] = self._udf_column(name, fn, rows, failures, watch)
        out[IS_SET] = pa.array(np.ones(rows.num_rows, bool))
        return out

    def _udf_column(self, name: str, fn: UDF, rows: pa.Table, failures: Failures,
                    watch: Watch | None = None) -> tuple[pa.Array, pa.Array]:
        """The column's values and input fingerprints: stored ones where still valid, computed on the other rows."""
        inputs = self.inputs[name]
        current = row_fingerprints([path_column(rows, c) for c in inputs], self.udf_seeds[name], rows.num_rows)
        fp = fingerprint_column(name)
        if fp in self.stored:
            stored = rows.column(_stored(fp)).combine_chunks()
            valid = stored.is_valid().to_numpy(zero_copy_only=False) & np.equal(
                stored.fill_null(0).to_numpy(zero_copy_only=False), current.to_numpy())
        else:
            valid = np.zeros(rows.num_rows, bool)
        todo = np.flatnonzero(~valid)
        if not len(todo):
            return rows.column(_stored(name)).combine_chunks().cast(self.types[name]), current
        found: Failures = []
        try:
            values = evaluate(name, fn, rows if len(todo) == rows.num_rows else rows.take(pa.array(todo)), inputs,
                              found, watch)
        except ComputeError as exc:
            if exc.error.index is not None:  # name the row in the chunk, not in the recomputed part of it
                exc.error.index = int(todo[exc.error.index])
            raise
        finally:  # failures name rows of the chunk, like every other column's
            failures.extend((col, dataclasses.replace(f, index=int(todo[f.index]) if f.index >= 0 else f.index))
                            for col, f in found)
        if len(todo) == rows.num_rows:
            merged = values.cast(self.types[name])
        else:
            index = np.arange(rows.num_rows)
            index[todo] = rows.num_rows + np.arange(len(todo))
            merged = pa.concat_arrays([rows.column(_stored(name)).combine_chunks().cast(self.types[name]),
                                       values.cast(self.types[name])]).take(pa.array(index))
        skipped = [int(todo[f.index]) for _, f in found if f.outcome == RowOutcome.SKIPPED and f.index >= 0]
        if skipped:  # no value, so no fingerprint: the next refresh tries the row again
            keep = np.ones(rows.num_rows, bool)
            keep[skipped] = False
            current = pc.if_else(pa.array(keep), current, pa.scalar(None, current.type))
        return merged, current

    def fingerprints(self, rows: pa.Table) -> pa.Array:
        return row_fingerprints([rows.column(c) for c in self.source.read_columns], self.seed, rows.num_rows)
