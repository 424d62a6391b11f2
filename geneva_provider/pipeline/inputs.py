"""Job inputs, by kind: what an apply task reads and computes for one fragment range.

A backfill *scans* the table's own rows (``ScanInput``); a view refresh *copies* the source rows
a view fragment names (``CopyInput``).  The apply stage finds the input of a job through the
registry here (:func:`input_for`), so a new job kind registers itself instead of being imported
by the stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pyarrow as pa

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.udf import UDF, UDFCallError, load_udf, udf_column_info
from geneva_provider.core.view_meta import IS_SET, SOURCE_ROW_ID
from geneva_provider.pipeline.context import StageContext

READ_BATCH_ROWS = 8192

# A Python worker serves many tasks: unpickle each UDF (and build a stateful one) once per
# process.  The key names the column incarnation, so a dropped and re-created table or column
# never hits a stale entry; datasets are reopened per task for the same reason (it is cheap).
_UDFS: dict[tuple[str, str, str], UDF] = {}


def udf_for(ds: Any, column: str) -> UDF:
    """The column's UDF, unpickled from the field metadata at the dataset's version."""
    info = udf_column_info(ds.schema.field(column).metadata)
    if info is None:
        raise InvalidArgumentError(f"column '{column}' of {ds.uri} is not a UDF column")
    key = (info.column_uid, info.version, column)
    if key not in _UDFS:
        _UDFS[key] = load_udf(info.pickle)
    return _UDFS[key]


class ComputeError(Exception):
    """A UDF failed on a chunk: carries the column and UDF it was computing."""

    def __init__(self, column: str, udf_name: str, error: UDFCallError) -> None:
        super().__init__(str(error))
        self.column, self.udf_name, self.error = column, udf_name, error


class JobInput(Protocol):
    """Reads a fragment's rows for a range and computes the job's output columns from them."""

    def batches(self, start: int, end: int) -> Iterator[pa.RecordBatch]: ...

    def compute(self, chunk: pa.Table) -> dict[str, pa.Array]: ...

    def empty(self) -> dict[str, pa.Array]: ...


InputFactory = Callable[[StageContext, Any, int], JobInput]
_REGISTRY: dict[str, InputFactory] = {}


def register_input(kind: str) -> Callable[[InputFactory], InputFactory]:
    """Registers the input of jobs of ``kind`` (the plan's ``kind``)."""
    def add(factory: InputFactory) -> InputFactory:
        _REGISTRY[kind] = factory
        return factory

    return add


def input_for(ctx: StageContext, ds: Any, frag_id: int) -> JobInput:
    """The input of the job's kind, for fragment ``frag_id`` of ``ds``."""
    try:
        factory = _REGISTRY[ctx.job.kind]
    except KeyError:
        raise InvalidArgumentError(f"no input registered for jobs of kind {ctx.job.kind!r}") from None
    return factory(ctx, ds, frag_id)


@register_input("backfill")
class ScanInput:
    """Backfill input: the fragment's rows that match ``where``, one UDF column out."""

    def __init__(self, ctx: StageContext, ds: Any, frag_id: int) -> None:
        self.job = ctx.job
        self.column = ctx.job.output_columns[0]
        self.frag = ds.get_fragment(frag_id)
        self.fn = udf_for(ds, self.column)

    def batches(self, start: int, end: int) -> Iterator[pa.RecordBatch]:
        return self.frag.to_batches(columns=self.job.input_columns, filter=self.job.where, offset=start,
                                    limit=end - start, with_row_address=True, batch_size=READ_BATCH_ROWS)

    def compute(self, chunk: pa.Table) -> dict[str, pa.Array]:
        try:
            return {self.column: self.fn.evaluate(chunk, self.job.input_columns)}
        except UDFCallError as exc:
            raise ComputeError(self.column, self.fn.name, exc) from exc

    def empty(self) -> dict[str, pa.Array]:
        return {self.column: pa.array([], self.fn.data_type)}


@register_input("refresh")
class CopyInput:
    """Refresh input: a view fragment's ``__source_row_id``s, the source rows they name, the view columns out."""

    def __init__(self, ctx: StageContext, ds: Any, frag_id: int) -> None:
        import lance

        if ctx.job.source is None:
            raise InvalidArgumentError(f"refresh plan of view '{ctx.job.table}' names no source")
        self.source = ctx.job.source
        self.frag = ds.get_fragment(frag_id)
        self.src = lance.dataset(self.source.uri, version=self.source.version, storage_options=ctx.storage_options)
        self.udfs = {c: udf_for(ds, c) for c in self.source.udf_columns}
        self.inputs = {c: udf_column_info(ds.schema.field(c).metadata).input_columns for c in self.source.udf_columns}
        self.types = {c: ds.schema.field(c).type for c in ctx.job.output_columns}

    def batches(self, start: int, end: int) -> Iterator[pa.RecordBatch]:
        return self.frag.to_batches(columns=[SOURCE_ROW_ID], offset=start, limit=end - start,
                                    with_row_address=True, batch_size=READ_BATCH_ROWS)

    def compute(self, chunk: pa.Table) -> dict[str, pa.Array]:
        ids = chunk.column(SOURCE_ROW_ID).combine_chunks().cast(pa.uint64())
        rows = self.src._take_rows(ids, columns=self.source.read_columns, ignore_deletions=True)
        out = {name: rows.column(col).combine_chunks().cast(self.types[name])
               for name, col in self.source.copied.items()}
        for name, fn in self.udfs.items():
            try:
                out[name] = fn.evaluate(rows, self.inputs[name])
            except UDFCallError as exc:
                raise ComputeError(name, fn.name, exc) from exc
        out[IS_SET] = pa.array([True] * chunk.num_rows, pa.bool_())
        return out

    def empty(self) -> dict[str, pa.Array]:
        return {c: pa.array([], t) for c, t in self.types.items()}
