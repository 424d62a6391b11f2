"""A function's Python rows as Arrow rows of its output schema, and where they do not fit (core).

A chunker yields rows -- dataclass, NamedTuple or TypedDict instances, or dicts -- and a batch UDTF
returns tables; both are held to the output schema the function declared: every column there and of its
type, and no None where a field is declared not nullable (Arrow's conversions let that through).  When
rows do not fit, the error (:class:`UDTFRowError`) names the first field at fault, its path inside
lists and structs, and the value's type, so a user sees which yield was wrong.  A multi-output UDF
whose call returns one row of N fields is held to its fields by the same code.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from geneva_provider.core.errors import UDFDefinitionError
from geneva_provider.core.functions.arrow_types import annotated_field, has_struct, plain

CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError, KeyError)


class UDTFRowError(TypeError, ValueError):
    """Rows a UDTF yielded (or returned) that do not fit its declared output schema: a value of another
    type, a None where a field is not nullable, a row of another shape.

    A TypeError and a ValueError both, as the Arrow errors behind it are one or the other, so an error
    policy naming either (``Skip(ValueError)``, ``Retry(TypeError)``) takes it.
    """


@dataclass(frozen=True)
class RowSchema:
    """The rows a function outputs: ``schema`` as the table stores it (every column nullable at the top),
    ``declared`` as the function declared it (its nullability is what rows are held to; None: nothing is
    required), and ``label``, how errors name the function."""

    schema: pa.Schema
    declared: pa.Schema | None
    label: str

    def to_table(self, out: list[Any]) -> pa.Table:
        """The yielded rows as a table of the output schema; UDTFRowError naming the first bad field.

        Rows of one NamedTuple or dataclass type convert column by column in one pass (no Python loop
        per row); other rows go through dicts.  A None where the declared schema says not nullable is
        refused too: Arrow's conversion lets it through.
        """
        try:
            table = self._convert(out)
        except CONVERSION_ERRORS as exc:
            try:  # pyarrow scalars in the rows (values taken from an Arrow array): as Python values
                table = self._convert(python_values(out)) if any(map(holds_scalars, out)) else None
            except CONVERSION_ERRORS:
                table = None
            if table is None:
                raise self._explain(out, exc) from None
        if self.declared is not None and any(has_required(f) for f in self.declared):
            for f in self.declared:
                path = null_path(table.column(f.name), f, f.name)
                if path is not None:
                    raise UDTFRowError(f"{self.label} yielded None for '{path}', which its output schema declares "
                                       "not nullable")
        return table

    def conform(self, table: pa.Table) -> pa.Table:
        """A returned table with exactly the output schema's columns and types (see :func:`conform`)."""
        return conform(table, self.schema, self.label, self.declared)

    def _convert(self, out: list[Any]) -> pa.Table:
        schema = self.schema
        names = schema.names
        kind = one_row_type(out)
        try:
            if kind is not None and issubclass(kind, tuple) and list(getattr(kind, "_fields", ())) == names:
                # NamedTuples: Arrow reads the tuples as structs in one pass, no Python loop per row
                struct = pa.array(out, type=pa.struct(list(schema)))
                return pa.Table.from_arrays(struct.flatten(), schema=schema)
            if kind is not None and dataclasses.is_dataclass(kind) and [
                    f.name for f in dataclasses.fields(kind)] == names:
                return pa.Table.from_arrays([pa.array([getattr(r, n) for r in out], type=f.type)
                                             for n, f in zip(names, schema, strict=True)], schema=schema)
        except CONVERSION_ERRORS:
            pass  # the dicts below convert what the one-pass paths cannot (or fail the same)
        records = [as_record(r, names) for r in out]
        if any(has_struct(f.type) for f in schema):  # nested dataclasses / NamedTuples convert as dicts
            records = [{k: plain(v) for k, v in r.items()} for r in records]
        return pa.Table.from_pylist(records, schema=schema)

    def _bad_field(self, row: Any) -> tuple[str, Any, pa.DataType, str] | None:
        """The first field of one row that does not convert: (path, value, declared type, why)."""
        record = as_record(row, self.schema.names)
        for f in self.declared or self.schema:
            found = bad_value(record[f.name], f, f.name)
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
                                    f"{describe(self.schema)}: {err}")
            if found is not None:
                path, value, declared, why = found
                return UDTFRowError(f"{self.label} yielded a row whose field '{path}' holds "
                                    f"{a_value(value)}, which does not fit its declared type {declared}{why}")
        return UDTFRowError(f"{self.label} yielded rows that do not match its output schema "
                            f"{describe(self.schema)}: {exc}")


def check_schema(schema: Any, label: str) -> tuple[pa.Schema, pa.Schema]:
    """``output_schema=`` checked: (the output schema as the view stores it -- every column nullable, so a
    skipped parent's marker fits --, the schema as declared, whose nullability the rows are held to).

    A dict maps column names to annotations, mapped as a row type's fields are.
    """
    if isinstance(schema, dict):
        keys = [k for k in schema if not isinstance(k, str) or not k.strip()]
        if keys:
            raise UDFDefinitionError(f"{label}: output column names must be non-empty strings, got {keys[0]!r} "
                                     "in output_schema")
        schema = pa.schema([annotated_field(n, t, f"{label}, column '{n}'", "pass output_schema=")
                            for n, t in schema.items()])
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


