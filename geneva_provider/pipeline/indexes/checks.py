"""An index spec checked against the table, on the driver, before any Spark job and before anything is written.

A missing column, a column that holds no vectors (a variable-length ``list<float>`` says how to declare a
fixed-size one), an empty table, ``num_sub_vectors`` that does not divide the dimension, more partitions than
rows, too few rows to train PQ, a scalar index on a column of the wrong type: each is the package's error
naming the table, the column and the value.  Unset ``num_partitions`` / ``num_sub_vectors`` are chosen here
(LanceDB's defaults).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from geneva_provider.core.contracts.index_models import MIN_ROWS_PER_CODE, IndexSpec, IndexType, parse_index_type
from geneva_provider.core.errors import ColumnError, InvalidArgumentError
from geneva_provider.core.vector_search import default_vector_column, is_vector_type, not_vectors

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


@dataclass(frozen=True)
class IndexTarget:
    """A spec checked against the table: resolved parameters, the column's field id, dimension and rows."""

    spec: IndexSpec
    field_id: int
    dimension: int | None
    rows: int


def check_index(ds: Dataset, spec: IndexSpec, table: str) -> IndexTarget:
    """``spec`` checked against ``ds`` and resolved; the package's error naming the column and value otherwise."""
    subject = f"create_index on table '{table}'"
    if spec.column not in ds.schema.names:
        raise ColumnError(f"{subject}: no column '{spec.column}' (columns: {ds.schema.names})")
    field_type = ds.schema.field(spec.column).type
    field_id = field_id_of(ds, spec.column, table)
    rows = ds.count_rows()
    kind = spec.index_type
    if rows == 0:  # Lance builds no segment of no rows (FTS: an error; BTREE: an empty commit and no index)
        raise InvalidArgumentError(f"{subject}: the table has no rows, nothing to build a {kind.value} index on "
                                   f"column '{spec.column}' from; add rows first, then create the index")
    if not kind.is_vector:
        _check_scalar(subject, spec, field_type)
        return IndexTarget(spec, field_id, None, rows)
    if not is_vector_type(field_type) or not pa.types.is_floating(field_type.value_type):
        raise not_vectors(subject, spec.column, field_type)
    dimension = field_type.list_size
    partitions = spec.num_partitions or (math.ceil(rows / spec.target_partition_size) if spec.target_partition_size
                                         else max(1, min(int(math.sqrt(rows)), rows)))
    if rows < partitions:
        raise InvalidArgumentError(f"{subject}: column '{spec.column}' has {rows} rows, too few to train "
                                   f"num_partitions={partitions} IVF partitions (at least one row each)")
    sub_vectors = spec.num_sub_vectors
    if kind.trains_pq:
        sub_vectors = sub_vectors or _default_sub_vectors(dimension)
        if dimension % sub_vectors:
            raise InvalidArgumentError(f"{subject}: num_sub_vectors={sub_vectors} does not divide the dimension "
                                       f"{dimension} of column '{spec.column}' (divisors: "
                                       f"{[d for d in range(1, dimension + 1) if dimension % d == 0]})")
        need = 2 ** spec.num_bits * MIN_ROWS_PER_CODE
        if rows < need:
            raise InvalidArgumentError(f"{subject}: column '{spec.column}' has {rows} rows, too few to train PQ "
                                       f"with num_bits={spec.num_bits} (at least {need}: {MIN_ROWS_PER_CODE} per "
                                       f"code); use index_type='IVF_FLAT' or 'IVF_SQ', or num_bits=4")
    elif spec.num_sub_vectors is not None:
        raise InvalidArgumentError(f"{subject}: num_sub_vectors={spec.num_sub_vectors} is for PQ indexes, not "
                                   f"{kind.value}")
    resolved = spec.model_copy(update={"num_partitions": partitions, "num_sub_vectors": sub_vectors})
    return IndexTarget(resolved, field_id, dimension, rows)


