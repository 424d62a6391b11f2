"""Python annotations as Arrow types: the one mapper every decorator uses (core).

``@udf def f(x) -> list[float]``, a chunker row's ``tokens: list[float]`` field and an ``output_schema=``
dict entry ``{"tokens": list[float]}`` are one question -- which Arrow type is this annotation? -- so
they get one answer here:

* ``int``, ``float``, ``str``, ``bytes``, ``bool`` -> int64, double, string, binary, bool;
* a numpy scalar type (``np.float32``, ``np.int16``...) -> the Arrow type of that dtype;
* a pyarrow type used as the annotation (``-> pa.float32()``) -> itself;
* ``list[X]`` / ``Sequence[X]`` -> a list of X, nested as deep as written;
* ``Optional[X]`` / ``X | None`` -> X, nullable (the field, where a field is made);
* a dataclass, NamedTuple or TypedDict -> a struct of its annotated fields (a row, for a chunker).

A row type's top-level fields are nullable only when annotated ``Optional`` (``int`` means an int, not
None); fields nested inside a struct or a list are always nullable, as a UDF column's values are.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import types
import typing
from typing import Any

import numpy as np
import pyarrow as pa

from geneva_provider.core.errors import UDFDefinitionError

_PY_TYPES: dict[Any, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
    bytes: pa.binary(),
}
_SEQUENCES = (list, collections.abc.Sequence)
_ROWS = (collections.abc.Iterator, collections.abc.Iterable, collections.abc.Generator, list)


def arrow_type(t: Any, where: str, remedy: str) -> pa.DataType:
    """The Arrow type of the annotation ``t``; UDFDefinitionError naming ``where`` and the ``remedy`` if none."""
    if isinstance(t, pa.DataType):
        return t
    if t in _PY_TYPES:
        return _PY_TYPES[t]
    if inspect.isclass(t) and issubclass(t, np.generic) and t not in (np.generic, np.number, np.object_):
        try:
            return pa.from_numpy_dtype(np.dtype(t))
        except (pa.ArrowNotImplementedError, TypeError):
            pass
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in _SEQUENCES and len(args) == 1:
        return pa.list_(arrow_type(args[0], where, remedy))
    if is_optional(t):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return arrow_type(rest[0], where, remedy)
    if t is inspect.Parameter.empty:
        raise UDFDefinitionError(f"{where}: no annotation to take the Arrow type from; {remedy}")
    if is_row_type(t):
        return pa.struct([pa.field(n, arrow_type(h, f"{where}, field '{n}'", remedy)) for n, h in
                          _row_hints(t, where, remedy).items()])
    raise UDFDefinitionError(f"{where}: cannot map the annotation {t!r} to an Arrow type; {remedy}")


def is_optional(t: Any) -> bool:
    """Whether an annotation admits None (``Optional[int]``, ``int | None``); an Arrow type always does."""
    if isinstance(t, pa.DataType):
        return True
    return typing.get_origin(t) in (typing.Union, types.UnionType) and type(None) in typing.get_args(t)


def is_row_type(t: Any) -> bool:
    """Whether ``t`` is a dataclass, a NamedTuple or a TypedDict class: a type whose fields are columns."""
    return inspect.isclass(t) and (dataclasses.is_dataclass(t) or (issubclass(t, tuple) and hasattr(t, "_fields"))
                                   or typing.is_typeddict(t))


def annotated_field(name: str, t: Any, where: str, remedy: str) -> pa.Field:
    """The Arrow field ``name`` of annotation ``t``, nullable only when ``t`` admits None."""
    return pa.field(name, arrow_type(t, where, remedy), nullable=is_optional(t))


def schema_of_row_type(row_type: Any, label: str, remedy: str = "pass output_schema=") -> pa.Schema:
    """The Arrow schema of a row type -- a dataclass, a NamedTuple or a TypedDict -- from its annotations,
    as declared: a field is nullable only when annotated ``Optional[...]`` (``int`` means an int, not None)."""
    if not is_row_type(row_type):
        shown = row_type.__name__ if inspect.isclass(row_type) else repr(row_type)
        raise UDFDefinitionError(f"{label}: the row type {shown} is not a dataclass, NamedTuple or TypedDict; "
                                 f"{remedy}")
    return pa.schema([annotated_field(n, t, f"{label}, field '{n}'", remedy)
                      for n, t in _row_hints(row_type, label, remedy).items()])


def _row_hints(row_type: type, where: str, remedy: str) -> dict[str, Any]:
    hints = type_hints(row_type)
    if not hints:
        raise UDFDefinitionError(f"{where}: the row type {row_type.__name__} has no annotated fields; {remedy}")
    return hints


def row_type_of_return(ret: Any) -> Any:
    """``Chunk`` from ``Iterator[Chunk]`` / ``Iterable`` / ``Generator`` / ``list[Chunk]``; None otherwise."""
    if typing.get_origin(ret) in _ROWS:
        args = typing.get_args(ret)
        return args[0] if args else None
    return None


def type_hints(obj: Any) -> dict[str, Any]:
    """``obj``'s annotations resolved (forward references too); the raw ones when they do not resolve."""
    try:
        return typing.get_type_hints(obj)
    except Exception:  # noqa: BLE001 - unresolvable annotations: use the raw ones
        return dict(getattr(obj, "__annotations__", {}) or {})


