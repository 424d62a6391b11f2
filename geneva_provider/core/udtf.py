"""Table functions: ``@chunker`` (1:N, one source row yields 0..N rows) and ``@udtf`` (N:M, batch) (core).

A chunker's parameters bind to source columns by name, like a scalar ``@udf``; it yields (or returns a
list of) output rows -- dataclass, NamedTuple or TypedDict instances, or dicts -- whose schema comes
from the return annotation (``Iterator[Chunk]``) or ``output_schema=``.  With ``batch=True`` it takes one
Arrow array per input column and returns a ``RecordBatch`` of the expanded rows plus ``__parent_index``,
the position of each row's parent in the batch.  A batch UDTF (``@udtf``) receives the rows of one
partition (``partition_by``: one call per distinct value; without it, one call over the whole selection)
and yields output batches.

A UDTF travels like a UDF: pickled by value into the view's schema metadata, its version a hash of what
it computes (:mod:`geneva_provider.core.udf_identity`), its failures settled by its ``on_error`` policy,
and its ``num_cpus`` / ``num_gpus`` / ``memory`` asked of Spark for each task that runs it.
"""

from __future__ import annotations

import base64
import collections.abc
import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from geneva_provider.core.error_policy import (
    ErrorPolicy,
    Outcome,
    RowFailure,
    call_with_policy,
    error_policy,
    format_trace,
)
from geneva_provider.core.errors import UDFDefinitionError
from geneva_provider.core.kinds import RowOutcome
from geneva_provider.core.resources import UDFResources, udf_resources
from geneva_provider.core.udf import _PY_TYPES, UDFCallError, dumps_by_value
from geneva_provider.core.udf_identity import udf_fingerprint

PARENT_INDEX = "__parent_index"  # a batch chunker's output: which input row each output row expands


class UDTFKind(StrEnum):
    """A chunker (1:N, the view follows its source row by row) or a batch UDTF (N:M, by partition)."""

    CHUNKER = "chunker"
    UDTF = "udtf"


