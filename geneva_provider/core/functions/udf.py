"""``@udf``: a user function that computes one column, and its codec in the column's field metadata (core).

A UDF column carries everything an executor needs to compute it: the pickled function,
its kind, its declared Arrow type and the columns it reads.  Storing that in the Lance
schema (rather than in a side registry) keeps a table self-describing, so a Spark job
started anywhere can backfill it from the table URI alone.

What a UDF shares with a table function (name, version, error policy, resources, pickling, the
annotation->Arrow mapper, the signature binder) is :mod:`geneva_provider.core.functions.base`,
:mod:`~geneva_provider.core.functions.arrow_types` and :mod:`~geneva_provider.core.functions.binding`;
this module adds how a UDF is called (per row, per array, per batch) and its output checks.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from geneva_provider.core.column_paths import path_column, select_paths
from geneva_provider.core.contracts.options import JobOptions
from geneva_provider.core.error_policy import RowFailure, call_with_policy
from geneva_provider.core.errors import InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.functions.arrow_types import (
    arrow_type,
    cast_exactly,
    convert_exactly,
    numeric_alike,
    schema_of_row_type,
)
from geneva_provider.core.functions.base import (
    UDFCallError,
    UserFunction,
    check_constructible,
    check_manifest,
    dumps_by_value,
    options,
)
from geneva_provider.core.functions.binding import bind, input_list
from geneva_provider.core.functions.columns import Columns, columns_of, is_named_tuple
from geneva_provider.core.functions.identity import udf_fingerprint
from geneva_provider.core.resources import UDFResources, resources_from_metadata

__all__ = ["UDF", "Columns", "UDFCallError", "UDFKind", "UdfColumnInfo", "UdfColumnListing", "UnpackedUDF",
           "dumps_by_value", "lead_column", "load_udf", "udf", "udf_column_info"]

META_PREFIX = "geneva::udf::"
META_NAME = META_PREFIX + "name"
META_VERSION = META_PREFIX + "version"
META_KIND = META_PREFIX + "kind"
META_INPUTS = META_PREFIX + "input_columns"
META_PICKLE = META_PREFIX + "pickle"
META_PICKLER = META_PREFIX + "pickler"
META_COLUMN_UID = META_PREFIX + "column_uid"
META_SKIP_LIMITS = META_PREFIX + "skip_limits"  # what the driver checks without unpickling the UDF
META_JOB_DEFAULTS = META_PREFIX + "job_defaults"  # the column's backfill sizes when a backfill gives none
META_AUTO_BACKFILL = META_PREFIX + "auto_backfill"
JOB_DEFAULTS = ("checkpoint_size", "task_size", "min_checkpoint_size", "max_checkpoint_size")
# A multi-output UDF's group: its first column records the UDF and every column of the group (JSON, in
# the order of the UDF's fields); each other column names that first column, its *lead*.
META_OUTPUTS = META_PREFIX + "outputs"
META_OUTPUT_OF = META_PREFIX + "output_of"
# A maintained SQL computed column (:mod:`geneva_provider.core.functions.computed`): its expression.
META_COMPUTED = META_PREFIX + "computed"


class UDFKind(StrEnum):
    """How a UDF is called: per row, per column array, or per record batch."""

    SCALAR = "scalar"
    ARRAY = "array"
    BATCH = "batch"


@dataclass(kw_only=True)
class UDF(UserFunction):
    """A user function that computes one column, plus what is needed to run it anywhere."""

    noun: ClassVar[str] = "UDF"
    stored_in: ClassVar[str] = "field metadata"

    data_type: pa.DataType
    kind: UDFKind
    concurrency: int = 1  # calls in flight at once in each Spark task (for UDFs that wait on I/O)
    job_defaults: dict[str, int] = field(default_factory=dict)  # sizes of JOB_DEFAULTS a backfill may override
    field_metadata: dict[str, str] = field(default_factory=dict)  # the user's own keys on the column's Arrow field
    auto_backfill: bool = False  # table_change_dag() backfills the column after each change of its table
    multi_output: bool = False  # ``-> Columns[T]``: each field of the struct ``data_type`` is a column of its own
    array_params: tuple[int, ...] = ()  # parameters annotated ``np.ndarray``: a list value comes as a numpy array
    manifest: Any = None  # a GenevaManifest shipped to the workers of every job computing the column

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the function on one row's values; on a stateful class not yet built, builds the UDF of an
        instance instead, as the reference does: ``Embed(model="m2")`` is the UDF to register."""
        if self.stateful and self.init_args is None:
            return self.constructed(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def constructed(self, *args: Any, **kwargs: Any) -> UDF:
        """This stateful UDF built with constructor arguments: each worker builds ``func(*args, **kwargs)`` once
        (then its ``setup()``).  The arguments are part of its version (unless ``version=`` was given), so
        changing them marks the values computed with others stale."""
        if not isinstance(self.func, type):
            raise UDFDefinitionError(f"{self.label} is not a stateful class; it has no constructor arguments")
        check_constructible(self.func, args, kwargs, self.label)
        version = self.version
        if (args or kwargs) and version == code_version(self.func, self.data_type, self.kind):  # derived, not given
            version = code_version(self.func, self.data_type, self.kind, (args, kwargs))
        return dataclasses.replace(self, init_args=args, init_kwargs=tuple(kwargs.items()), version=version,
                                   _instances={})

    def check_input_types(self, types: Sequence[pa.DataType | None], inputs: Sequence[str], where: str) -> None:
        """UDFDefinitionError (prefixed ``where``) when a parameter annotated ``np.ndarray`` or ``list[...]`` is
        given a column that is not a list, as the reference refuses it."""
        if self.kind is UDFKind.SCALAR:
            binding = bind(self.func, f"{where}: {self.label}", "@udf", construct_later=True)
            binding.check_input_types(types, inputs, f"{where}: {self.label}")

    @property
    def is_multi_output(self) -> bool:
        """Whether the UDF computes several columns (``-> Columns[T]``); the reference's name."""
        return self.multi_output

    def outputs(self) -> pa.Schema:
        """What a call computes: the one (nullable) field named by the UDF (the column names it when it is
        added); for a multi-output UDF, one nullable field per field of its struct, named by the field."""
        if self.multi_output:
            return pa.schema([f.with_nullable(True) for f in self.data_type])
        return pa.schema([pa.field(self.name, self.data_type, nullable=True)])

    def split(self, values: pa.Array) -> list[pa.Array]:
        """A multi-output UDF's struct values as one array per output column (a NULL row: NULL in each)."""
        if not isinstance(values, pa.StructArray):
            raise UDFCallError(f"returned an array of type {values.type}, expected the declared struct "
                               f"{self.data_type}")
        return list(values.flatten())

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, batch: pa.RecordBatch | pa.Table, input_columns: Sequence[str],
                 failures: list[RowFailure] | None = None, done: Callable[[int], None] | None = None) -> pa.Array:
        """Computes the column for every row of ``batch``; returns an array of ``data_type``.

        With ``concurrency`` above 1, that many calls run at once in threads (rows for a scalar UDF,
        slices of the batch otherwise), and the results keep the rows' order.  Errors go through the
        UDF's ``on_error`` policy: a skipped row is NULL; every row that failed an attempt is appended
        to ``failures``.  A batch or array UDF whose batch fails under a policy that can skip is
        called again row by row, so only the rows that fail are skipped.

        ``done`` is told how many rows each finished call computed (a scalar UDF's every row, a slice of
        a concurrent batch UDF), so a long call's progress shows before it returns.
        """
        fn = self._instance()
        n = batch.num_rows
        policy = self.on_error
        if self.kind is UDFKind.SCALAR:
            columns = [_row_values(path_column(batch, c), i in self.array_params) for i, c in enumerate(input_columns)]
            rows = list(zip(*columns, strict=True)) if columns else [()] * n

            def call(i: int) -> Any:
                value = self._settle(call_with_policy(policy, lambda: fn(*rows[i])), i, failures)
                if done is not None:
                    done(1)
                return value

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
                if done is not None:
                    done(len(values))
                return values

            out = pa.concat_arrays(self._map(part, range(0, n, step)))
        else:
            def whole() -> Any:
                if self.kind is UDFKind.ARRAY:
                    return fn(*[_as_array(path_column(batch, c)) for c in input_columns])
                selected = select_paths(pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch,
                                        list(input_columns))
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

    def _map(self, fn: Callable[[Any], Any], items: Any) -> list[Any]:
        """``fn`` over ``items`` in order, ``concurrency`` at a time; the first failure (in order) is raised."""
        if self.concurrency <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix=f"udf-{self.name}") as pool:
            return list(pool.map(fn, items))

    def _serial(self) -> UDF:
        """This UDF, one call at a time (sharing the stateful instance)."""
        return self.with_concurrency(1)

    def with_concurrency(self, concurrency: int) -> UDF:
        """This UDF with ``concurrency`` calls in flight (a backfill's ``intra_applier_concurrency``), sharing the
        stateful instance."""
        return dataclasses.replace(self, concurrency=concurrency, _instances=self._instances)

    def _to_output_array(self, out: Any, n: int) -> pa.Array:
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        if not isinstance(out, pa.Array):
            try:
                out = convert_exactly(out, self.data_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                raise UDFCallError(
                    f"returned values that do not convert to the declared type {self.data_type}: {exc}"
                ) from exc
        if out.type != self.data_type:
            if not numeric_alike(out.type, self.data_type):
                raise UDFCallError(f"returned an array of type {out.type}, expected the declared type {self.data_type}")
            try:  # float64 embeddings for a float32 list column: pyarrow's safe cast decides
                out = cast_exactly(out, self.data_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise UDFCallError(f"returned an array of type {out.type}, which does not convert to the declared "
                                   f"type {self.data_type}: {exc}") from exc
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
            **self.field_metadata,  # the user's keys first: none may take the package's prefix (refused by @udf)
            **limits,
            **({META_JOB_DEFAULTS: json.dumps(self.job_defaults, sort_keys=True)} if self.job_defaults else {}),
            **({META_AUTO_BACKFILL: "true"} if self.auto_backfill else {}),
            **(self.resources.to_metadata() if self.resources is not None else {}),
            META_COLUMN_UID: uuid.uuid4().hex,
            META_NAME: self.name,
            META_VERSION: self.version,
            META_KIND: self.kind.value,
            META_INPUTS: json.dumps(list(input_columns) if input_columns is not None else None),
            META_PICKLE: self.pickled_b64(),
            META_PICKLER: "cloudpickle",
        }

    def field(self, column: str, input_columns: Sequence[str] | None) -> pa.Field:
        """The nullable Arrow field for ``column`` computed by this UDF."""
        return pa.field(column, self.data_type, nullable=True, metadata=self.to_field_metadata(input_columns))

    def group_fields(self, columns: Sequence[str], input_columns: Sequence[str] | None) -> list[pa.Field]:
        """A multi-output UDF's columns, one per output field: the first (the lead) records the UDF and the
        group, the others name the lead.  They share one incarnation id, so an added group is recognised whole.
        """
        outputs = self.outputs()
        lead = self.to_field_metadata(input_columns)
        lead[META_OUTPUTS] = json.dumps(list(columns))
        member = {META_OUTPUT_OF: columns[0], META_COLUMN_UID: lead[META_COLUMN_UID]}
        return [pa.field(column, f.type, nullable=True,
                         metadata={**_text(f.metadata), **(lead if i == 0 else member)})
                for i, (column, f) in enumerate(zip(columns, outputs, strict=True))]


def _text(metadata: dict[bytes, bytes] | None) -> dict[str, str]:
    """Field metadata as text (an output field's own, such as Lance's blob encoding, kept on its column)."""
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (metadata or {}).items()}