def has_struct(t: pa.DataType) -> bool:
    """Whether ``t`` is or holds a struct (whose Python values may be dataclasses or NamedTuples)."""
    if pa.types.is_struct(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return has_struct(t.value_type)
    return False


def plain(value: Any) -> Any:
    """``value`` with every dataclass and NamedTuple in it as a dict, as Arrow converts structs from dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {k: plain(v) for k, v in typing.cast(Any, value)._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def convert_exactly(values: Any, data_type: pa.DataType) -> pa.Array:
    """``values`` (Python objects, numpy, pandas) as an array of ``data_type``; ArrowInvalid if that loses data.

    ``pa.array(values, type=...)`` truncates Python floats into integer (and temporal) types without a
    word (``0.7`` becomes ``0``), so the values are also converted as they are and cast safely: a cast
    that fails only because it is safe (the unsafe one succeeds) means the declared type loses data.
    Exact conversions (``1.0`` or ``1`` for int64, ints for float64, None) pass; when the values have no
    single Arrow type or no cast exists to check with, the typed conversion stands alone.  Values of a
    struct type may be dataclasses or NamedTuples as well as dicts.

    What the typed conversion alone refuses but pyarrow's safe cast takes is converted as the cast does:
    an embedding's Python or numpy float64 values (pyarrow scalars, a 2-D numpy array of rows) for a
    ``list<float32>[N]`` column, ints for floats (see :func:`cast_exactly`).
    """
    if isinstance(values, np.ndarray) and values.ndim > 1:
        values = list(values)  # one row per item: a model's (rows, dims) output
    if has_struct(data_type) and isinstance(values, list):
        values = [plain(v) for v in values]
    try:
        typed = pa.array(values, type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
        try:  # e.g. pyarrow double scalars for a float32 list: converted as they are, then cast safely
            as_given = pa.array(values)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            raise exc from None
        if not numeric_alike(as_given.type, data_type):
            raise exc from None
        return cast_exactly(as_given, data_type)
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
    return _no_overflow(as_given, typed)


def numeric_alike(given: pa.DataType, declared: pa.DataType) -> bool:
    """Whether ``given`` is numbers where ``declared`` is numbers, in lists as deep (float64 values for a float32
    vector): what :func:`cast_exactly` converts.  Strings are never parsed into numbers, nor numbers into text."""
    def is_list(t: pa.DataType) -> bool:
        return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)

    while is_list(given) and is_list(declared):
        given, declared = given.value_type, declared.value_type
    return all(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) for t in (given, declared))


def cast_exactly(array: pa.Array, data_type: pa.DataType) -> pa.Array:
    """``array`` cast to ``data_type`` as pyarrow's safe cast does (float64 to float32, int to float, list to
    fixed-size list); ArrowInvalid naming the first value the cast refuses or turns from finite to infinite.

    The types' own mismatch (a string for a float list) raises ArrowNotImplementedError / ArrowTypeError.
    """
    try:
        out = array.cast(data_type, safe=True)
    except pa.ArrowInvalid as exc:
        raise pa.ArrowInvalid(f"{exc}{_first_misfit(array, data_type)}") from None
    return _no_overflow(array, out)


def _no_overflow(given: pa.Array, out: pa.Array) -> pa.Array:
    """``out`` unless a finite float of ``given`` became infinite in it (float64 1e40 as float32): ArrowInvalid
    naming the value.  pyarrow's safe cast lets that through; it loses the value entirely."""
    src, dst = _leaf_values(given), _leaf_values(out)
    if src is None or dst is None or len(src) != len(dst) or not pa.types.is_floating(src.type) \
            or not pa.types.is_floating(dst.type) or src.type.bit_width <= dst.type.bit_width:
        return out
    a = src.to_numpy(zero_copy_only=False)
    b = dst.to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(np.isfinite(a) & ~np.isfinite(b))
    if bad.size:
        value, became = a[bad[0]].item(), b[bad[0]].item()
        raise pa.ArrowInvalid(f"the value {value!r} does not fit {dst.type} (it would become {became!r})")
    return out


def _leaf_values(array: pa.Array) -> pa.Array | None:
    """The innermost values of a (nested) list array, or the array itself; None for other nested types."""
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(
            array.type):
        array = array.flatten()
    return None if pa.types.is_nested(array.type) else array


def _first_misfit(array: pa.Array, data_type: pa.DataType) -> str:
    """`` (value 0.5 of row 3)``: the first value the safe cast refuses, for an error message ('' if not found)."""
    for i in range(len(array)):
        try:
            array.slice(i, 1).cast(data_type, safe=True)
        except pa.ArrowException:
            return f" (value {array[i].as_py()!r} of row {i} does not fit {data_type})"
    return ""
