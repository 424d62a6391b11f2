"""Table functions: ``@chunker`` (1:N, one source row yields 0..N rows) and ``@udtf`` (N:M, batch) (core).

A chunker's parameters bind to source columns by name, like a scalar ``@udf``; it yields (or returns a
list of) output rows -- dataclass, NamedTuple or TypedDict instances, or dicts -- whose schema comes
from the return annotation (``Iterator[Chunk]``) or ``output_schema=``.  With ``batch=True`` it takes one
Arrow array per input column and returns a ``RecordBatch`` of the expanded rows plus ``__parent_index``,
the position of each row's parent in the batch.  A batch UDTF (``@udtf``) receives the rows of one
partition (``partition_by``: one call per distinct value; without it, one call over the whole selection)
and yields output batches.

A UDTF is a user function like a UDF (:mod:`geneva_provider.core.functions.base`): pickled by value
into the view's schema metadata, its version a hash of what it computes, its failures settled by its
``on_error`` policy, its ``num_cpus`` / ``num_gpus`` / ``memory`` asked of Spark for each task that runs
it, its parameters bound by the same binder and its row types mapped by the same annotation mapper.
This module adds how a table function is called and how its calls' rows are settled parent by parent
(:mod:`geneva_provider.core.functions.rows` converts and checks the rows).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from types import GeneratorType
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from geneva_provider.core.contracts.kinds import RowOutcome, UDTFKind
from geneva_provider.core.error_policy import RowFailure, call_with_policy, format_trace
from geneva_provider.core.errors import UDFDefinitionError
from geneva_provider.core.functions.arrow_types import row_type_of_return, schema_of_row_type
from geneva_provider.core.functions.base import UDFCallError, UserFunction, check_manifest, check_name, options
from geneva_provider.core.functions.binding import Binding, bind, input_list
from geneva_provider.core.functions.identity import udf_fingerprint
from geneva_provider.core.functions.rows import RowSchema, UDTFRowError, as_rows, check_schema

__all__ = ["PARENT_INDEX", "UDTF", "UDTFKind", "UDTFRowError", "chunker", "load_udtf", "scalar_udtf", "udtf"]

PARENT_INDEX = "__parent_index"  # a batch chunker's output: which input row each output row expands


@dataclass(kw_only=True)
class UDTF(UserFunction):
    """A table function, plus what is needed to run it anywhere and to tell its output apart.

    ``input_columns`` is None for a batch UDTF over every source column the view reads.
    """

    noun: ClassVar[str] = "UDTF"
    stored_in: ClassVar[str] = "view metadata"

    kind: UDTFKind
    output_schema: pa.Schema
    batch: bool = False              # a chunker over Arrow arrays (one call per batch of parents)
    partition_by: str | None = None  # a batch UDTF: one call per distinct value of this source column
    # The output schema as declared, nullability included (``output_schema`` is all nullable at the top,
    # as the view stores it); None for a UDTF pickled before it was recorded: nothing is required.
    declared_schema: pa.Schema | None = None
    # A chunker: whether its view's rows carry the source columns it reads (those the view's query selects), as
    # the reference's ``inherit_input_columns``; False leaves them out of the view (they are still read).
    inherit_input_columns: bool = True
    # A batch UDTF: how it takes its partition (:func:`source_kind`), read from its annotation where it is
    # declared (a worker may not resolve it); None for one pickled before it was recorded: read it there.
    source: str | None = None
    # A GenevaManifest (``@chunker(manifest=...)``) shipped to the workers of every refresh of its view.
    manifest: Any = None

    @property
    def label(self) -> str:
        return f"{'chunker' if self.kind is UDTFKind.CHUNKER else 'UDTF'} '{self.name}'"

    def outputs(self) -> pa.Schema:
        """The view's row columns a call yields (as the view stores them: nullable at the top)."""
        return self.output_schema

    @property
    def rows(self) -> RowSchema:
        """How this function's rows are converted and held to its declared schema."""
        return RowSchema(self.output_schema, self.declared_schema, self.label)

    # ------------------------------------------------------------------ a chunker
    def expand(self, rows: pa.Table, failures: list[RowFailure]) -> tuple[pa.Table, np.ndarray]:
        """The chunker over ``rows``: (output rows, the index in ``rows`` of each one's parent).

        A parent whose call fails, or whose rows do not convert to the output schema, goes through the
        ``on_error`` policy: a skipped parent yields nothing and is listed in ``failures`` (outcome
        SKIPPED); a parent that must fail raises :class:`UDFCallError` with its index.  The rows of all
        parents are converted to Arrow in one pass; only when that fails are they converted parent by
        parent, to find the ones at fault (the conversion is the expensive part, so it stays one pass).
        """
        fn = self._instance()
        inputs = list(self.input_columns or [])
        if self.batch:
            return self._expand_batch(fn, rows, inputs, failures)
        columns = [rows.column(c).to_pylist() for c in inputs]
        calls = list(zip(*columns, strict=True)) if columns else [()] * rows.num_rows
        if not self.on_error.matchers:  # fail on the first error: no policy to consult per call
            out, counts = self._call_failing_fast(fn, calls, failures)
        else:
            out, counts = self._call_with_policy(fn, calls, failures)
        parents = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        try:
            return self.rows.to_table(out), parents
        except UDTFRowError:
            pass
        starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

        def rows_of(lo: int, hi: int) -> pa.Table:
            return self.rows.to_table(out[int(starts[lo]):int(starts[hi])])

        def again(i: int) -> pa.Table:
            return self.rows.to_table(as_rows(fn(*calls[i]), self.label))

        return self._settle_conversion(rows_of, again, counts, failures)

    def _call_failing_fast(self, fn: Callable[..., Any], calls: list[tuple[Any, ...]], failures: list[RowFailure]
                           ) -> tuple[list[Any], list[int]]:
        """Every parent's rows and their count, without an error policy: the first failing call fails."""
        out: list[Any] = []
        counts: list[int] = []
        label, extend, count = self.label, out.extend, counts.append
        for i, args in enumerate(calls):
            try:
                got = fn(*args)
                if type(got) is GeneratorType:  # the rows go straight into ``out``: no list per call
                    before = len(out)
                    extend(got)
                    count(len(out) - before)
                    continue
                got = as_rows(got, label)
            except Exception as exc:
                failures.append(RowFailure(index=i, error_type=type(exc).__name__, message=str(exc)[:2_000],
                                           traceback=format_trace(exc), attempts=1, outcome=RowOutcome.FAILED))
                raise UDFCallError(f"{type(exc).__name__}: {exc}", index=i, original=exc) from exc
            extend(got)
            count(len(got))
        return out, counts

    def _call_with_policy(self, fn: Callable[..., Any], calls: list[tuple[Any, ...]], failures: list[RowFailure]
                          ) -> tuple[list[Any], list[int]]:
        """Every parent's rows and their count, each call under the ``on_error`` policy (a skipped one: 0)."""
        out: list[Any] = []
        counts: list[int] = []
        for i, args in enumerate(calls):
            outcome = call_with_policy(self.on_error, partial(_call_rows, fn, args, self.label))
            self._settle(outcome, i, failures)
            got = outcome.value if outcome.ok else []
            out.extend(got)
            counts.append(len(got))
        return out, counts

    def _settle_conversion(self, rows_of: Callable[[int, int], pa.Table], again: Callable[[int], pa.Table],
                           counts: Sequence[int] | np.ndarray, failures: list[RowFailure]
                           ) -> tuple[pa.Table, np.ndarray]:
        """The rows of parents ``0..len(counts)`` whose conversion failed as a whole, parent by parent.

        ``rows_of(lo, hi)`` converts the rows of parents ``lo..hi`` (UDTFRowError if it cannot);
        ``again(i)`` calls the chunker on parent ``i`` alone and converts its rows.  The parents at fault
        are found by halving (a few conversions per culprit, not one per parent), and each goes through
        the ``on_error`` policy as a failed call of that parent: its conversion error is its first
        attempt, a ``Retry`` calls the chunker again, a ``Skip`` drops its rows, anything else fails.
        """
        n = len(counts)
        has_rows = np.asarray(counts, np.int64) > 0
        good: list[tuple[int, int, pa.Table]] = []
        bad: dict[int, UDTFRowError] = {}

        def split(lo: int, hi: int, known_bad: bool) -> None:
            if not has_rows[lo:hi].any():
                return
            if not known_bad:
                try:
                    good.append((lo, hi, rows_of(lo, hi)))
                    return
                except UDTFRowError as exc:
                    if hi - lo == 1:
                        bad[lo] = exc
                        return
            elif hi - lo == 1:
                try:
                    good.append((lo, hi, rows_of(lo, hi)))
                except UDTFRowError as exc:
                    bad[lo] = exc
                return
            mid = (lo + hi) // 2
            split(lo, mid, False)
            split(mid, hi, False)

        split(0, n, True)
        pieces = [(lo, t, np.repeat(np.arange(lo, hi, dtype=np.int64), np.asarray(counts[lo:hi], np.int64)))
                  for lo, hi, t in good]
        for i in sorted(bad):
            outcome = call_with_policy(self.on_error, _first_raising(bad[i], partial(again, i)))
            self._settle(outcome, i, failures)
            if outcome.ok:
                table: pa.Table = outcome.value
                pieces.append((i, table, np.full(table.num_rows, i, np.int64)))
        pieces.sort(key=lambda p: p[0])
        if not pieces:
            return self.output_schema.empty_table(), np.zeros(0, np.int64)
        return (pa.concat_tables([t for _, t, _ in pieces]),
                np.concatenate([p for _, _, p in pieces]).astype(np.int64))

    def _expand_batch(self, fn: Callable[..., Any], rows: pa.Table, inputs: list[str],
                      failures: list[RowFailure]) -> tuple[pa.Table, np.ndarray]:
        """A ``batch=True`` chunker over ``rows``: one call; under a policy that skips, a failing call is
        made again row by row, and a returned batch whose values do not convert is settled parent by parent."""
        arrays = [rows.column(c).combine_chunks() for c in inputs]
        outcome = call_with_policy(self.on_error, lambda: fn(*arrays))
        if outcome.error is not None and not outcome.ok:
            if outcome.skipped and rows.num_rows > 1:  # find the rows that fail, one by one
                tables, parents = [], []
                for i in range(rows.num_rows):
                    found: list[RowFailure] = []
                    t, p = self._expand_batch(fn, rows.slice(i, 1), inputs, found)
                    failures.extend(dataclasses.replace(f, index=i) for f in found)
                    tables.append(t)
                    parents.append(p + i)
                return pa.concat_tables(tables), np.concatenate(parents)
            self._settle(outcome, 0 if rows.num_rows == 1 else None, failures)  # raises unless skipped
            return self.output_schema.empty_table(), np.zeros(0, np.int64)
        got, index = self._batch_result(outcome.value, rows.num_rows)
        try:
            return self.rows.conform(got), index
        except UDTFRowError:
            pass
        order = np.argsort(index, kind="stable")  # each parent's rows together, parents ascending
        got, index = got.take(pa.array(order)), index[order]
        counts = np.bincount(index, minlength=rows.num_rows)
        starts = np.concatenate([[0], np.cumsum(counts)])

        def rows_of(lo: int, hi: int) -> pa.Table:
            return self.rows.conform(got.slice(int(starts[lo]), int(starts[hi] - starts[lo])))

        def again(i: int) -> pa.Table:
            one = [a.slice(i, 1) for a in arrays]
            return self.rows.conform(self._batch_result(fn(*one), 1)[0])

        return self._settle_conversion(rows_of, again, counts, failures)

    def _batch_result(self, got: Any, n: int) -> tuple[pa.Table, np.ndarray]:
        """A batch chunker's return value as (its output columns, unconverted; each row's parent index)."""
        if isinstance(got, pa.RecordBatch):
            got = pa.Table.from_batches([got])
        if not isinstance(got, pa.Table) or PARENT_INDEX not in got.column_names:
            raise UDFCallError(f"{self.label} (batch=True) must return a RecordBatch of its output columns "
                               f"{self.output_schema.names} plus '{PARENT_INDEX}' (the input row each output row "
                               f"comes from), got {type(got).__name__}"
                               + (f" with columns {got.column_names}" if isinstance(got, pa.Table) else ""))
        parents = got.column(PARENT_INDEX).to_numpy(zero_copy_only=False).astype(np.int64)
        if len(parents) and (parents.min() < 0 or parents.max() >= n):
            raise UDFCallError(f"{self.label} returned a '{PARENT_INDEX}' of {int(parents.max())} for a batch of "
                               f"{n} rows")
        return got.drop_columns([PARENT_INDEX]), parents

    # ------------------------------------------------------------------ a batch UDTF
    def run_partition(self, rows: pa.Table) -> pa.Table:
        """The batch UDTF over one partition's rows: every batch it yields, as one table of its schema.

        The function is given the rows as its parameter's annotation asks (:func:`_partition_argument`).
        A partition of no rows (an unpartitioned UDTF over a source whose rows are all gone) is given as
        one empty batch of the input schema, not as no batch at all: the function sees the columns it
        reads either way, so an aggregate can say ``count = 0`` (``pa.Table.from_batches`` of nothing fails).
        """
        fn = self._callable()
        arg = _partition_argument(self, rows)
        outcome = call_with_policy(self.on_error, lambda: _collect(fn(arg), self))
        if outcome.error is not None and not outcome.ok:
            if outcome.skipped:
                return self.output_schema.empty_table()
            raise UDFCallError(f"{type(outcome.error).__name__}: {outcome.error}", original=outcome.error)
        result: pa.Table = outcome.value
        return result


