"""A column's incarnation, and the one check every commit into an existing column (and every stage before
the commit) makes of it.

A plan records the incarnation of each column it writes (:class:`ColumnIncarnation`); a commit that
finds another incarnation under the name -- the column was dropped and added again since, whatever its
type -- is refused before anything lands.  Names and field ids alone cannot tell: Lance gives a column
re-added after the highest-numbered ones were dropped the very field ids they had, and a file committed
into it is then read as the new type (a string column that no read can decode, int64 bits read as float64).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.models import ColumnIncarnation, JobPlan
from geneva_provider.core.errors import ColumnReplacedError
from geneva_provider.core.fragments import column_leaf_ids
from geneva_provider.core.functions.udf import META_COLUMN_UID
from geneva_provider.core.refs import TableRef

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


def incarnation_of(ds: Dataset, column: str) -> ColumnIncarnation | None:
    """``column``'s incarnation in ``ds`` (None when ``ds`` has no such column)."""
    if column not in ds.schema.names:
        return None
    arrow = ds.schema.field(column)
    uid = (arrow.metadata or {}).get(META_COLUMN_UID.encode(), b"").decode()
    return ColumnIncarnation(column=column, uid=uid, field_ids=column_leaf_ids(ds, column), type=str(arrow.type))


def incarnations(ds: Dataset, columns: Sequence[str]) -> list[ColumnIncarnation]:
    """The incarnations of ``columns`` (each in ``ds``) in ``ds``, in their order: what a plan records."""
    found = [incarnation_of(ds, c) for c in columns]
    missing = [c for c, i in zip(columns, found, strict=True) if i is None]
    if missing:
        raise LookupError(f"columns {missing} not found in {ds.uri} at version {ds.version}")
    return [i for i in found if i is not None]


def check_incarnations(ds: Dataset, columns: Sequence[str], output_field_ids: Sequence[int],
                       planned: Sequence[ColumnIncarnation], table: str, what: str) -> None:
    """Refuses a commit of ``what`` into ``columns`` unless each is, in ``ds``, the incarnation planned.

    ``planned`` empty (a plan of an earlier release): the columns' field ids must still be
    ``output_field_ids``.  Raises :class:`ColumnReplacedError` naming the table, the column and both
    incarnations (or that the column is gone).
    """
    as_planned = {was.column: was for was in planned}
    for column in as_planned or columns:
        now = incarnation_of(ds, column)
        if now is None:
            raise ColumnReplacedError(
                f"{what}: column '{column}' of table '{table}' is gone at version {ds.version} (dropped or "
                "renamed since the job was planned); nothing was committed")
        was = as_planned.get(column)
        if was is not None and now != was:
            raise ColumnReplacedError(
                f"{what}: column '{column}' of table '{table}' was dropped and re-created since the job was "
                f"planned: planned incarnation ({was.describe()}), now at version {ds.version} ({now.describe()}); "
                "nothing was committed into the new column: rerun the job, which plans the new column afresh")
    if not planned and [i for c in columns for i in column_leaf_ids(ds, c)] != list(output_field_ids):
        raise ColumnReplacedError(
            f"{what}: columns {list(columns)} of table '{table}' were dropped and re-created (other field ids) "
            "since the job was planned; nothing was committed: rerun the job for a new plan")


def check_planned_columns(job: JobPlan, storage_options: dict[str, str] | None, stage: str) -> None:
    """Refuses a ``stage`` of ``job`` (before it computes or writes anything) when an output column of its table is
    no longer the incarnation planned: :func:`check_incarnations` at the table's latest version."""
    if not job.incarnations:  # a plan of an earlier release records none: its commits compare field ids
        return
    latest = TableRef(job.table, job.table_uri, storage_options).dataset()
    check_incarnations(latest, [i.column for i in job.incarnations], job.output_field_ids, job.incarnations,
                       job.table, f"{stage} of job {job.job_id} ({job.label()})")