@dataclass(frozen=True)
class UnpackedUDF:
    """A UDF whose struct values are unpacked into top-level columns, each named ``prefix`` + the field's name.

    ``table.add_columns(UnpackedUDF(f, prefix="img_"))`` (the reference's call-site wrapper);
    ``table.add_columns(f)`` for a ``-> Columns[T]`` UDF is the same with no prefix.  Any UDF whose
    ``data_type`` is a struct can be unpacked so.
    """

    udf: UDF
    prefix: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.udf, UDF):
            raise UDFDefinitionError(f"UnpackedUDF needs a @udf function, got {self.udf!r}")
        label = self.udf.label
        if not pa.types.is_struct(self.udf.data_type) or not self.udf.data_type.num_fields:
            raise UDFDefinitionError(f"{label} returns {self.udf.data_type}: only a UDF returning a struct (of at "
                                     "least one field) can be unpacked into columns; annotate it -> Columns[T]")
        if not isinstance(self.prefix, str) or (self.prefix and not self.prefix.isidentifier()):
            raise UDFDefinitionError(f"{label}: the prefix of its columns must be empty or a valid identifier "
                                     f"prefix, got {self.prefix!r}")
        names = self.columns
        if len(set(names)) != len(names):
            raise UDFDefinitionError(f"{label}: its fields would name a column twice: {names}")

    @property
    def columns(self) -> list[str]:
        """The columns the UDF computes, in the order of its struct's fields."""
        return [f"{self.prefix}{f.name}" for f in self.udf.data_type]

    @property
    def unpacked(self) -> UDF:
        """The UDF as it is stored on its columns: multi-output, whatever its annotation."""
        return self.udf if self.udf.multi_output else dataclasses.replace(self.udf, multi_output=True)