def load_udtf(pickle_b64: str) -> UDTF:
    """Rebuilds a UDTF from its base64 pickle."""
    return UDTF.load(pickle_b64)


def _collect(result: Any, fn: UDTF) -> pa.Table:
    if isinstance(result, pa.RecordBatch | pa.Table):
        result = [result]
    if not isinstance(result, Iterable):
        raise TypeError(f"{fn.label} must yield RecordBatches (or return a table), got {type(result).__name__}")
    parts = []
    for b in result:
        if isinstance(b, pa.RecordBatch):
            b = pa.Table.from_batches([b])
        if not isinstance(b, pa.Table):
            raise TypeError(f"{fn.label} yielded a {type(b).__name__}, not a RecordBatch")
        parts.append(fn.rows.conform(b))
    return pa.concat_tables(parts) if parts else fn.output_schema.empty_table()


def _call_rows(fn: Callable[..., Any], args: tuple[Any, ...], label: str) -> list[Any]:
    return as_rows(fn(*args), label)


def _first_raising(error: BaseException, then: Callable[[], Any]) -> Callable[[], Any]:
    """A call that raises ``error`` the first time (the attempt already made) and calls ``then`` after:
    what an error policy settles when a call's result failed only after the call returned."""
    raised = [False]

    def call() -> Any:
        if not raised[0]:
            raised[0] = True
            raise error
        return then()

    return call