def conform(table: pa.Table, schema: pa.Schema, label: str, declared: pa.Schema | None = None) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types; UDTFRowError naming the column otherwise.

    ``declared`` (the schema as the UDTF declared it) adds its nullability: a null in a field it says is
    not nullable is refused here, since Arrow's casts let it through.
    """
    missing = [n for n in schema.names if n not in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    if missing or extra:
        raise UDTFRowError(f"{label} returned columns {table.column_names}, not its output schema "
                           f"{describe(schema)} (missing {missing}, unexpected {extra})")
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
        path = null_path(out.column(f.name), f, f.name) if has_required(f) else None
        if path is not None:
            raise UDTFRowError(f"{label} returned a null in '{path}', which its output schema declares not nullable")
    return out


def as_rows(result: Any, label: str) -> list[Any]:
    """A call's rows: a generator's or a list's items; TypeError for a single value."""
    kind = type(result)
    if kind is list:
        return result
    if kind is types.GeneratorType:
        return list(result)
    if result is None:
        return []
    if isinstance(result, str | bytes | dict) or dataclasses.is_dataclass(result) or is_namedtuple(result) \
            or not isinstance(result, Iterable):
        raise TypeError(f"{label} must yield its rows (or return a list of them), but returned a "
                        f"{type(result).__name__}: {str(result)[:80]!r}")
    return list(result)


def holds_scalars(row: Any) -> bool:
    """Whether a pyarrow scalar is among a row's values, or the items of its list values."""
    values = row.values() if isinstance(row, dict) else row if isinstance(row, tuple) else (
        [getattr(row, f.name) for f in dataclasses.fields(row)] if dataclasses.is_dataclass(row) else [])
    return any(isinstance(v, pa.Scalar) or (isinstance(v, list) and any(isinstance(i, pa.Scalar) for i in v))
               for v in values)


def python_values(value: Any) -> Any:
    """``value`` with every pyarrow scalar in it as its Python value (rows as dicts; lists and tuples kept)."""
    if isinstance(value, pa.Scalar):
        return value.as_py()
    if isinstance(value, list):
        return [python_values(v) for v in value]
    if isinstance(value, dict):
        return {k: python_values(v) for k, v in value.items()}
    if (dataclasses.is_dataclass(value) and not isinstance(value, type)) or is_namedtuple(value):
        return python_values(plain(value))
    return value


def is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def one_row_type(rows: list[Any]) -> type | None:
    """The type of every row, when they all have one (then they convert column by column); else None."""
    if not rows:
        return None
    kinds = set(map(type, rows))  # no Python loop per row
    return kinds.pop() if len(kinds) == 1 else None


def as_record(row: Any, names: list[str]) -> dict[str, Any]:
    """One row as a dict of exactly the fields ``names``; TypeError / KeyError naming what does not match."""
    if isinstance(row, dict):
        record = row
    elif dataclasses.is_dataclass(row) and not isinstance(row, type):
        record = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    elif is_namedtuple(row):
        record = row._asdict()
    else:
        raise TypeError(f"a row must be a dataclass, NamedTuple, TypedDict or dict, got {type(row).__name__} "
                        f"{str(row)[:80]!r}")
    extra = [k for k in record if k not in names]
    missing = [n for n in names if n not in record]
    if extra or missing:
        raise KeyError(f"its fields {list(record)} are not the schema's (missing {missing}, unexpected {extra})")
    return record


def describe(schema: pa.Schema) -> str:
    """``{a: int64, b: string}``: a schema in one line, for an error message."""
    return "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}"


def has_required(f: pa.Field) -> bool:
    """Whether ``f`` or a field nested in it is not nullable."""
    if not f.nullable:
        return True
    t = f.type
    if pa.types.is_struct(t):
        return any(has_required(t.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return has_required(t.value_field)
    return False


def null_path(array: pa.Array | pa.ChunkedArray, f: pa.Field, path: str) -> str | None:
    """The path of the first field in ``array`` that holds a null where ``f`` says it is not nullable."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not f.nullable and array.null_count:
        return path
    t = f.type
    if pa.types.is_struct(t):
        for i, child in enumerate(array.flatten()):  # the children, with the parents' nulls
            found = null_path(child, t.field(i), f"{path}.{t.field(i).name}")
            if found is not None:
                return found
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return null_path(array.flatten(), t.value_field, f"{path}[]")
    return None


def bad_value(value: Any, f: pa.Field, path: str) -> tuple[str, Any, pa.DataType, str] | None:
    """Where ``value`` does not fit ``f``: (path of the innermost misfit, its value, its declared type,
    Arrow's reason); None if it fits.  Lists and structs are searched item by item, field by field."""
    if value is None:
        return None if f.nullable else (path, value, f.type, ": the field is not nullable")
    t = f.type
    why = ""
    try:
        pa.array([plain(value) if has_struct(t) else value], type=t)
        fits = True
    except CONVERSION_ERRORS as exc:
        fits, why = False, f": {exc}"
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and isinstance(
            value, list | tuple):
        for k, item in enumerate(value):
            found = bad_value(item, t.value_field, f"{path}[{k}]")
            if found is not None:
                return found
    elif pa.types.is_struct(t):
        items = plain(value)
        if isinstance(items, dict):
            for i in range(t.num_fields):
                child = t.field(i)
                found = bad_value(items.get(child.name), child, f"{path}.{child.name}")
                if found is not None:
                    return found
    return None if fits else (path, value, t, why)


def a_value(value: Any) -> str:
    """``a str ('abc')``: a value's type and a short look at it, for an error message."""
    shown = repr(value)
    return f"a {type(value).__name__} ({shown[:60] + '...' if len(shown) > 60 else shown})"