def index_column(table: str, vector_column_name: str | None, column: str | None) -> str | None:
    """The column of a ``create_index`` call: ``vector_column_name`` and ``column`` are synonyms (both given and
    different: InvalidArgumentError naming both); None when neither is given."""
    if vector_column_name is not None and column is not None and vector_column_name != column:
        raise InvalidArgumentError(f"create_index on table '{table}': vector_column_name={vector_column_name!r} and "
                                   f"column={column!r} name the same argument; give one of them")
    return vector_column_name if vector_column_name is not None else column


def index_spec(ds: Dataset, table: str, vector_column_name: str | None = None, column: str | None = None,
               index_type: Any = "IVF_PQ", **params: Any) -> IndexSpec:
    """The spec of a ``create_index`` call as LanceDB takes it: ``vector_column_name`` and ``column`` are synonyms
    (both given and different: refused); neither given, the table's one vector column for a vector index (an
    error listing the vector columns otherwise).  Checked against ``ds`` by :func:`check_index` when planned."""
    subject = f"create_index on table '{table}'"
    chosen = index_column(table, vector_column_name, column)
    if chosen is None:
        kind = parse_index_type(index_type, subject)  # the index type checked first (naming it)
        if not kind.is_vector:
            raise InvalidArgumentError(f"{subject}: a {kind.value} index needs the column to index: pass column=")
        chosen = default_vector_column(subject, ds.schema)
    return IndexSpec.of(chosen, index_type, table=table, **params)


def refresh_name(table: str, index_name: str | None, column: str | None) -> str:
    """The index a refresh names: ``index_name``, or LanceDB's default name of ``column``'s index
    (``<column>_idx``); InvalidArgumentError when neither is given, or both and they disagree."""
    subject = f"refresh_index on table '{table}'"
    for arg, value in (("name", index_name), ("column", column)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidArgumentError(f"{subject}: {arg} must be a non-empty string, got {value!r}")
    if index_name is None and column is None:
        raise InvalidArgumentError(f"{subject}: name the index (name=) or its column (column=)")
    if index_name is not None and column is not None and index_name != f"{column}_idx":
        raise InvalidArgumentError(f"{subject}: name={index_name!r} is not the index of column={column!r} "
                                   f"('{column}_idx'); give one of them")
    return index_name if index_name is not None else f"{column}_idx"


def field_id_of(ds: Dataset, column: str, table: str) -> int:
    """The Lance field id of a top-level ``column`` (what an index's segments name)."""
    field = ds.lance_schema.field(column)
    if field is None:
        raise ColumnError(f"table '{table}' has no column '{column}' (columns: {ds.schema.names})")
    return int(field.id())


def _default_sub_vectors(dimension: int) -> int:
    """``dimension / 16`` sub-vectors, else ``/ 8``, ``/ 4``, ``/ 2``, whichever divides (LanceDB's choice)."""
    for per in (16, 8, 4, 2):
        if dimension % per == 0 and dimension >= per:
            return dimension // per
    return 1


def _check_scalar(subject: str, spec: IndexSpec, t: pa.DataType) -> None:
    kind = spec.index_type
    if spec.num_partitions is not None or spec.num_sub_vectors is not None:
        raise InvalidArgumentError(f"{subject}: num_partitions / num_sub_vectors are for vector indexes, not a "
                                   f"{kind.value} index on column '{spec.column}'")
    if kind is IndexType.INVERTED:
        ok = pa.types.is_string(t) or pa.types.is_large_string(t) or (
            (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_string(t.value_type))
        want = "strings (or lists of strings)"
    elif kind is IndexType.LABEL_LIST:
        ok, want = pa.types.is_list(t) or pa.types.is_large_list(t), "lists (of labels)"
    else:
        nested = pa.types.is_nested(t) or pa.types.is_fixed_size_list(t)
        ok, want = not nested and not pa.types.is_null(t), "scalars (numbers, strings, dates, booleans)"
    if not ok:
        raise InvalidArgumentError(f"{subject}: a {kind.value} index indexes {want}; column '{spec.column}' "
                                   f"holds {t}")