def source_kind(binding: Binding) -> str:
    """How a batch UDTF takes its partition, by its parameter's annotation: ``pa.Table`` "table" (one table);
    ``GenevaQueryBuilder``, or none (the reference's ``def f(source)``), "query" (a query builder over the rows,
    also iterated as record batches); anything else (``Iterator[pa.RecordBatch]``) "batches" (an iterator)."""
    from geneva_provider.core.query_builder import GenevaQueryBuilder

    types = binding.param_types
    wanted = types[0] if types else inspect.Parameter.empty
    if wanted is pa.Table:
        return "table"
    if wanted is inspect.Parameter.empty or (inspect.isclass(wanted) and issubclass(wanted, GenevaQueryBuilder)):
        return "query"
    return "batches"


def _partition_argument(fn: UDTF, rows: pa.Table) -> Any:
    """What a batch UDTF is given for its partition's ``rows`` (:func:`source_kind`)."""
    from geneva_provider.core.query_builder import PartitionRows

    kind = fn.source or source_kind(bind(fn.func, fn.label, "@udtf"))
    if kind == "table":
        return rows
    if kind == "query":
        return PartitionRows(rows, fn.label)
    return iter(rows.to_batches() or [pa.RecordBatch.from_pylist([], schema=rows.schema)])


def _check_bool(value: Any, arg: str, label: str) -> None:
    """``batch="no"`` is truthy: only True and False say what they mean."""
    if not isinstance(value, bool):
        raise UDFDefinitionError(f"{label}: {arg} must be True or False, got {value!r}")


