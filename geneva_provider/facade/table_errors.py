"""Swapping a UDF column's code for a fixed one without invalidating the values it already computed."""

from __future__ import annotations

from typing import Any

from geneva_provider.core.errors import ColumnError, UDFDefinitionError
from geneva_provider.core.udf import META_COLUMN_UID, META_NAME, META_VERSION, UDF, udf_column_info


def replace_udf(ds: Any, table: str, column: str, fixed: UDF) -> None:
    """Stores ``fixed`` as ``column``'s code, keeping its name, version, inputs and incarnation.

    The type and the number of inputs must match: the stored values and their fingerprints stay
    as they are, so only rows without a valid value (the failed ones) are computed by the fix.
    """
    info, metadata = check_replacement(ds, table, column, fixed)
    kept = {k: getattr(info, a) for k, a in ((META_NAME, "name"), (META_VERSION, "version"),
                                             (META_COLUMN_UID, "column_uid"))}
    ds.update_field_metadata({column: {**metadata, **kept}}, replace=True)


def check_replacement(ds: Any, table: str, column: str, fixed: UDF) -> tuple[Any, dict[str, str]]:
    """Checks ``fixed`` can replace ``column``'s UDF; returns the column's UDF info and the fix's field metadata."""
    if column not in ds.schema.names:
        raise ColumnError(f"column '{column}' not found in table '{table}'")
    field = ds.schema.field(column)
    info = udf_column_info(field.metadata)
    if info is None:
        raise ColumnError(f"column '{column}' of table '{table}' is not a UDF column")
    if not isinstance(fixed, UDF):
        raise UDFDefinitionError(f"column '{column}' of table '{table}': udf must be a @udf function, got {fixed!r}")
    if fixed.data_type != field.type:
        raise UDFDefinitionError(f"column '{column}' of table '{table}' holds {field.type}; the fixed UDF "
                                 f"'{fixed.name}' returns {fixed.data_type}")
    inputs = info.input_columns
    if fixed.input_columns is not None and inputs is not None and len(fixed.input_columns) != len(inputs):
        raise UDFDefinitionError(f"column '{column}' of table '{table}' reads {inputs}; the fixed UDF "
                                 f"'{fixed.name}' takes {len(fixed.input_columns)} inputs")
    try:
        metadata = fixed.to_field_metadata(inputs)
    except UDFDefinitionError as exc:
        raise UDFDefinitionError(f"column '{column}' of table '{table}': {exc}") from None
    return info, metadata
