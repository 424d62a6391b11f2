"""The error store: a Lance table of the rows UDFs failed on, kept beside each table (core).

Each apply stage appends the rows its tasks reported (:class:`~geneva_provider.core.contracts.models.RowError`)
with the job, table and column, so a failure is explained by data a user can query long after the
Spark logs are gone.  It lives at ``<table>.lance/_errors`` -- a Lance table of its own, dropped
with its table and readable with ``lance.dataset`` from anywhere.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.contracts.models import RowError

ERRORS_DIR = "_errors"
FAILED = tuple(o.value for o in RowOutcome if o.leaves_row_empty)  # outcomes that leave a row without its value


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("job_id", pa.string()), ("table", pa.string()), ("column", pa.string()), ("fragment", pa.int64()),
        ("row_address", pa.uint64()), ("error_type", pa.string()), ("message", pa.string()),
        ("traceback", pa.string()), ("attempt", pa.int32()), ("outcome", pa.string()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
    ])


class ErrorStore:
    """Appends and reads the failed rows of one table's jobs."""

    def __init__(self, table_uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = f"{table_uri.rstrip('/')}/{ERRORS_DIR}"
        self.storage_options = storage_options

    def append(self, job_id: str, table: str, errors: list[RowError]) -> None:
        """Records ``errors`` of job ``job_id`` (one append commit; concurrent appends do not conflict)."""
        if not errors:
            return
        import lance
        import pyarrow as pa

        now = dt.datetime.now(dt.UTC)
        rows = pa.Table.from_pylist([{
            "job_id": job_id, "table": table, "column": e.column, "fragment": e.frag, "row_address": e.row_address,
            "error_type": e.error_type, "message": e.message, "traceback": e.traceback, "attempt": e.attempts,
            "outcome": e.outcome, "recorded_at": now} for e in errors], schema=_schema())
        mode = "append" if self._exists() else "create"
        try:
            lance.write_dataset(rows, self.uri, mode=mode, storage_options=self.storage_options)
        except (OSError, ValueError):  # another job created it first
            lance.write_dataset(rows, self.uri, mode="append", storage_options=self.storage_options)

    def read(self, job_id: str | None = None, column: str | None = None, filter: str | None = None) -> Any:
        """The recorded errors as an Arrow table, newest job first (empty when there are none)."""
        import lance

        if not self._exists():
            return _schema().empty_table()
        clauses = [f"job_id = {_quote(job_id)}"] if job_id else []
        if column:
            clauses.append(f"`column` = {_quote(column)}")
        if filter:
            clauses.append(f"({filter})")
        table = lance.dataset(self.uri, storage_options=self.storage_options).to_table(
            filter=" AND ".join(clauses) or None)
        return table.sort_by([("recorded_at", "descending"), ("row_address", "ascending")])

    def failed_row_addresses(self, job_id: str | None, column: str | None) -> list[int]:
        """Row addresses left without a value (skipped or failed) by ``job_id`` (every job: None)."""
        return sorted({a for addrs in self.failed_rows_by_job(job_id, column).values() for a in addrs})

    def failed_rows_by_job(self, job_id: str | None, column: str | None) -> dict[str, list[int]]:
        """The row addresses each job left without a value -- addresses at the version that job read."""
        outcomes = ", ".join(_quote(o) for o in FAILED)
        table = self.read(job_id, column, f"outcome IN ({outcomes}) AND row_address IS NOT NULL")
        by_job: dict[str, set[int]] = {}
        for job, addr in zip(table.column("job_id").to_pylist(), table.column("row_address").to_pylist(), strict=True):
            by_job.setdefault(job, set()).add(int(addr))
        return {job: sorted(addrs) for job, addrs in by_job.items()}

    def _exists(self) -> bool:
        import lance

        try:
            lance.dataset(self.uri, storage_options=self.storage_options)
        except (ValueError, OSError):
            return False
        return True


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
