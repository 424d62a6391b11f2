"""The ``@udf`` decorator and the UDF spec and codec that travel in a column's field metadata (core).

A UDF column carries everything an executor needs to compute it: the pickled function,
its kind, its declared Arrow type and the columns it reads.  Storing that in the Lance
schema (rather than in a side registry) keeps a table self-describing, so a Spark job
started anywhere can backfill it from the table URI alone.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
import sys
import typing
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import cloudpickle
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from geneva_provider.core.error_policy import ErrorPolicy, Outcome, RowFailure, call_with_policy, error_policy
from geneva_provider.core.errors import UDFDefinitionError
from geneva_provider.core.kinds import RowOutcome
from geneva_provider.core.resources import UDFResources, resources_from_metadata, udf_resources
from geneva_provider.core.udf_identity import udf_fingerprint

META_PREFIX = "geneva::udf::"
META_NAME = META_PREFIX + "name"
META_VERSION = META_PREFIX + "version"
META_KIND = META_PREFIX + "kind"
META_INPUTS = META_PREFIX + "input_columns"
META_PICKLE = META_PREFIX + "pickle"
META_PICKLER = META_PREFIX + "pickler"
META_COLUMN_UID = META_PREFIX + "column_uid"
META_SKIP_LIMITS = META_PREFIX + "skip_limits"  # what the driver checks without unpickling the UDF

_PY_TYPES: dict[Any, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
    bytes: pa.binary(),
}


class UDFKind(StrEnum):
    """How a UDF is called: per row, per column array, or per record batch."""

    SCALAR = "scalar"
    ARRAY = "array"
    BATCH = "batch"


class UDFCallError(Exception):
    """Raised inside :meth:`UDF.evaluate`; ``index`` is the failing row within the batch."""

    def __init__(self, message: str, index: int | None = None, original: BaseException | None = None):
        super().__init__(message)
        self.index = index
        self.original = original


@dataclass
class UDF:
    """A user function that computes one column, plus what is needed to run it anywhere."""

    func: Callable[..., Any] | type
    data_type: pa.DataType
    kind: UDFKind
    input_columns: list[str] | None
    name: str
    version: str
    stateful: bool = False
    concurrency: int = 1  # calls in flight at once in each Spark task (for UDFs that wait on I/O)
    on_error: ErrorPolicy = field(default_factory=ErrorPolicy)  # what a failing row does: fail, retry, skip
    resources: UDFResources | None = None  # CPUs, GPUs, memory per Spark task (None: asks for nothing)
    # A stateful UDF's instances, by the GPU addresses of the task that created them (() without GPUs).
    _instances: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped function directly, so a decorated function stays usable."""
        return self._callable()(*args, **kwargs)

    def _callable(self) -> Callable[..., Any]:
        """The function, or this worker's instance of a stateful class (one per process and GPU set)."""
        from geneva_provider.core.devices import device_instance

        return device_instance(self.func, self.stateful, self._instances)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, batch: pa.RecordBatch | pa.Table, input_columns: Sequence[str],
                 failures: list[RowFailure] | None = None) -> pa.Array:
        """Computes the column for every row of ``batch``; returns an array of ``data_type``.

        With ``concurrency`` above 1, that many calls run at once in threads (rows for a scalar UDF,
        slices of the batch otherwise), and the results keep the rows' order.  Errors go through the
        UDF's ``on_error`` policy: a skipped row is NULL; every row that failed an attempt is appended
        to ``failures``.  A batch or array UDF whose batch fails under a policy that can skip is
        called again row by row, so only the rows that fail are skipped.
        """
        try:
            fn = self._callable()
        except Exception as exc:  # a stateful UDF whose __init__ fails: reported like a failing call
            raise UDFCallError(f"{type(exc).__name__} while creating the stateful UDF: {exc}", original=exc) from exc
        n = batch.num_rows
        policy = self.on_error
        if self.kind is UDFKind.SCALAR:
            columns = [batch.column(c).to_pylist() for c in input_columns]
            rows = list(zip(*columns, strict=True)) if columns else [()] * n

            def call(i: int) -> Any:
                return self._settle(call_with_policy(policy, lambda: fn(*rows[i])), i, failures)

            out: Any = self._map(call, range(n))
        elif self.concurrency > 1 and n > 1:
            step = -(-n // self.concurrency)

            def part(start: int) -> pa.Array:
                found: list[RowFailure] = []
                values = self._serial().evaluate(batch.slice(start, step), input_columns, found)
                for f in found:
                    if f.index >= 0:
                        f.index += start
                if failures is not None:
                    failures.extend(found)
                return values

            out = pa.concat_arrays(self._map(part, range(0, n, step)))
        else:
            def whole() -> Any:
                if self.kind is UDFKind.ARRAY:
                    return fn(*[_as_array(batch.column(c)) for c in input_columns])
                selected = batch.select(list(input_columns))
                if isinstance(selected, pa.Table):
                    selected = selected.combine_chunks().to_batches()[0] if n else pa.RecordBatch.from_pylist(
                        [], schema=selected.schema)
                return fn(selected)

            outcome = call_with_policy(policy, whole)
            if not outcome.ok and outcome.skipped and n > 1:
                return self._row_by_row(batch, input_columns, failures)
            out = self._settle(outcome, None if n > 1 else 0, failures)
            if out is None:  # one skipped row
                return pa.nulls(1, self.data_type)
        return self._to_output_array(out, n)

    def _row_by_row(self, batch: pa.RecordBatch | pa.Table, input_columns: Sequence[str],
                    failures: list[RowFailure] | None) -> pa.Array:
        """Each row alone, under the same policy: finds the rows of a failed batch that fail."""
        serial = self._serial()
        values = []
        for i in range(batch.num_rows):
            try:
                values.append(serial.evaluate(batch.slice(i, 1), input_columns, _Offset(failures, i)))
            except UDFCallError as exc:
                raise UDFCallError(str(exc), index=i, original=exc.original) from exc.original
        return pa.concat_arrays(values)

    @staticmethod
    def _settle(outcome: Outcome, index: int | None, failures: list[RowFailure] | None) -> Any:
        """The call's value, None for a skipped row; records any failure, raises when the job must fail."""
        exc = outcome.error
        if exc is None:
            return outcome.value
        state = RowOutcome.RECOVERED if outcome.ok else RowOutcome.SKIPPED if outcome.skipped else RowOutcome.FAILED
        if failures is not None:
            failures.append(RowFailure(index=index if index is not None else -1, error_type=type(exc).__name__,
                                       message=str(exc)[:2_000], traceback=outcome.trace,
                                       attempts=outcome.attempts, outcome=state))
        if outcome.ok or outcome.skipped:
            return outcome.value
        tries = f" (after {outcome.attempts} attempts)" if outcome.attempts > 1 else ""
        raise UDFCallError(f"{type(exc).__name__}: {exc}{tries}", index=index, original=exc) from exc

    def _map(self, fn: Callable[[Any], Any], items: Any) -> list[Any]:
        """``fn`` over ``items`` in order, ``concurrency`` at a time; the first failure (in order) is raised."""
        if self.concurrency <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix=f"udf-{self.name}") as pool:
            return list(pool.map(fn, items))

    def _serial(self) -> UDF:
        """This UDF, one call at a time (sharing the stateful instance)."""
        return dataclasses.replace(self, concurrency=1, _instances=self._instances)

    def _to_output_array(self, out: Any, n: int) -> pa.Array:
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        if not isinstance(out, pa.Array):
            try:
                out = _convert_exactly(out, self.data_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                raise UDFCallError(
                    f"returned values that do not convert to the declared type {self.data_type}: {exc}"
                ) from exc
        if out.type != self.data_type:
            raise UDFCallError(f"returned an array of type {out.type}, expected the declared type {self.data_type}")
        if len(out) != n:
            raise UDFCallError(f"returned {len(out)} values for {n} input rows")
        return out

    # ------------------------------------------------------------------ metadata
    def to_field_metadata(self, input_columns: Sequence[str] | None) -> dict[str, str]:
        """The field metadata that makes a column a UDF column (str -> str, as Lance wants).

        ``column_uid`` names this incarnation of the column: Lance may give a dropped and
        re-added column the same field id, and its old staged files must not be reused.
        """
        limits = {}
        if self.on_error.can_skip:
            max_rows, max_fraction = self.on_error.skip_limits
            limits[META_SKIP_LIMITS] = json.dumps({"max_rows": max_rows, "max_fraction": max_fraction})
        return {
            **limits,
            **(self.resources.to_metadata() if self.resources is not None else {}),
            META_COLUMN_UID: uuid.uuid4().hex,
            META_NAME: self.name,
            META_VERSION: self.version,
            META_KIND: self.kind.value,
            META_INPUTS: json.dumps(list(input_columns) if input_columns is not None else None),
            META_PICKLE: base64.b64encode(self.pickled()).decode("ascii"),
            META_PICKLER: "cloudpickle",
        }

    def pickled(self) -> bytes:
        """The UDF pickled by value; UDFDefinitionError naming what cannot be pickled (a lock, a socket...)."""
        try:
            return dumps_by_value(self)
        except Exception as exc:  # noqa: BLE001 - cloudpickle raises TypeError, PicklingError, AttributeError...
            raise UDFDefinitionError(
                f"UDF '{self.name}' cannot be pickled to run on Spark executors ({type(exc).__name__}: {exc}); "
                "create unpicklable state (locks, clients, connections) inside the function or in a stateful "
                "UDF class's __init__") from None

    def field(self, column: str, input_columns: Sequence[str] | None) -> pa.Field:
        """The nullable Arrow field for ``column`` computed by this UDF."""
        return pa.field(column, self.data_type, nullable=True, metadata=self.to_field_metadata(input_columns))


class _Offset(list[RowFailure]):
    """A failure list that shifts the row index of what is appended to it into a parent list."""

    def __init__(self, parent: list[RowFailure] | None, offset: int) -> None:
        super().__init__()
        self.parent, self.offset = parent, offset

    def append(self, failure: RowFailure) -> None:
        failure.index = self.offset if failure.index < 0 else failure.index + self.offset
        if self.parent is not None:
            self.parent.append(failure)


def dumps_by_value(obj: Any) -> bytes:
    """Pickles ``obj`` with its defining module by value, so executors need not import it."""
    # A UDF or UDTF travels with its function's module: the module of interest is the function's.
    target = obj.func if dataclasses.is_dataclass(obj) and hasattr(obj, "func") else obj
    module_name: str = getattr(target, "__module__", None) or ""
    module = sys.modules.get(module_name) if module_name else None
    registered = False
    if (
        module is not None
        and module_name != "__main__"
        and not module_name.startswith("geneva_provider")
        and module_name not in getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    ):
        cloudpickle.register_pickle_by_value(module)
        registered = True
    try:
        return cloudpickle.dumps(obj)
    finally:
        if registered:
            cloudpickle.unregister_pickle_by_value(module)


@dataclass(frozen=True)
class UdfColumnInfo:
    """What a UDF column's field metadata records: the UDF's name, version, kind, inputs and code."""

    name: str
    version: str
    kind: str
    input_columns: list[str] | None
    pickle: str = field(repr=False)
    column_uid: str = ""
    max_failed_rows: int | None = None       # the error policy's skip limits (None: no limit, or no skipping)
    max_failed_fraction: float | None = None
    resources: UDFResources | None = None  # what each task computing the column needs (None: nothing)

    def listing(self) -> UdfColumnListing:
        """The user-facing facts (no pickle)."""
        return UdfColumnListing(name=self.name, version=self.version, kind=self.kind,
                                input_columns=self.input_columns, column_uid=self.column_uid,
                                resources=self.resources)

    def describe(self) -> dict[str, Any]:
        """The user-facing facts as a dict (what ``Table.udf_columns()`` lists per column)."""
        return self.listing().model_dump()


class UdfColumnListing(BaseModel):
    """One UDF column as ``Table.udf_columns()`` lists it: its UDF's name, version, kind, inputs and the
    resources each Spark task computing it asks for (``@udf(num_gpus=1)``; None when it asks for none)."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    kind: str
    input_columns: list[str] | None
    column_uid: str = ""
    resources: UDFResources | None = None


def udf_column_info(field_metadata: dict[Any, Any] | None) -> UdfColumnInfo | None:
    """The UDF recorded on a field, or None for plain columns."""
    md = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
          for k, v in (field_metadata or {}).items()}
    if META_PICKLE not in md:
        return None
    limits = json.loads(md.get(META_SKIP_LIMITS, "{}"))
    return UdfColumnInfo(name=md[META_NAME], version=md[META_VERSION], kind=md[META_KIND],
                         input_columns=json.loads(md[META_INPUTS]), pickle=md[META_PICKLE],
                         column_uid=md.get(META_COLUMN_UID, ""), max_failed_rows=limits.get("max_rows"),
                         max_failed_fraction=limits.get("max_fraction"), resources=resources_from_metadata(md))


def load_udf(pickle_b64: str) -> UDF:
    """Rebuilds a UDF from the base64 pickle stored in field metadata."""
    obj = cloudpickle.loads(base64.b64decode(pickle_b64))
    if not isinstance(obj, UDF):
        raise UDFDefinitionError(f"field metadata holds a {type(obj).__name__}, not a geneva UDF")
    return obj


# ---------------------------------------------------------------------- decorator
def udf(
    func: Callable[..., Any] | type | None = None,
    *,
    data_type: pa.DataType | None = None,
    input_columns: Sequence[str] | None = None,
    name: str | None = None,
    version: str | None = None,
    concurrency: int = 1,
    on_error: Any = None,
    num_cpus: int | None = None,
    num_gpus: float | None = None,
    memory: int | str | None = None,
) -> Any:
    """Declares a UDF column function.

    Use as ``@udf``, ``@udf(data_type=pa.int64())`` or ``udf(fn, data_type=...)``.  The kind
    comes from the annotations: a ``pa.RecordBatch`` parameter makes a batch UDF, ``pa.Array``
    parameters an array UDF, anything else a scalar (row by row) UDF.  A class is a stateful
    UDF: it is instantiated once per worker and its ``__call__`` is the function.

    ``concurrency`` is how many calls run at once in each Spark task, for UDFs limited by latency
    (a remote model or API) rather than cores; the function must then be thread-safe.  It does not
    change the UDF's version.

    ``on_error`` says what a failing row does (default: fail the job): ``retry_transient()``,
    ``retry_all()``, ``skip_on_error()``, or an ordered list of ``Retry`` / ``Skip`` / ``Fail``
    matchers (see :mod:`geneva_provider.core.error_policy`).  It does not change the UDF's version.

    ``num_cpus``, ``num_gpus`` and ``memory`` are what each Spark task computing the column needs:
    whole cores, GPUs (a fraction up to 1 shares a GPU between tasks, else a whole number) and
    bytes (or a size such as ``"4g"``).  The apply stage runs such a UDF's tasks under a Spark
    resource profile, so with ``num_gpus=1`` as many tasks run at once as there are GPUs; inside,
    ``geneva_provider.task_device()`` names the task's GPU.  They do not change the UDF's version.
    """
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UDFDefinitionError(f"@udf: concurrency must be a positive integer, got {concurrency!r}")
    for arg, value in (("name", name), ("version", version)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise UDFDefinitionError(f"@udf: {arg} must be a non-empty string, got {value!r}")

    def wrap(f: Callable[..., Any] | type) -> UDF:
        made = _make_udf(f, data_type=data_type, input_columns=input_columns, name=name, version=version)
        policy = error_policy(on_error, f"UDF '{made.name}'")  # checked here, to name the function
        resources = udf_resources(made.name, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory)
        return dataclasses.replace(made, concurrency=concurrency, on_error=policy, resources=resources)

    if func is not None:
        return wrap(func)
    return wrap


def _make_udf(
    func: Callable[..., Any] | type,
    *,
    data_type: pa.DataType | None,
    input_columns: Sequence[str] | None,
    name: str | None,
    version: str | None,
) -> UDF:
    stateful = inspect.isclass(func)
    udf_name = name or getattr(func, "__name__", None) or "udf"
    if stateful:
        _check_stateful_class(func, udf_name)  # type: ignore[arg-type]
    target = func.__call__ if stateful else func  # type: ignore[operator]
    if not callable(target):
        raise UDFDefinitionError(f"@udf needs a function or a class with __call__, got {func!r}")
    if input_columns is not None and (isinstance(input_columns, str | bytes) or not isinstance(input_columns, Sequence)
                                      or not all(isinstance(c, str) and c.strip() for c in input_columns)):
        raise UDFDefinitionError(f"UDF '{udf_name}': input_columns must be a list of non-empty column names, "
                                 f"got {input_columns!r}")
    signature = inspect.signature(target).parameters.values()
    params = [p for p in signature if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if stateful and params:
        params = params[1:]  # drop self
    # The inputs are passed positionally, in order: nothing can fill a keyword-only parameter, and
    # *args or **kwargs alone say nothing about which columns to read.
    required_keywords = [p.name for p in signature if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if required_keywords:
        raise UDFDefinitionError(f"UDF '{udf_name}': keyword-only parameters without a default cannot be given "
                                 f"a column, the inputs are passed positionally: {required_keywords}")
    variadic = [f"{'*' if p.kind is p.VAR_POSITIONAL else '**'}{p.name}" for p in signature
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if variadic and not params and input_columns is None:
        raise UDFDefinitionError(f"UDF '{udf_name}' takes only {', '.join(variadic)}: its input columns cannot be "
                                 "inferred; declare one parameter per input column")
    hints = _type_hints(target)
    param_types = [hints.get(p.name, p.annotation) for p in params]

    if any(_is_subclass(t, pa.RecordBatch) for t in param_types):
        if len(params) != 1:
            raise UDFDefinitionError(f"UDF '{udf_name}': a RecordBatch UDF takes exactly one parameter")
        kind = UDFKind.BATCH
        inputs = list(input_columns) if input_columns is not None else None
    else:
        kind = UDFKind.ARRAY if any(_is_subclass(t, pa.Array) for t in param_types) else UDFKind.SCALAR
        inputs = list(input_columns) if input_columns is not None else [p.name for p in params]
        if len(inputs) != len(params):
            raise UDFDefinitionError(
                f"UDF '{udf_name}' takes {len(params)} parameters but input_columns names {len(inputs)}: {inputs}"
            )

    if data_type is None:
        data_type = _infer_data_type(hints.get("return", inspect.Signature.empty), udf_name)
    if not isinstance(data_type, pa.DataType):
        raise UDFDefinitionError(f"UDF '{udf_name}': data_type must be a pyarrow DataType, got {data_type!r}")

    return UDF(
        func=func,
        data_type=data_type,
        kind=kind,
        input_columns=inputs,
        name=udf_name,
        version=version or code_version(func, data_type, kind),
        stateful=stateful,
    )


def _check_stateful_class(cls: type, udf_name: str) -> None:
    """A UDF class is instantiated with no arguments on each worker and then called: check both can happen."""
    if not any("__call__" in vars(k) for k in cls.__mro__):
        raise UDFDefinitionError(f"UDF '{udf_name}': the class {cls.__name__} has no __call__ method; a stateful "
                                 "UDF class computes each value in __call__")
    try:
        inspect.signature(cls).bind()
    except TypeError as exc:
        raise UDFDefinitionError(f"UDF '{udf_name}': a stateful UDF class is created with no arguments on each "
                                 f"worker, but {cls.__name__}() fails: {exc}; give __init__'s parameters "
                                 "defaults, or read settings inside __init__") from None
    except ValueError:
        pass  # no signature to check (a class built in C): the first call reports a failure


def _type_hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: use the raw ones
        return dict(getattr(fn, "__annotations__", {}) or {})


def _is_subclass(t: Any, cls: type) -> bool:
    return inspect.isclass(t) and issubclass(t, cls)


def _infer_data_type(annotation: Any, udf_name: str) -> pa.DataType:
    if isinstance(annotation, pa.DataType):
        return annotation
    if annotation in _PY_TYPES:
        return _PY_TYPES[annotation]
    raise UDFDefinitionError(
        f"UDF '{udf_name}': cannot infer the column type from the return annotation {annotation!r}; "
        "pass data_type=pa.<type>()"
    )


def code_version(func: Any, data_type: pa.DataType, kind: UDFKind) -> str:
    """The UDF's version: a hash of what it computes (see :mod:`geneva_provider.core.udf_identity`)."""
    return udf_fingerprint(func, str(data_type), kind.value)


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _convert_exactly(values: Any, data_type: pa.DataType) -> pa.Array:
    """``values`` (Python objects, numpy, pandas) as an array of ``data_type``; ArrowInvalid if that loses data.

    ``pa.array(values, type=...)`` truncates Python floats into integer (and temporal) types without a
    word (``0.7`` becomes ``0``), so the values are also converted as they are and cast safely: a cast
    that fails only because it is safe (the unsafe one succeeds) means the declared type loses data.
    Exact conversions (``1.0`` or ``1`` for int64, ints for float64, None) pass; when the values have no
    single Arrow type or no cast exists to check with, the typed conversion stands alone.
    """
    typed = pa.array(values, type=data_type)
    try:
        as_given = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return typed
    if as_given.type == data_type:
        return typed
    try:
        as_given.cast(data_type, safe=True)
    except pa.ArrowInvalid as exc:
        try:
            as_given.cast(data_type, safe=False)
        except pa.ArrowException:
            return typed  # the types themselves do not cast (e.g. int64 to a narrow decimal): nothing to compare
        raise pa.ArrowInvalid(f"{exc} (a {as_given.type} value does not fit {data_type} exactly)") from None
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    return typed
