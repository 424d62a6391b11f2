"""``Columns[T]``: the return annotation of a UDF that computes several columns in one call (core).

``@udf def f(x) -> Columns[Dims]`` (``Dims`` a NamedTuple) declares one function whose every call
returns one value per field of ``Dims``; ``table.add_columns(f)`` adds each field as a top-level
column of its own type, named by the field (``UnpackedUDF(f, prefix="img_")`` prefixes the names).
The columns are one group: computed in one pass per row, backfilled together, judged valid by one
fingerprint and dropped together.  This module holds the marker alone (no import of the UDF), so the
decorator and the annotation mapper can both read it.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Columns(Generic[T]):
    """Return annotation of a multi-output UDF: ``-> Columns[Dims]`` with ``Dims`` a NamedTuple.

    Each field of ``Dims`` becomes a column of the table that ``add_columns(udf)`` is given, of the
    field's type; the function returns a ``Dims`` (or any tuple of the fields' values, in order) per row.
    """


def columns_of(annotation: Any) -> Any | None:
    """``T`` from a ``Columns[T]`` annotation (through ``Annotated``); None for any other annotation."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return columns_of(typing.get_args(annotation)[0])
    if origin is Columns:
        return typing.get_args(annotation)[0]
    return None


def is_named_tuple(t: Any) -> bool:
    """Whether ``t`` is a NamedTuple class: the one type ``Columns[...]`` takes, as the reference's does."""
    return inspect.isclass(t) and issubclass(t, tuple) and hasattr(t, "_fields")
