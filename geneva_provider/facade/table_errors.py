"""Retrying failed rows: finding them again (swapping in a fixed UDF is a schema change, in the pipeline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geneva_provider.core.errors import InvalidArgumentError


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