# ---------------------------------------------------------------------- decorators
def chunker(
    func: Callable[..., Any] | type | None = None,
    *,
    output_schema: pa.Schema | dict[str, Any] | None = None,
    input_columns: Sequence[str] | None = None,
    batch: bool = False,
    inherit_input_columns: bool = True,
    name: str | None = None,
    version: str | None = None,
    on_error: Any = None,
    num_cpus: int | None = None,
    num_gpus: float | None = None,
    memory: int | str | None = None,
    manifest: Any = None,
) -> Any:
    """Declares a chunker (a scalar UDTF): one source row in, zero or more output rows out.

    Its parameters bind to the source columns of the same names (or ``input_columns``, in order).  It
    yields rows -- dataclass, NamedTuple or TypedDict instances, or dicts -- or returns a list of them;
    their schema comes from the return annotation (``-> Iterator[Chunk]``) or ``output_schema``.  With
    ``batch=True`` it takes one ``pa.Array`` per input column and returns a ``RecordBatch`` of the
    output columns plus ``__parent_index`` (the input row each output row comes from).  A class is
    stateful: built once per worker (and GPU), its ``__call__`` is the chunker.

    Its view's rows carry the source columns its query selects (``.select([...])``, by default every one);
    ``inherit_input_columns=False`` leaves out those the chunker reads, as the reference does (they are still
    read to call it): a large input (a document, a video) is then not copied onto each of its rows, and an
    output column may take an input's name.

    ``on_error``, ``num_cpus``, ``num_gpus``, ``memory`` and ``manifest`` (a GenevaManifest shipped to the
    workers of every refresh of the view) mean what they mean for ``@udf``; none of them changes the
    chunker's version, which is a hash of what it computes.  Every argument is checked here,
    at decoration (UDFDefinitionError naming the chunker and the argument), not at the first refresh.
    """

    def wrap(f: Callable[..., Any] | type) -> UDTF:
        opts = options(f, "chunker", name=name, version=version, on_error=on_error, num_cpus=num_cpus,
                       num_gpus=num_gpus, memory=memory, default="chunker")
        label = opts.label
        check_manifest(manifest, label)
        _check_bool(batch, "batch", label)
        _check_bool(inherit_input_columns, "inherit_input_columns", label)
        given = input_list(input_columns, label, distinct=True)
        binding = bind(f, label, "@chunker")
        inputs = binding.columns(given, label)
        if not inputs:
            raise UDFDefinitionError(f"{label} takes no parameter: a chunker reads at least one source column")
        ret = binding.returns
        if output_schema is not None:
            schema, declared = check_schema(output_schema, label)
        elif batch:
            raise UDFDefinitionError(f"{label}: a batch chunker declares its columns with output_schema=")
        else:
            row_type = row_type_of_return(ret)
            if row_type is None:
                raise UDFDefinitionError(
                    f"{label}: cannot tell its output rows: annotate the return as Iterator[RowType] (a dataclass, "
                    f"NamedTuple or TypedDict) or pass output_schema=, got {ret!r}")
            schema, declared = check_schema(schema_of_row_type(row_type, label), label)
        if not batch and not (inspect.isgeneratorfunction(binding.target) or row_type_of_return(ret) is not None):
            raise UDFDefinitionError(f"{label} is not a generator and is not annotated as returning rows: a chunker "
                                     "yields its rows (or returns a list[...] of them)")
        return UDTF(func=f, kind=UDTFKind.CHUNKER, output_schema=schema, input_columns=inputs, name=opts.name,
                    version=opts.version or udf_fingerprint(f, str(schema), "chunker", batch), batch=batch,
                    stateful=binding.stateful, on_error=opts.on_error, resources=opts.resources,
                    declared_schema=declared, inherit_input_columns=inherit_input_columns, manifest=manifest)

    return wrap(func) if func is not None else wrap