def lead_column(schema: pa.Schema, column: str) -> str:
    """The column that records ``column``'s UDF: the first column of its multi-output group, else itself."""
    if column not in schema.names:
        return column
    lead = (schema.field(column).metadata or {}).get(META_OUTPUT_OF.encode())
    return lead.decode() if lead is not None else column


def computed_with(schema: pa.Schema, column: str) -> list[str]:
    """The columns a backfill of ``column`` writes: every column of its multi-output group, else itself."""
    lead = lead_column(schema, column)
    info = udf_column_info(schema.field(lead).metadata) if lead in schema.names else None
    return info.columns(lead) if info is not None else [column]


def is_udf_column(schema: pa.Schema, column: str) -> bool:
    """Whether ``column`` holds a UDF's values (a UDF column, or a column of a multi-output group)."""
    lead = lead_column(schema, column)
    return lead in schema.names and udf_column_info(schema.field(lead).metadata) is not None


class _Offset(list[RowFailure]):
    """A failure list that shifts the row index of what is appended to it into a parent list."""

    def __init__(self, parent: list[RowFailure] | None, offset: int) -> None:
        super().__init__()
        self.parent, self.offset = parent, offset

    def append(self, failure: RowFailure) -> None:
        failure.index = self.offset if failure.index < 0 else failure.index + self.offset
        if self.parent is not None:
            self.parent.append(failure)


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
    job_defaults: dict[str, int] = field(default_factory=dict)  # backfill sizes of @udf(checkpoint_size=...)
    auto_backfill: bool = False
    outputs: list[str] | None = None  # a multi-output UDF's lead: every column of its group (None: one column)
    expression: str | None = None  # a computed column's SQL expression (None: a Python UDF's column)

    def columns(self, column: str) -> list[str]:
        """The columns computed with ``column`` (its lead's group, or itself), in the UDF's field order."""
        return list(self.outputs) if self.outputs else [column]

    def listing(self) -> UdfColumnListing:
        """The user-facing facts (no pickle)."""
        return UdfColumnListing(name=self.name, version=self.version, kind=self.kind,
                                input_columns=self.input_columns, column_uid=self.column_uid,
                                resources=self.resources, auto_backfill=self.auto_backfill,
                                job_defaults=self.job_defaults, expression=self.expression)

    def describe(self) -> dict[str, Any]:
        """The user-facing facts as a dict (what ``Table.udf_columns()`` lists per column)."""
        return self.listing().model_dump()