@dataclass
class UDTF:
    """A table function, plus what is needed to run it anywhere and to tell its output apart."""

    func: Callable[..., Any] | type
    kind: UDTFKind
    output_schema: pa.Schema
    input_columns: list[str] | None  # None: a batch UDTF over every source column the view reads
    name: str
    version: str
    batch: bool = False              # a chunker over Arrow arrays (one call per batch of parents)
    stateful: bool = False
    partition_by: str | None = None  # a batch UDTF: one call per distinct value of this source column
    on_error: ErrorPolicy = field(default_factory=ErrorPolicy)
    resources: UDFResources | None = None
    # The output schema as declared, nullability included (``output_schema`` is all nullable at the top,
    # as the view stores it); None for a UDTF pickled before it was recorded: nothing is required.
    declared_schema: pa.Schema | None = None
    _instances: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped function directly, so a decorated function stays usable (and testable)."""
        return self._callable()(*args, **kwargs)

    def _callable(self) -> Callable[..., Any]:
        """The function, or this worker's instance of a stateful class (one per process and GPU set)."""
        from geneva_provider.core.devices import device_instance

        return device_instance(self.func, self.stateful, self._instances)

    @property
    def label(self) -> str:
        return f"{'chunker' if self.kind is UDTFKind.CHUNKER else 'UDTF'} '{self.name}'"

    # ------------------------------------------------------------------ a chunker
    def expand(self, rows: pa.Table, failures: list[RowFailure]) -> tuple[pa.Table, np.ndarray]:
        """The chunker over ``rows``: (output rows, the index in ``rows`` of each one's parent).

        A parent whose call fails, or whose rows do not convert to the output schema, goes through the
        ``on_error`` policy: a skipped parent yields nothing and is listed in ``failures`` (outcome
        SKIPPED); a parent that must fail raises :class:`UDFCallError` with its index.  The rows of all
        parents are converted to Arrow in one pass; only when that fails are they converted parent by
        parent, to find the ones at fault (the conversion is the expensive part, so it stays one pass).
        """
        try:
            fn = self._callable()
        except Exception as exc:  # a stateful chunker whose __init__ fails
            raise UDFCallError(f"{type(exc).__name__} while creating the stateful chunker: {exc}",
                               original=exc) from exc
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
            return self._rows_to_table(out), parents
        except UDTFRowError:
            pass
        starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

        def rows_of(lo: int, hi: int) -> pa.Table:
            return self._rows_to_table(out[int(starts[lo]):int(starts[hi])])

        def again(i: int) -> pa.Table:
            return self._rows_to_table(_as_rows(fn(*calls[i]), self.label))

        return self._settle_conversion(rows_of, again, counts, failures)

    def _call_failing_fast(self, fn: Callable[..., Any], calls: list[tuple[Any, ...]], failures: list[RowFailure]
                           ) -> tuple[list[Any], list[int]]:
        """Every parent's rows and their count, without an error policy: the first failing call fails."""
        out: list[Any] = []
        counts: list[int] = []
        for i, args in enumerate(calls):
            try:
                got = _as_rows(fn(*args), self.label)
            except Exception as exc:
                failures.append(RowFailure(index=i, error_type=type(exc).__name__, message=str(exc)[:2_000],
                                           traceback=format_trace(exc), attempts=1, outcome=RowOutcome.FAILED))
                raise UDFCallError(f"{type(exc).__name__}: {exc}", index=i, original=exc) from exc
            out.extend(got)
            counts.append(len(got))
        return out, counts

    def _call_with_policy(self, fn: Callable[..., Any], calls: list[tuple[Any, ...]], failures: list[RowFailure]
                          ) -> tuple[list[Any], list[int]]:
        """Every parent's rows and their count, each call under the ``on_error`` policy (a skipped one: 0)."""
        out: list[Any] = []
        counts: list[int] = []
        for i, args in enumerate(calls):
            outcome = call_with_policy(self.on_error, partial(_call_rows, fn, args, self.label))
            self._record(outcome, i, failures)
            got = outcome.value if outcome.ok else []
            out.extend(got)
            counts.append(len(got))
        return out, counts

    def _record(self, outcome: Outcome, index: int, failures: list[RowFailure]) -> None:
        """Lists a parent's failed attempts in ``failures``; UDFCallError when the policy fails the parent."""
        if outcome.error is None:
            return
        state = RowOutcome.RECOVERED if outcome.ok else RowOutcome.SKIPPED if outcome.skipped else RowOutcome.FAILED
        failures.append(RowFailure(index=index, error_type=type(outcome.error).__name__,
                                   message=str(outcome.error)[:2_000], traceback=outcome.trace,
                                   attempts=outcome.attempts, outcome=state))
        if not outcome.ok and not outcome.skipped:
            tries = f" (after {outcome.attempts} attempts)" if outcome.attempts > 1 else ""
            raise UDFCallError(f"{type(outcome.error).__name__}: {outcome.error}{tries}", index=index,
                               original=outcome.error) from outcome.error

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
            self._record(outcome, i, failures)
            if outcome.ok:
                table: pa.Table = outcome.value
                pieces.append((i, table, np.full(table.num_rows, i, np.int64)))
        pieces.sort(key=lambda p: p[0])
        if not pieces:
            return self.output_schema.empty_table(), np.zeros(0, np.int64)
        return (pa.concat_tables([t for _, t, _ in pieces]),
                np.concatenate([p for _, _, p in pieces]).astype(np.int64))

    def _rows_to_table(self, out: list[Any]) -> pa.Table:
        """The yielded rows as a table of the output schema; UDTFRowError naming the first bad field.

        Rows of one NamedTuple or dataclass type convert column by column in one pass (no Python loop
        per row); other rows go through dicts.  A None where the declared schema says not nullable is
        refused too: Arrow's conversion lets it through.
        """
        try:
            table = self._convert(out)
        except _CONVERSION_ERRORS as exc:
            raise self._explain(out, exc) from None
        if self._required:
            for f in self.declared_schema or ():
                path = _null_path(table.column(f.name), f, f.name)
                if path is not None:
                    raise UDTFRowError(f"{self.label} yielded None for '{path}', which its output schema declares "
                                       "not nullable")
        return table

    @property
    def _required(self) -> bool:
        """Whether the declared schema has a field (at any depth) that is not nullable."""
        return self.declared_schema is not None and any(_has_required(f) for f in self.declared_schema)

    def _convert(self, out: list[Any]) -> pa.Table:
        names = self.output_schema.names
        kind = _one_row_type(out)
        try:
            if kind is not None and issubclass(kind, tuple) and list(getattr(kind, "_fields", ())) == names:
                # NamedTuples: Arrow reads the tuples as structs in one pass, no Python loop per row
                struct = pa.array(out, type=pa.struct(list(self.output_schema)))
                return pa.Table.from_arrays(struct.flatten(), schema=self.output_schema)
            if kind is not None and dataclasses.is_dataclass(kind) and [
                    f.name for f in dataclasses.fields(kind)] == names:
                return pa.Table.from_arrays([pa.array([getattr(r, n) for r in out], type=f.type)
                                             for n, f in zip(names, self.output_schema, strict=True)],
                                            schema=self.output_schema)
        except _CONVERSION_ERRORS:
            pass  # the dicts below convert what the one-pass paths cannot (or fail the same)
        return pa.Table.from_pylist([_as_record(r, names) for r in out], schema=self.output_schema)

    def _bad_field(self, row: Any) -> tuple[str, Any, pa.DataType, str] | None:
        """The first field of one row that does not convert: (path, value, declared type, why)."""
        record = _as_record(row, self.output_schema.names)
        for f in self.declared_schema or self.output_schema:
            found = _bad_value(record[f.name], f, f.name)
            if found is not None:
                return found
        return None

    def _explain(self, out: list[Any], exc: BaseException | None) -> UDTFRowError:
        """The UDTFRowError naming the first row of ``out`` that does not fit: its field, its value's type."""
        for row in out:
            try:
                found = self._bad_field(row)
            except (TypeError, KeyError) as err:
                return UDTFRowError(f"{self.label} yielded a row that does not match its output schema "
                                    f"{_describe(self.output_schema)}: {err}")
            if found is not None:
                path, value, declared, why = found
                return UDTFRowError(f"{self.label} yielded a row whose field '{path}' holds "
                                    f"{_a_value(value)}, which does not fit its declared type {declared}{why}")
        return UDTFRowError(f"{self.label} yielded rows that do not match its output schema "
                            f"{_describe(self.output_schema)}: {exc}")

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
            state = RowOutcome.SKIPPED if outcome.skipped else RowOutcome.FAILED
            failures.append(RowFailure(index=0 if rows.num_rows == 1 else -1,
                                       error_type=type(outcome.error).__name__, message=str(outcome.error)[:2_000],
                                       traceback=outcome.trace, attempts=outcome.attempts, outcome=state))
            if not outcome.skipped:
                raise UDFCallError(f"{type(outcome.error).__name__}: {outcome.error}",
                                   index=0 if rows.num_rows == 1 else None, original=outcome.error)
            return self.output_schema.empty_table(), np.zeros(0, np.int64)
        got, index = self._batch_result(outcome.value, rows.num_rows)
        try:
            return self._conform(got), index
        except UDTFRowError:
            pass
        order = np.argsort(index, kind="stable")  # each parent's rows together, parents ascending
        got, index = got.take(pa.array(order)), index[order]
        counts = np.bincount(index, minlength=rows.num_rows)
        starts = np.concatenate([[0], np.cumsum(counts)])

        def rows_of(lo: int, hi: int) -> pa.Table:
            return self._conform(got.slice(int(starts[lo]), int(starts[hi] - starts[lo])))

        def again(i: int) -> pa.Table:
            one = [a.slice(i, 1) for a in arrays]
            return self._conform(self._batch_result(fn(*one), 1)[0])

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

    def _conform(self, table: pa.Table) -> pa.Table:
        return conform(table, self.output_schema, self.label, self.declared_schema)

    # ------------------------------------------------------------------ a batch UDTF
    def run_partition(self, rows: pa.Table) -> pa.Table:
        """The batch UDTF over one partition's rows: every batch it yields, as one table of its schema.

        A partition of no rows (an unpartitioned UDTF over a source whose rows are all gone) is given as
        one empty batch of the input schema, not as no batch at all: the function sees the columns it
        reads either way, so an aggregate can say ``count = 0`` (``pa.Table.from_batches`` of nothing fails).
        """
        fn = self._callable()
        wants_table = _wants_table(self.func)
        batches = rows.to_batches() or [pa.RecordBatch.from_pylist([], schema=rows.schema)]
        arg: Any = rows if wants_table else iter(batches)
        outcome = call_with_policy(self.on_error, lambda: _collect(fn(arg), self))
        if outcome.error is not None and not outcome.ok:
            if outcome.skipped:
                return self.output_schema.empty_table()
            raise UDFCallError(f"{type(outcome.error).__name__}: {outcome.error}", original=outcome.error)
        result: pa.Table = outcome.value
        return result

    # ------------------------------------------------------------------ travel
    def pickled_b64(self) -> str:
        """The UDTF pickled by value (base64), as the view's schema metadata stores it."""
        try:
            return base64.b64encode(dumps_by_value(self)).decode("ascii")
        except Exception as exc:  # noqa: BLE001 - cloudpickle raises many kinds
            raise UDFDefinitionError(f"{self.label} cannot be pickled to run on Spark executors "
                                     f"({type(exc).__name__}: {exc}); create unpicklable state in a stateful "
                                     "class's __init__") from None


