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

from geneva_provider.core.error_policy import ErrorPolicy, RowFailure, call_with_policy, error_policy, format_trace
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

        A row whose call fails goes through the ``on_error`` policy: a skipped row yields nothing and is
        listed in ``failures`` (outcome SKIPPED); a row that must fail raises :class:`UDFCallError` with
        its index.
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
        out: list[Any] = []
        parents: list[int] = []
        if not self.on_error.matchers:  # fail on the first error: no policy to consult per call
            return self._expand_failing_fast(fn, columns, failures)
        for i, args in enumerate(zip(*columns, strict=True) if columns else [()] * rows.num_rows):
            outcome = call_with_policy(self.on_error, partial(_call_rows, fn, args, self.label))
            if outcome.error is not None:
                state = (RowOutcome.RECOVERED if outcome.ok else
                         RowOutcome.SKIPPED if outcome.skipped else RowOutcome.FAILED)
                failures.append(RowFailure(index=i, error_type=type(outcome.error).__name__,
                                           message=str(outcome.error)[:2_000], traceback=outcome.trace,
                                           attempts=outcome.attempts, outcome=state))
                if not outcome.ok and not outcome.skipped:
                    raise UDFCallError(f"{type(outcome.error).__name__}: {outcome.error}", index=i,
                                       original=outcome.error) from outcome.error
                if not outcome.ok:
                    continue
            got = outcome.value
            out.extend(got)
            parents.extend([i] * len(got))
        table = self._rows_to_table(out, parents)
        return table, np.asarray(parents, np.int64)

    def _expand_failing_fast(self, fn: Callable[..., Any], columns: list[list[Any]], failures: list[RowFailure]
                             ) -> tuple[pa.Table, np.ndarray]:
        """:meth:`expand` without an error policy: the first failing call fails the whole expansion."""
        out: list[Any] = []
        counts: list[int] = []
        for i, args in enumerate(zip(*columns, strict=True)):
            try:
                got = _as_rows(fn(*args), self.label)
            except Exception as exc:
                failures.append(RowFailure(index=i, error_type=type(exc).__name__, message=str(exc)[:2_000],
                                           traceback=format_trace(exc), attempts=1, outcome=RowOutcome.FAILED))
                raise UDFCallError(f"{type(exc).__name__}: {exc}", index=i, original=exc) from exc
            out.extend(got)
            counts.append(len(got))
        parents = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        return self._rows_to_table(out, parents), parents

    def _rows_to_table(self, out: list[Any], parents: list[int] | np.ndarray) -> pa.Table:
        """The yielded rows as a table of the output schema; UDFCallError naming the first bad row's column."""
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
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            pass  # the row by row path below names the row and the column
        records = []
        for k, row in enumerate(out):
            try:
                records.append(_as_record(row, names))
            except (TypeError, KeyError) as exc:
                raise UDFCallError(f"{self.label} yielded a row that does not match its output schema "
                                   f"{_describe(self.output_schema)}: {exc}", index=int(parents[k])) from None
        try:
            return pa.Table.from_pylist(records, schema=self.output_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            bad = _first_bad_row(records, self.output_schema)
            column, k = bad if bad is not None else (None, 0)
            raise UDFCallError(
                f"{self.label} yielded a row whose column '{column}' does not match its output schema "
                f"{_describe(self.output_schema)}: {exc}", index=int(parents[k]) if len(parents) else None) from None

    def _expand_batch(self, fn: Callable[..., Any], rows: pa.Table, inputs: list[str],
                      failures: list[RowFailure]) -> tuple[pa.Table, np.ndarray]:
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
        got = outcome.value
        if isinstance(got, pa.RecordBatch):
            got = pa.Table.from_batches([got])
        if not isinstance(got, pa.Table) or PARENT_INDEX not in got.column_names:
            raise UDFCallError(f"{self.label} (batch=True) must return a RecordBatch of its output columns "
                               f"{self.output_schema.names} plus '{PARENT_INDEX}' (the input row each output row "
                               f"comes from), got {type(got).__name__}"
                               + (f" with columns {got.column_names}" if isinstance(got, pa.Table) else ""))
        parents = got.column(PARENT_INDEX).to_numpy(zero_copy_only=False).astype(np.int64)
        if len(parents) and (parents.min() < 0 or parents.max() >= rows.num_rows):
            raise UDFCallError(f"{self.label} returned a '{PARENT_INDEX}' of {int(parents.max())} for a batch of "
                               f"{rows.num_rows} rows")
        return conform(got.drop_columns([PARENT_INDEX]), self.output_schema, self.label), parents

    # ------------------------------------------------------------------ a batch UDTF
    def run_partition(self, rows: pa.Table) -> pa.Table:
        """The batch UDTF over one partition's rows: every batch it yields, as one table of its schema."""
        fn = self._callable()
        wants_table = _wants_table(self.func)
        arg: Any = rows if wants_table else iter(rows.to_batches())
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


def conform(table: pa.Table, schema: pa.Schema, label: str) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types; UDFCallError naming the column otherwise."""
    missing = [n for n in schema.names if n not in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    if missing or extra:
        raise UDFCallError(f"{label} returned columns {table.column_names}, not its output schema "
                           f"{_describe(schema)} (missing {missing}, unexpected {extra})")
    columns = []
    for f in schema:
        col = table.column(f.name)
        try:
            columns.append(col.cast(f.type) if col.type != f.type else col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise UDFCallError(f"{label} returned column '{f.name}' of type {col.type}, which does not convert to "
                               f"its declared type {f.type}: {exc}") from None
    return pa.Table.from_arrays(columns, schema=schema)


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
        parts.append(conform(b, fn.output_schema, fn.label))
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


def _first_bad_row(records: list[dict[str, Any]], schema: pa.Schema) -> tuple[str, int] | None:
    for k, record in enumerate(records):
        for f in schema:
            try:
                pa.array([record[f.name]], type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                return f.name, k
    return None


def _describe(schema: pa.Schema) -> str:
    return "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}"


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
    """The Arrow schema of a row type: a dataclass, a NamedTuple or a TypedDict, from its annotations."""
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
    return pa.schema([pa.field(n, arrow_type(t, f"{label}, field '{n}'"), nullable=True) for n, t in hints.items()])


def _row_type_of_return(ret: Any) -> Any:
    """``Chunk`` from ``Iterator[Chunk]`` / ``Iterable`` / ``Generator`` / ``list[Chunk]``; None otherwise."""
    origin = typing.get_origin(ret)
    if origin in (collections.abc.Iterator, collections.abc.Iterable, collections.abc.Generator, list):
        args = typing.get_args(ret)
        return args[0] if args else None
    return None


def _check_schema(schema: Any, label: str) -> pa.Schema:
    if isinstance(schema, dict):
        schema = pa.schema([pa.field(n, arrow_type(t, f"{label}, column '{n}'")) for n, t in schema.items()])
    if not isinstance(schema, pa.Schema) or not len(schema):
        raise UDFDefinitionError(f"{label}: output_schema must be a non-empty pyarrow Schema (or a dict of column "
                                 f"name -> type), got {schema!r}")
    reserved = [n for n in schema.names if n.startswith("__")]
    if reserved:
        raise UDFDefinitionError(f"{label}: output columns {reserved}: names starting with '__' are reserved")
    if len(set(schema.names)) != len(schema.names):
        raise UDFDefinitionError(f"{label}: output_schema names a column twice: {schema.names}")
    return pa.schema([f.with_nullable(True) for f in schema])


def _check_name(value: Any, arg: str, label: str) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise UDFDefinitionError(f"{label}: {arg} must be a non-empty string, got {value!r}")


def _input_list(input_columns: Any, label: str) -> list[str] | None:
    if input_columns is None:
        return None
    if isinstance(input_columns, str | bytes) or not isinstance(input_columns, Sequence) or not all(
            isinstance(c, str) and c.strip() for c in input_columns):
        raise UDFDefinitionError(f"{label}: input_columns must be a list of column names, got {input_columns!r}")
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
    changes the chunker's version, which is a hash of what it computes.
    """
    policy = error_policy(on_error, f"@chunker{f' {name!r}' if name else ''}")

    def wrap(f: Callable[..., Any] | type) -> UDTF:
        label = f"chunker '{name or getattr(f, '__name__', 'chunker')}'"
        _check_name(name, "name", label)
        _check_name(version, "version", label)
        stateful, target, params = _signature(f, "@chunker")
        inputs = _input_list(input_columns, label) or [p.name for p in params]
        if len(inputs) != len(params):
            raise UDFDefinitionError(f"{label} takes {len(params)} parameters but input_columns names "
                                     f"{len(inputs)}: {inputs}")
        if not inputs:
            raise UDFDefinitionError(f"{label} takes no parameter: a chunker reads at least one source column")
        hints = _hints(target)
        ret = hints.get("return", inspect.Signature.empty)
        if output_schema is not None:
            schema = _check_schema(output_schema, label)
        elif batch:
            raise UDFDefinitionError(f"{label}: a batch chunker declares its columns with output_schema=")
        else:
            row_type = _row_type_of_return(ret)
            if row_type is None:
                raise UDFDefinitionError(
                    f"{label}: cannot tell its output rows: annotate the return as Iterator[RowType] (a dataclass, "
                    f"NamedTuple or TypedDict) or pass output_schema=, got {ret!r}")
            schema = _check_schema(schema_of_row_type(row_type, label), label)
        if not batch and not (inspect.isgeneratorfunction(target) or _row_type_of_return(ret) is not None):
            raise UDFDefinitionError(f"{label} is not a generator and is not annotated as returning rows: a chunker "
                                     "yields its rows (or returns a list[...] of them)")
        udtf_name = str(name or getattr(f, "__name__", "chunker"))
        made = UDTF(func=f, kind=UDTFKind.CHUNKER, output_schema=schema, input_columns=inputs, name=udtf_name,
                    version=version or udf_fingerprint(f, str(schema), "chunker", batch), batch=batch,
                    stateful=stateful, on_error=policy,
                    resources=udf_resources(udtf_name, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory))
        return made

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
    """
    policy = error_policy(on_error, f"@udtf{f' {name!r}' if name else ''}")

    def wrap(f: Callable[..., Any] | type) -> UDTF:
        udtf_name = str(name or getattr(f, "__name__", "udtf"))
        label = f"UDTF '{udtf_name}'"
        _check_name(name, "name", label)
        _check_name(version, "version", label)
        _check_name(partition_by, "partition_by", label)
        if output_schema is None:
            raise UDFDefinitionError(f"{label}: a batch UDTF declares its output columns with output_schema=")
        schema = _check_schema(output_schema, label)
        stateful, _, params = _signature(f, "@udtf")
        if len(params) != 1:
            raise UDFDefinitionError(f"{label} must take exactly one parameter (the partition's batches), "
                                     f"takes {len(params)}")
        return UDTF(func=f, kind=UDTFKind.UDTF, output_schema=schema,
                    input_columns=_input_list(input_columns, label), name=udtf_name,
                    version=version or udf_fingerprint(f, str(schema), "udtf", partition_by),
                    stateful=stateful, partition_by=partition_by, on_error=policy,
                    resources=udf_resources(udtf_name, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory))

    return wrap(func) if func is not None else wrap