def scalar_udtf(func: Callable[..., Any] | type | None = None, **options: Any) -> Any:
    """:func:`chunker` under the reference system's other name for it (same options)."""
    return chunker(func, **options)


def udtf(
    func: Callable[..., Any] | type | None = None,
    *,
    output_schema: pa.Schema | dict[str, Any] | None = None,
    input_columns: Sequence[str] | None = None,
    partition_by: str | None = None,
    name: str | None = None,
    version: str | None = None,
    on_error: Any = None,
    num_cpus: int | None = None,
    num_gpus: float | None = None,
    memory: int | str | None = None,
    manifest: Any = None,
) -> Any:
    """Declares a batch UDTF: the rows of a partition in, any rows out (N:M).

    It takes one argument: the partition's rows -- annotated ``GenevaQueryBuilder`` (or not annotated), a
    query builder over them (``source.to_arrow()``, ``source.to_pandas()``, or iterated as ``RecordBatch``es);
    annotated ``pa.Table``, one table; annotated ``Iterator[pa.RecordBatch]``, an iterator -- holding
    ``input_columns`` (default: every column the view reads) and
    yields ``RecordBatch``es (or returns a table) of ``output_schema``.  ``partition_by`` names a source
    column: one call per distinct value, the partitions spread over Spark tasks, and a refresh runs
    again only the partitions whose rows changed; without it, one call over the whole selection.
    Every argument is checked at decoration, as for :func:`chunker` (``manifest`` too).
    """

    def wrap(f: Callable[..., Any] | type) -> UDTF:
        opts = options(f, UDTF.noun, name=name, version=version, on_error=on_error, num_cpus=num_cpus,
                       num_gpus=num_gpus, memory=memory, default="udtf")
        label = opts.label
        check_manifest(manifest, label)
        check_name(partition_by, "partition_by", label)
        inputs = input_list(input_columns, label, distinct=True)
        if output_schema is None:
            raise UDFDefinitionError(f"{label}: a batch UDTF declares its output columns with output_schema=")
        schema, declared = check_schema(output_schema, label)
        binding = bind(f, label, "@udtf")
        if len(binding.params) != 1:
            raise UDFDefinitionError(f"{label} must take exactly one parameter (the partition's batches), "
                                     f"takes {len(binding.params)}")
        return UDTF(func=f, kind=UDTFKind.UDTF, output_schema=schema, input_columns=inputs, name=opts.name,
                    version=opts.version or udf_fingerprint(f, str(schema), "udtf", partition_by),
                    stateful=binding.stateful, partition_by=partition_by, on_error=opts.on_error,
                    resources=opts.resources, declared_schema=declared, source=source_kind(binding),
                    manifest=manifest)

    return wrap(func) if func is not None else wrap