def load_udtf(pickle_b64: str) -> UDTF:
    """Rebuilds a UDTF from its base64 pickle."""
    obj = cloudpickle.loads(base64.b64decode(pickle_b64))
    if not isinstance(obj, UDTF):
        raise UDFDefinitionError(f"view metadata holds a {type(obj).__name__}, not a geneva UDTF")
    return obj


def conform(table: pa.Table, schema: pa.Schema, label: str, declared: pa.Schema | None = None) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types; UDTFRowError naming the column otherwise.

    ``declared`` (the schema as the UDTF declared it) adds its nullability: a null in a field it says is
    not nullable is refused here, since Arrow's casts let it through.
    """
    missing = [n for n in schema.names if n not in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    if missing or extra:
        raise UDTFRowError(f"{label} returned columns {table.column_names}, not its output schema "
                           f"{_describe(schema)} (missing {missing}, unexpected {extra})")
    columns = []
    for f in schema:
        col = table.column(f.name)
        try:
            columns.append(col.cast(f.type) if col.type != f.type else col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise UDTFRowError(f"{label} returned column '{f.name}' of type {col.type}, which does not convert to "
                               f"its declared type {f.type}: {exc}") from None
    out = pa.Table.from_arrays(columns, schema=schema)
    for f in declared or ():
        path = _null_path(out.column(f.name), f, f.name) if _has_required(f) else None
        if path is not None:
            raise UDTFRowError(f"{label} returned a null in '{path}', which its output schema declares not nullable")
    return out


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
        parts.append(conform(b, fn.output_schema, fn.label, fn.declared_schema))
    return pa.concat_tables(parts) if parts else fn.output_schema.empty_table()


def _as_rows(result: Any, label: str) -> list[Any]:
    """A chunker call's rows: a generator's or a list's items; TypeError for a single value."""
    kind = type(result)
    if kind is list:
        return result
    if kind is types.GeneratorType:
        return list(result)
    if result is None:
        return []
    if isinstance(result, str | bytes | dict) or dataclasses.is_dataclass(result) or _is_namedtuple(result) \
            or not isinstance(result, Iterable):
        raise TypeError(f"{label} must yield its rows (or return a list of them), but returned a "
                        f"{type(result).__name__}: {str(result)[:80]!r}")
    return list(result)


