"""The column operations of the front door: add (UDF, computed and expression columns), alter and drop columns,
each checked in full before anything changes, and committed as one schema change (``pipeline/schema_changes``)."""

from __future__ import annotations

import importlib
import pickle
from typing import Any

from geneva_provider.core.catalog import Catalog
from geneva_provider.core.column_names import check_column_name
from geneva_provider.core.contracts.operations import (
    AddColumns,
    AddColumnsEntry,
    AlterColumns,
    ColumnsChanged,
    DropColumns,
    VirtualColumnEntry,
)
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.functions.udf import UDF, UnpackedUDF
from geneva_provider.pipeline.schema_changes import UpdateColumns

#: the UDF backends this package runs (a Docker image spec, say, it cannot)
RUNNABLE_BACKENDS = (None, "", "python", "geneva_provider")


def add_columns(request: AddColumns, catalog: Catalog) -> ColumnsChanged:
    """Declares the UDF and computed columns (every value NULL until backfilled) and computes the expression
    columns now (Lance, their own commit first); ColumnError / InvalidArgumentError naming each, nothing changed."""
    subject = f"add_columns on table '{request.table}'"
    ref = catalog.ref(request.table)
    ds = ref.dataset()  # TableNotFoundError if the table was dropped
    names = [e.name for e in request.new_columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"{subject}: columns {twice} are given twice")
    sql = {e.name: e.expression for e in request.new_columns if _kind(e, subject) == "expression"}

    def declared() -> UpdateColumns:
        update = UpdateColumns(ref, subject=subject)
        for entry in request.new_columns:
            if entry.virtual_column is not None:
                fn = _function(entry.name, entry.virtual_column, subject)
                inputs = entry.virtual_column.input_columns
                if isinstance(fn, UnpackedUDF):
                    update.add_udf_group(fn, inputs)
                elif fn.multi_output and entry.virtual_column.outputs:  # the wire form of a multi-output UDF
                    update.add_udf_group(UnpackedUDF(fn), inputs)
                else:
                    update.add_udf_column(entry.name, fn, inputs)
            elif entry.computed is not None:
                update.add_udf_column(entry.name, computed_column(entry.name, entry.computed, subject))
        return update

    if not sql:
        return ColumnsChanged(version=declared().commit())
    declare = len(sql) < len(request.new_columns)
    if declare:
        declared()  # every UDF column checked before the expressions are computed and committed
    taken = [c for c in sql if c in ds.schema.names]
    if taken:
        raise ColumnError(f"{subject}: columns {taken} exist already")
    for column in sql:
        check_column_name(column, subject)
    try:
        ds.add_columns(dict(sql))
    except (ValueError, OSError, RuntimeError) as exc:
        raise InvalidArgumentError(f"{subject}: SQL expressions {sql} could not be computed: "
                                   f"{lance_reason(exc)}") from None
    return ColumnsChanged(version=declared().commit() if declare else ref.dataset().version)


def _kind(entry: AddColumnsEntry, subject: str) -> str:
    given = [k for k in ("virtual_column", "computed", "expression") if getattr(entry, k) is not None]
    if len(given) != 1:
        raise InvalidArgumentError(f"{subject}: column '{entry.name}' takes exactly one of virtual_column, computed "
                                   f"or expression, got {given or 'none'}")
    return given[0]


def _function(column: str, entry: VirtualColumnEntry, subject: str) -> UDF | UnpackedUDF:
    """The UDF of a virtual column: the object, or unpickled from its base64 form; refused when it cannot run."""
    if entry.udf_backend not in RUNNABLE_BACKENDS:
        raise InvalidArgumentError(f"{subject}: column '{column}': udf_backend {entry.udf_backend!r} cannot be run "
                                   "by geneva_provider (it runs Python UDFs on Spark)")
    fn = loaded(entry.udf)
    if not isinstance(fn, UDF | UnpackedUDF):
        raise InvalidArgumentError(f"{subject}: column '{column}' needs a @udf function or a SQL expression, "
                                   f"got {fn!r}")
    return fn


def loaded(value: Any) -> Any:
    """A UDF given in its wire form (base64 cloudpickle) unpickled; anything else as it is, for the caller's check
    to name (a string that is no pickle is not a UDF)."""
    if not isinstance(value, str):
        return value
    try:
        return UDF.load(value)
    except (ValueError, pickle.UnpicklingError, UDFDefinitionError):
        return value


def computed_column(column: str, expression: str, subject: str) -> UDF:
    """The UDF of a maintained SQL computed column: ``geneva_provider.computed(expression)`` when the package has
    it (looked up at call time: it is a facade-level name); InvalidArgumentError naming the column otherwise."""
    make = getattr(importlib.import_module("geneva_provider"), "computed", None)
    if make is None:
        raise InvalidArgumentError(f"{subject}: column '{column}': computed SQL columns ({expression!r}) are not "
                                   "available in this version of geneva_provider; use an expression column")
    made = make(expression)
    return made if isinstance(made, UDF) else made.udf


def alter_columns(request: AlterColumns, catalog: Catalog) -> ColumnsChanged:
    """Renames / retypes columns and revises UDF columns, every alteration checked before anything changes."""
    subject = f"alter_columns on table '{request.table}'"
    ref = catalog.ref(request.table)
    ref.dataset()  # TableNotFoundError if the table was dropped
    update = UpdateColumns(ref, subject=subject)
    for alteration in request.alterations:
        change: dict[str, Any] = {k: v for k, v in (("rename", alteration.rename), ("nullable", alteration.nullable),
                                                    ("data_type", alteration.data_type)) if v is not None}
        if alteration.input_columns is not None and alteration.udf is None:
            raise InvalidArgumentError(f"{subject}: column '{alteration.path}': input_columns goes with a new 'udf'")
        if alteration.udf is None and not change:
            raise InvalidArgumentError(f"{subject}: column '{alteration.path}': nothing to alter (give udf, rename, "
                                       "nullable or data_type)")
        if change:  # first: a rename that landed before (a rerun) is recognised under its former name
            update.alter_column(alteration.path, **change)
        if alteration.udf is not None:
            fn = loaded(alteration.udf)
            update.revise_udf(change.get("rename", alteration.path), fn, alteration.input_columns)
    return ColumnsChanged(version=update.commit())


def drop_columns(request: DropColumns, catalog: Catalog) -> ColumnsChanged:
    """Drops columns (a UDF column with its fingerprint column); refused, changing nothing, as ``UpdateColumns``
    refuses it."""
    ref = catalog.ref(request.table)
    ref.dataset()  # TableNotFoundError if the table was dropped
    subject = f"drop_columns on table '{request.table}'"
    return ColumnsChanged(version=UpdateColumns(ref, subject=subject).drop_columns(request.columns).commit())
