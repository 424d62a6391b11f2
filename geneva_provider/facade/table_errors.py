"""Retrying failed rows: finding them again, and swapping in a fixed UDF without invalidating other values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.functions.udf import META_COLUMN_UID, META_NAME, META_VERSION, UDF, udf_column_info


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


def failed_rows_where(dataset_at: Callable[[int | None], Any], table: str, column: str,
                      by_job: dict[str, list[int]], read_versions: dict[str, int | None]) -> str:
    """A filter selecting, at the table's latest version, the rows the jobs in ``by_job`` left without a value.

    The error store records row addresses as of the version each job read; a compaction or an update
    moves rows to other addresses since.  With stable row ids each job's addresses are looked up at
    its version and the rows found again by id; without them the addresses hold only while no row
    moved, which is checked (a moved row fails here rather than being silently left out).
    """
    latest = dataset_at(None)
    addresses = sorted({a for addrs in by_job.values() for a in addrs})
    if not latest.has_stable_row_ids:
        where = f"_rowaddr IN ({', '.join(map(str, addresses))})"
        moved = len(addresses) - latest.count_rows(where)
        if moved:
            raise InvalidArgumentError(
                f"table '{table}' column '{column}': {moved} of the {len(addresses)} failed rows moved since the "
                "job (compaction, an update or a delete) and the table has no stable row ids to find them by; "
                f"run tbl.backfill('{column}'): it computes every row left without a valid value")
        return where
    ids: set[int] = set()
    for job, addrs in by_job.items():
        version = read_versions.get(job)
        try:
            at_job = dataset_at(version)
        except (ValueError, OSError):
            raise InvalidArgumentError(
                f"table '{table}' column '{column}': job {job} read version {version}, which has been cleaned up, "
                f"so its failed rows cannot be found again; run tbl.backfill('{column}'): it computes every row "
                "left without a valid value") from None
        found = at_job.to_table(columns=[], filter=f"_rowaddr IN ({', '.join(map(str, addrs))})", with_row_id=True)
        ids.update(int(i) for i in found.column("_rowid").to_pylist())
    return f"_rowid IN ({', '.join(map(str, sorted(ids)))})"