def _call_rows(fn: Callable[..., Any], args: tuple[Any, ...], label: str) -> list[Any]:
    return _as_rows(fn(*args), label)


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _one_row_type(rows: list[Any]) -> type | None:
    """The type of every row, when they all have one (then they convert column by column); else None."""
    if not rows:
        return None
    kind = type(rows[0])
    return None if any(type(r) is not kind for r in rows) else kind


def _as_record(row: Any, names: list[str]) -> dict[str, Any]:
    if isinstance(row, dict):
        record = row
    elif dataclasses.is_dataclass(row) and not isinstance(row, type):
        record = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    elif _is_namedtuple(row):
        record = row._asdict()
    else:
        raise TypeError(f"a row must be a dataclass, NamedTuple, TypedDict or dict, got {type(row).__name__} "
                        f"{str(row)[:80]!r}")
    extra = [k for k in record if k not in names]
    missing = [n for n in names if n not in record]
    if extra or missing:
        raise KeyError(f"its fields {list(record)} are not the schema's (missing {missing}, unexpected {extra})")
    return record


def _describe(schema: pa.Schema) -> str:
    return "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}"


_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError, KeyError)


class UDTFRowError(TypeError, ValueError):
    """Rows a UDTF yielded (or returned) that do not fit its declared output schema: a value of another
    type, a None where a field is not nullable, a row of another shape.

    A TypeError and a ValueError both, as the Arrow errors behind it are one or the other, so an error
    policy naming either (``Skip(ValueError)``, ``Retry(TypeError)``) takes it.
    """


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