class UdfColumnListing(BaseModel):
    """One UDF column as ``Table.udf_columns()`` lists it: its UDF's name, version, kind, inputs, the
    resources each Spark task computing it asks for (``@udf(num_gpus=1)``; None when it asks for none),
    ``@udf(auto_backfill=...)``, the backfill sizes it gives (``@udf(checkpoint_size=...)``) and, for a
    computed column (``computed("a * 2")``), its SQL ``expression``."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    kind: str
    input_columns: list[str] | None
    column_uid: str = ""
    resources: UDFResources | None = None
    auto_backfill: bool = False
    job_defaults: dict[str, int] = {}
    expression: str | None = None


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
                         max_failed_fraction=limits.get("max_fraction"), resources=resources_from_metadata(md),
                         job_defaults=json.loads(md.get(META_JOB_DEFAULTS, "{}")),
                         auto_backfill=md.get(META_AUTO_BACKFILL) == "true",
                         outputs=json.loads(md[META_OUTPUTS]) if META_OUTPUTS in md else None,
                         expression=md.get(META_COMPUTED))


def load_udf(pickle_b64: str) -> UDF:
    """Rebuilds a UDF from the base64 pickle stored in field metadata."""
    return UDF.load(pickle_b64)


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
    checkpoint_size: int | None = None,
    task_size: int | None = None,
    min_checkpoint_size: int | None = None,
    max_checkpoint_size: int | None = None,
    field_metadata: dict[str, str] | None = None,
    auto_backfill: bool = False,
    cuda: bool = False,
    batch_size: int | None = None,
    error_handling: Any = None,
    manifest: Any = None,
) -> Any:
    """Declares a UDF column function.

    Use as ``@udf``, ``@udf(data_type=pa.int64())`` or ``udf(fn, data_type=...)``.  The kind
    comes from the annotations: a ``pa.RecordBatch`` parameter makes a batch UDF, ``pa.Array``
    parameters an array UDF, anything else a scalar (row by row) UDF.  A scalar UDF's parameter annotated
    ``np.ndarray`` takes a list column's value as a numpy array, one annotated ``list[T]`` as a list.  An
    input column may be a struct's field, by dot path (``input_columns=["info.vals"]``).

    A class is a stateful UDF: it is instantiated once per worker (and GPU set), then its ``setup()``, if
    any, runs, and its ``__call__`` is the function.  Calling the decorated class, ``Embed(model="m2")``,
    gives the UDF of an instance built with those arguments (the reference's registration); the class itself
    is built with none.

    Without ``data_type``, the column's type comes from the return annotation, mapped as a chunker's
    row fields are (:mod:`geneva_provider.core.functions.arrow_types`): ``-> list[float]`` is a list of
    doubles, ``-> Optional[str]`` a string, ``-> Point`` (a dataclass, NamedTuple or TypedDict) a struct.

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
    ``geneva_provider.task_device()`` names the task's GPU.  ``num_gpus=0`` asks for none; ``cuda=True``
    (the reference's) is ``num_gpus=1``.  They do not change the UDF's version.

    ``batch_size`` (the reference's rows per call) is the column's ``checkpoint_size`` when that is not
    given: every call and every checkpoint then holds that many rows.  ``error_handling`` is the reference's
    other name for ``on_error``.  ``manifest`` (a :class:`~geneva_provider.core.manifest.GenevaManifest`) is
    recorded with the column: every backfill of it ships the manifest's modules and files to the workers
    of the session it runs on, as an execution context's manifest is.

    ``checkpoint_size``, ``task_size``, ``min_checkpoint_size`` and ``max_checkpoint_size`` are the column's
    backfill sizes: a backfill that gives one of them uses its own, else the UDF's.  ``field_metadata``
    (str -> str) is added to the column's Arrow field metadata (``table.schema``); ``auto_backfill`` is
    recorded in it and listed by ``Table.udf_columns()`` (nothing here recomputes a column by itself: run
    ``backfill``).  None of them changes the UDF's version.
    """
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UDFDefinitionError(f"@udf: concurrency must be a positive integer, got {concurrency!r}")
    if not isinstance(cuda, bool):
        raise UDFDefinitionError(f"@udf: cuda must be True or False, got {cuda!r}")
    if cuda and num_gpus not in (None, 0):
        raise UDFDefinitionError(f"@udf: cuda=True asks for one GPU; give it or num_gpus={num_gpus!r}, not both")
    num_gpus = 1 if cuda else num_gpus
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise UDFDefinitionError(f"@udf: batch_size must be a positive integer, got {batch_size!r}")
    if error_handling is not None and on_error is not None:
        raise UDFDefinitionError("@udf: on_error and error_handling are one setting (the reference's two names); "
                                 "give one")
    on_error = on_error if on_error is not None else error_handling
    check_manifest(manifest, "@udf")
    sizes = dict(zip(JOB_DEFAULTS, (checkpoint_size if checkpoint_size is not None else batch_size, task_size,
                                    min_checkpoint_size, max_checkpoint_size), strict=True))

    def wrap(f: Callable[..., Any] | type) -> UDF:
        opts = options(f, UDF.noun, name=name, version=version, on_error=on_error, num_cpus=num_cpus,
                       num_gpus=num_gpus, memory=memory, default="udf")
        defaults = _job_defaults(sizes, opts.label)
        metadata = _user_metadata(field_metadata, opts.label)
        if not isinstance(auto_backfill, bool):
            raise UDFDefinitionError(f"{opts.label}: auto_backfill must be True or False, got {auto_backfill!r}")
        binding = bind(f, opts.label, "@udf", construct_later=True)
        given = input_list(input_columns, opts.label)
        if binding.takes(pa.RecordBatch):
            if len(binding.params) != 1:
                raise UDFDefinitionError(f"{opts.label}: a RecordBatch UDF takes exactly one parameter")
            kind, inputs = UDFKind.BATCH, given
        else:
            kind = UDFKind.ARRAY if binding.takes(pa.Array) else UDFKind.SCALAR
            inputs = binding.columns(given, opts.label)
        fields = columns_of(binding.returns)
        out_type = data_type
        if fields is not None:
            out_type = _columns_type(fields, data_type, opts.label)
        elif out_type is None:
            out_type = arrow_type(binding.returns, opts.label, "pass data_type=pa.<type>()")
        if not isinstance(out_type, pa.DataType):
            raise UDFDefinitionError(f"{opts.label}: data_type must be a pyarrow DataType, got {out_type!r}")
        return UDF(func=f, data_type=out_type, kind=kind, input_columns=inputs, name=opts.name,
                   version=opts.version or code_version(f, out_type, kind), stateful=binding.stateful,
                   concurrency=concurrency, on_error=opts.on_error, resources=opts.resources,
                   job_defaults=defaults, field_metadata=metadata, auto_backfill=auto_backfill,
                   multi_output=fields is not None, array_params=binding.array_params, manifest=manifest)

    if func is not None:
        return wrap(func)
    return wrap


def _job_defaults(sizes: dict[str, Any], label: str) -> dict[str, int]:
    """The sizes given to ``@udf``, checked as a backfill checks them (positive, bounds in order)."""
    given = {k: v for k, v in sizes.items() if v is not None}
    try:
        JobOptions.check({**{n: None for n in JobOptions.names()}, **given}, label)
    except InvalidArgumentError as exc:
        raise UDFDefinitionError(str(exc)) from None
    return given


def _user_metadata(metadata: Any, label: str) -> dict[str, str]:
    """``field_metadata`` as str -> str, without the package's own keys (``geneva::udf::...``)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise UDFDefinitionError(f"{label}: field_metadata must be a dict of str -> str, got {metadata!r}")
    taken = sorted(k for k in metadata if k.startswith(META_PREFIX))
    if taken:
        raise UDFDefinitionError(f"{label}: field_metadata keys {taken} are the package's own (prefix {META_PREFIX!r})")
    return dict(metadata)
def _columns_type(fields: Any, data_type: pa.DataType | None, label: str) -> pa.DataType:
    """The struct a ``-> Columns[T]`` UDF returns: ``T``'s fields (all nullable, as columns are), or the
    explicit ``data_type`` (a struct of as many fields, e.g. for Arrow field metadata)."""
    if not is_named_tuple(fields):
        raise UDFDefinitionError(f"{label}: Columns[...] takes a NamedTuple, got {fields!r}")
    inferred = pa.struct([f.with_nullable(True) for f in schema_of_row_type(fields, label, "pass data_type=")])
    if data_type is None:
        return inferred
    if not isinstance(data_type, pa.DataType) or not pa.types.is_struct(data_type) or \
            [f.name for f in data_type] != [f.name for f in inferred]:
        raise UDFDefinitionError(f"{label}: returns Columns[{fields.__name__}], so data_type must be a struct of "
                                 f"its fields {[f.name for f in inferred]}, got {data_type!r}")
    return data_type


def code_version(func: Any, data_type: pa.DataType, kind: UDFKind, arguments: Any = None) -> str:
    """The UDF's version: a hash of what it computes (see :mod:`geneva_provider.core.functions.identity`),
    with a stateful class's constructor ``arguments``."""
    return udf_fingerprint(func, str(data_type), kind.value, arguments=arguments)


def _row_values(values: pa.Array | pa.ChunkedArray, as_numpy: bool) -> list[Any]:
    """A column's values, one per row, as a scalar UDF takes them: Python values (a list value as a list),
    or, for a parameter annotated ``np.ndarray``, each list value as a numpy array (NULL stays None)."""
    if not as_numpy:
        return values.to_pylist()
    return [None if not v.is_valid else v.values.to_numpy(zero_copy_only=False) for v in values]


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