def _has_required(f: pa.Field) -> bool:
    """Whether ``f`` or a field nested in it is not nullable."""
    if not f.nullable:
        return True
    t = f.type
    if pa.types.is_struct(t):
        return any(_has_required(t.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_required(t.value_field)
    return False


def _null_path(array: pa.Array | pa.ChunkedArray, f: pa.Field, path: str) -> str | None:
    """The path of the first field in ``array`` that holds a null where ``f`` says it is not nullable."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not f.nullable and array.null_count:
        return path
    t = f.type
    if pa.types.is_struct(t):
        for i, child in enumerate(array.flatten()):  # the children, with the parents' nulls
            found = _null_path(child, t.field(i), f"{path}.{t.field(i).name}")
            if found is not None:
                return found
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _null_path(array.flatten(), t.value_field, f"{path}[]")
    return None


def _bad_value(value: Any, f: pa.Field, path: str) -> tuple[str, Any, pa.DataType, str] | None:
    """Where ``value`` does not fit ``f``: (path of the innermost misfit, its value, its declared type,
    Arrow's reason); None if it fits.  Lists and structs are searched item by item, field by field."""
    if value is None:
        return None if f.nullable else (path, value, f.type, ": the field is not nullable")
    t = f.type
    why = ""
    try:
        pa.array([value], type=t)
        fits = True
    except _CONVERSION_ERRORS as exc:
        fits, why = False, f": {exc}"
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and isinstance(
            value, list | tuple):
        for k, item in enumerate(value):
            found = _bad_value(item, t.value_field, f"{path}[{k}]")
            if found is not None:
                return found
    elif pa.types.is_struct(t):
        items = value if isinstance(value, dict) else value._asdict() if _is_namedtuple(value) else None
        if items is not None:
            for i in range(t.num_fields):
                child = t.field(i)
                found = _bad_value(items.get(child.name), child, f"{path}.{child.name}")
                if found is not None:
                    return found
    return None if fits else (path, value, t, why)


def _a_value(value: Any) -> str:
    """``a str ('abc')``: a value's type and a short look at it, for an error message."""
    shown = repr(value)
    return f"a {type(value).__name__} ({shown[:60] + '...' if len(shown) > 60 else shown})"


def _wants_table(func: Any) -> bool:
    target = func.__call__ if inspect.isclass(func) else func
    hints = _hints(target)
    params = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
    return bool(params) and hints.get(params[0].name) is pa.Table


def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: use the raw ones
        return dict(getattr(fn, "__annotations__", {}) or {})


# ---------------------------------------------------------------------- output schemas
def arrow_type(t: Any, where: str) -> pa.DataType:
    """The Arrow type of a Python annotation: int, float, str, bool, bytes, list[...], Optional[...]."""
    if isinstance(t, pa.DataType):
        return t
    if t in _PY_TYPES:
        return _PY_TYPES[t]
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (list, collections.abc.Sequence) and len(args) == 1:
        return pa.list_(arrow_type(args[0], where))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return arrow_type(rest[0], where)
    raise UDFDefinitionError(f"{where}: cannot map the annotation {t!r} to an Arrow type; pass output_schema=")


def schema_of_row_type(row_type: Any, label: str) -> pa.Schema:
    """The Arrow schema of a row type -- a dataclass, a NamedTuple or a TypedDict -- from its annotations,
    as declared: a field is nullable only when annotated ``Optional[...]`` (``int`` means an int, not None)."""
    if not inspect.isclass(row_type):
        raise UDFDefinitionError(f"{label}: the row type {row_type!r} is not a dataclass, NamedTuple or TypedDict; "
                                 "pass output_schema=")
    if not (dataclasses.is_dataclass(row_type) or (issubclass(row_type, tuple) and hasattr(row_type, "_fields"))
            or typing.is_typeddict(row_type)):
        raise UDFDefinitionError(f"{label}: the row type {row_type.__name__} is not a dataclass, NamedTuple or "
                                 "TypedDict; pass output_schema=")
    hints = _hints(row_type)
    if not hints:
        raise UDFDefinitionError(f"{label}: the row type {row_type.__name__} has no annotated fields")
    return pa.schema([_annotated_field(n, t, f"{label}, field '{n}'") for n, t in hints.items()])


def _annotated_field(name: str, t: Any, where: str) -> pa.Field:
    return pa.field(name, arrow_type(t, where), nullable=_is_optional(t))


def _is_optional(t: Any) -> bool:
    """Whether an annotation admits None (``Optional[int]``, ``int | None``); an Arrow type always does."""
    if isinstance(t, pa.DataType):
        return True
    return typing.get_origin(t) in (typing.Union, types.UnionType) and type(None) in typing.get_args(t)


def _row_type_of_return(ret: Any) -> Any:
    """``Chunk`` from ``Iterator[Chunk]`` / ``Iterable`` / ``Generator`` / ``list[Chunk]``; None otherwise."""
    origin = typing.get_origin(ret)
    if origin in (collections.abc.Iterator, collections.abc.Iterable, collections.abc.Generator, list):
        args = typing.get_args(ret)
        return args[0] if args else None
    return None


def _check_schema(schema: Any, label: str) -> tuple[pa.Schema, pa.Schema]:
    """(the output schema as the view stores it -- every column nullable, so a skipped parent's marker
    fits --, the schema as declared, whose nullability the chunker's rows are held to)."""
    if isinstance(schema, dict):
        keys = [k for k in schema if not isinstance(k, str) or not k.strip()]
        if keys:
            raise UDFDefinitionError(f"{label}: output column names must be non-empty strings, got {keys[0]!r} "
                                     "in output_schema")
        schema = pa.schema([_annotated_field(n, t, f"{label}, column '{n}'") for n, t in schema.items()])
    if not isinstance(schema, pa.Schema) or not len(schema):
        raise UDFDefinitionError(f"{label}: output_schema must be a non-empty pyarrow Schema (or a dict of column "
                                 f"name -> type), got {schema!r}")
    empty = [n for n in schema.names if not n.strip()]
    if empty:
        raise UDFDefinitionError(f"{label}: output column names must be non-empty strings, got {empty[0]!r} "
                                 f"in {schema.names}")
    reserved = [n for n in schema.names if n.startswith("__")]
    if reserved:
        raise UDFDefinitionError(f"{label}: output columns {reserved}: names starting with '__' are reserved")
    if len(set(schema.names)) != len(schema.names):
        raise UDFDefinitionError(f"{label}: output_schema names a column twice: {schema.names}")
    return pa.schema([f.with_nullable(True) for f in schema]), schema


def _check_name(value: Any, arg: str, label: str) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise UDFDefinitionError(f"{label}: {arg} must be a non-empty string, got {value!r}")


def _check_bool(value: Any, arg: str, label: str) -> None:
    """``batch="no"`` is truthy: only True and False say what they mean."""
    if not isinstance(value, bool):
        raise UDFDefinitionError(f"{label}: {arg} must be True or False, got {value!r}")


def _input_list(input_columns: Any, label: str) -> list[str] | None:
    if input_columns is None:
        return None
    if isinstance(input_columns, str | bytes) or not isinstance(input_columns, Sequence) or not all(
            isinstance(c, str) and c.strip() for c in input_columns):
        raise UDFDefinitionError(f"{label}: input_columns must be a list of non-empty column names, "
                                 f"got {input_columns!r}")
    if len(set(input_columns)) != len(input_columns):
        raise UDFDefinitionError(f"{label}: input_columns names a column twice: {list(input_columns)}")
    return list(input_columns)


# ---------------------------------------------------------------------- decorators
def _signature(f: Any, decorator: str) -> tuple[bool, Callable[..., Any], list[inspect.Parameter]]:
    """Whether ``f`` is a stateful class, what is called, and its positional parameters (without self)."""
    stateful = inspect.isclass(f)
    target = f.__call__ if stateful else f
    if not callable(target):
        raise UDFDefinitionError(f"{decorator} needs a function or a class with __call__, got {f!r}")
    params = [p for p in inspect.signature(target).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return stateful, target, params[1:] if stateful and params else params


def chunker(
    func: Callable[..., Any] | type | None = None,
    *,
    output_schema: pa.Schema | dict[str, Any] | None = None,
    input_columns: Sequence[str] | None = None,
    batch: bool = False,
    name: str | None = None,
    version: str | None = None,
    on_error: Any = None,
    num_cpus: int | None = None,
    num_gpus: float | None = None,
    memory: int | str | None = None,
) -> Any:
    """Declares a chunker (a scalar UDTF): one source row in, zero or more output rows out.

    Its parameters bind to the source columns of the same names (or ``input_columns``, in order).  It
    yields rows -- dataclass, NamedTuple or TypedDict instances, or dicts -- or returns a list of them;
    their schema comes from the return annotation (``-> Iterator[Chunk]``) or ``output_schema``.  With
    ``batch=True`` it takes one ``pa.Array`` per input column and returns a ``RecordBatch`` of the
    output columns plus ``__parent_index`` (the input row each output row comes from).  A class is
    stateful: built once per worker (and GPU), its ``__call__`` is the chunker.

    ``on_error``, ``num_cpus``, ``num_gpus`` and ``memory`` mean what they mean for ``@udf``; none of them
    changes the chunker's version, which is a hash of what it computes.  Every argument is checked here,
    at decoration (UDFDefinitionError naming the chunker and the argument), not at the first refresh.
    """

    def wrap(f: Callable[..., Any] | type) -> UDTF:
        udtf_name = name if isinstance(name, str) and name.strip() else str(getattr(f, "__name__", "chunker"))
        label = f"chunker '{udtf_name}'"
        _check_name(name, "name", label)
        _check_name(version, "version", label)
        _check_bool(batch, "batch", label)
        policy = error_policy(on_error, label)
        resources = udf_resources(udtf_name, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory, label=label)
        given = _input_list(input_columns, label)
        stateful, target, params = _signature(f, "@chunker")
        inputs = given if given is not None else [p.name for p in params]
        if len(inputs) != len(params):
            raise UDFDefinitionError(f"{label} takes {len(params)} parameters but input_columns names "
                                     f"{len(inputs)}: {inputs}")
        if not inputs:
            raise UDFDefinitionError(f"{label} takes no parameter: a chunker reads at least one source column")
        hints = _hints(target)
        ret = hints.get("return", inspect.Signature.empty)
        if output_schema is not None:
            schema, declared = _check_schema(output_schema, label)
        elif batch:
            raise UDFDefinitionError(f"{label}: a batch chunker declares its columns with output_schema=")
        else:
            row_type = _row_type_of_return(ret)
            if row_type is None:
                raise UDFDefinitionError(
                    f"{label}: cannot tell its output rows: annotate the return as Iterator[RowType] (a dataclass, "
                    f"NamedTuple or TypedDict) or pass output_schema=, got {ret!r}")
            schema, declared = _check_schema(schema_of_row_type(row_type, label), label)
        if not batch and not (inspect.isgeneratorfunction(target) or _row_type_of_return(ret) is not None):
            raise UDFDefinitionError(f"{label} is not a generator and is not annotated as returning rows: a chunker "
                                     "yields its rows (or returns a list[...] of them)")
        return UDTF(func=f, kind=UDTFKind.CHUNKER, output_schema=schema, input_columns=inputs, name=udtf_name,
                    version=version or udf_fingerprint(f, str(schema), "chunker", batch), batch=batch,
                    stateful=stateful, on_error=policy, resources=resources, declared_schema=declared)

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
) -> Any:
    """Declares a batch UDTF: the rows of a partition in, any rows out (N:M).

    It takes one argument: the partition's rows as an iterator of ``RecordBatch`` (or, annotated
    ``pa.Table``, as one table) holding ``input_columns`` (default: every column the view reads) and
    yields ``RecordBatch``es (or returns a table) of ``output_schema``.  ``partition_by`` names a source
    column: one call per distinct value, the partitions spread over Spark tasks, and a refresh runs
    again only the partitions whose rows changed; without it, one call over the whole selection.
    Every argument is checked at decoration, as for :func:`chunker`.
    """

    def wrap(f: Callable[..., Any] | type) -> UDTF:
        udtf_name = name if isinstance(name, str) and name.strip() else str(getattr(f, "__name__", "udtf"))
        label = f"UDTF '{udtf_name}'"
        _check_name(name, "name", label)
        _check_name(version, "version", label)
        _check_name(partition_by, "partition_by", label)
        policy = error_policy(on_error, label)
        resources = udf_resources(udtf_name, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory, label=label)
        inputs = _input_list(input_columns, label)
        if output_schema is None:
            raise UDFDefinitionError(f"{label}: a batch UDTF declares its output columns with output_schema=")
        schema, declared = _check_schema(output_schema, label)
        stateful, _, params = _signature(f, "@udtf")
        if len(params) != 1:
            raise UDFDefinitionError(f"{label} must take exactly one parameter (the partition's batches), "
                                     f"takes {len(params)}")
        return UDTF(func=f, kind=UDTFKind.UDTF, output_schema=schema, input_columns=inputs, name=udtf_name,
                    version=version or udf_fingerprint(f, str(schema), "udtf", partition_by),
                    stateful=stateful, partition_by=partition_by, on_error=policy, resources=resources,
                    declared_schema=declared)

    return wrap(func) if func is not None else wrap
