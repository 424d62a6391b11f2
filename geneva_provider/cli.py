"""``geneva-provider``: the jobs and tables of a database from a shell -- list, show and cancel jobs, a table's
staleness, checkpoint clean-up and compaction.

The database is ``--db URI`` (what ``geneva_provider.connect`` takes) or ``--conn-id ID`` (an Airflow ``lance``
connection, read through :class:`~geneva_provider.hooks.lance.LanceHook`; Airflow is imported only then, so the
tool runs without it).  Output is a text table for people, or JSON with ``--json`` for scripts.  The package's
errors are one line on stderr: exit code 2 for bad input (an unknown table, job or argument), 1 for a failure.
Storage options are never printed: they may hold credentials.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import (
    ColumnError,
    GenevaError,
    InvalidArgumentError,
    JobNotFoundError,
    TableNotFoundError,
)
from geneva_provider.core.table_status import format_rows

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import JobRecord
    from geneva_provider.facade.connection import Connection

BAD_INPUT = (InvalidArgumentError, TableNotFoundError, ColumnError, JobNotFoundError)
ERROR_ROWS = 5  # rows of the error store `jobs show` prints
WAIT_POLL_SECONDS = 0.5


def connection(args: argparse.Namespace) -> Connection:
    """The database named by ``--db`` or ``--conn-id``."""
    if args.conn_id is not None:
        try:
            from geneva_provider.hooks.lance import LanceHook
        except ImportError as exc:
            raise InvalidArgumentError(f"--conn-id {args.conn_id}: Airflow is not installed here ({exc}); "
                                       "pass the database URI with --db") from None
        return LanceHook(args.conn_id).database
    import geneva_provider as gp

    return gp.connect(args.db)


def _job_rows(records: list[JobRecord]) -> str:
    return format_rows(
        ["job_id", "kind", "table", "column", "status", "stage", "rows committed", "rows planned", "created_at"],
        [[r.job_id, r.kind, r.table, r.column or "", r.status, r.stage, r.rows_committed, r.rows_planned,
          r.created_at[:19]] for r in records])


def jobs_list(db: Connection, args: argparse.Namespace) -> Any:
    records = db.list_jobs(args.table, status=args.status.upper() if args.status else None)
    if args.json:
        return [r.model_dump(mode="json") for r in records]
    return _job_rows(records) if records else "no jobs"


def jobs_show(db: Connection, args: argparse.Namespace) -> Any:
    record = db.get_job(args.job_id)
    errors = _error_rows(db, record)
    if args.json:
        return {"job": record.model_dump(mode="json"), "errors": errors}
    fields = record.model_dump(mode="json", exclude_none=True)
    width = max(len(k) for k in fields)
    lines = [f"{k.ljust(width)}  {v}" for k, v in fields.items()]
    if errors:
        lines += ["", f"first {len(errors)} failed rows (Table.get_errors):",
                  format_rows(["column", "fragment", "row_address", "outcome", "error"],
                              [[e["column"], e["fragment"], e["row_address"], e["outcome"],
                                f"{e['error_type']}: {e['message']}"[:100]] for e in errors])]
    return "\n".join(lines)


def _error_rows(db: Connection, record: JobRecord) -> list[dict[str, Any]]:
    """The first rows the job's UDFs failed on (its table's error store); none when the table is gone."""
    try:
        errors = db.open_table(record.table).get_errors(record.job_id)
    except TableNotFoundError:
        return []
    keep = ["column", "fragment", "row_address", "error_type", "message", "attempt", "outcome"]
    return errors.select(keep).slice(0, ERROR_ROWS).to_pylist()


def jobs_cancel(db: Connection, args: argparse.Namespace) -> Any:
    db.cancel_job(args.job_id)
    record = db.get_job(args.job_id)
    if args.wait:
        deadline = time.monotonic() + args.timeout
        while record.status in ("PENDING", "RUNNING") and time.monotonic() < deadline:
            time.sleep(WAIT_POLL_SECONDS)
            record = db.get_job(args.job_id)
    if args.json:
        return record.model_dump(mode="json")
    if record.status in ("PENDING", "RUNNING"):
        return f"job {record.job_id}: cancel requested; still {record.status} (stage {record.stage})"
    return f"job {record.job_id}: cancel requested; it ended {record.status} ({record.error})"


def table_status(db: Connection, args: argparse.Namespace) -> Any:
    report = db.open_table(args.name).status()
    return report.model_dump(mode="json") if args.json else str(report)


def cleanup(db: Connection, args: argparse.Namespace) -> Any:
    if args.older_than_days < 0:
        raise InvalidArgumentError(f"cleanup: --older-than-days must not be negative, got {args.older_than_days}")
    names = [args.table] if args.table else db.table_names()
    older_than = dt.timedelta(days=args.older_than_days)
    results = {name: db.open_table(name).cleanup_checkpoints(older_than) for name in names}
    if args.json:
        return {name: {"removed": r.removed, "kept_for_live_jobs": r.kept_for_live_jobs} for name, r in results.items()}
    return format_rows(["table", "removed", "kept for live jobs"],
                       [[name, r.total, r.kept_for_live_jobs] for name, r in results.items()])


def compact(db: Connection, args: argparse.Namespace) -> Any:
    spark = None
    if args.in_process:
        from geneva_provider.stages import InProcessRunner

        spark = InProcessRunner()
    result = db.open_table(args.table).compact(args.target_rows_per_fragment, spark=spark)
    if args.json:
        return result.model_dump(mode="json")
    return f"table {args.table}: {result.describe()}"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="geneva-provider", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    where = top.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="the database URI (a directory or an object-store prefix)")
    where.add_argument("--conn-id", help="an Airflow 'lance' connection id (needs Airflow)")
    top.add_argument("--json", action="store_true", help="print JSON for scripts")
    groups = top.add_subparsers(dest="group", required=True)

    jobs = groups.add_parser("jobs", help="backfill, refresh and compaction jobs").add_subparsers(
        dest="action", required=True)
    listing = jobs.add_parser("list", help="the jobs, newest first")
    listing.add_argument("--table", help="only this table's jobs")
    listing.add_argument("--status", help="PENDING, RUNNING, DONE, FAILED or ABANDONED")
    listing.set_defaults(run=jobs_list)
    show = jobs.add_parser("show", help="a job's record and the first rows its UDF failed on")
    show.add_argument("job_id")
    show.set_defaults(run=jobs_show)
    cancel = jobs.add_parser("cancel", help="ask a running job to stop")
    cancel.add_argument("job_id")
    cancel.add_argument("--wait", action="store_true", help="wait until the job has ended")
    cancel.add_argument("--timeout", type=float, default=300.0, help="seconds --wait waits at most (300)")
    cancel.set_defaults(run=jobs_cancel)

    table = groups.add_parser("table", help="tables").add_subparsers(dest="action", required=True)
    status = table.add_parser("status", help="UDF columns' rows valid / stale / missing; a view's lag")
    status.add_argument("name")
    status.set_defaults(run=table_status)

    clean = groups.add_parser("cleanup", help="remove checkpoints no job can use (every table, or one)")
    clean.add_argument("--table", help="only this table")
    clean.add_argument("--older-than-days", type=float, default=7.0,
                       help="remove finished jobs' plans older than this (7)")
    clean.set_defaults(run=cleanup)

    comp = groups.add_parser("compact", help="rewrite a table's small fragments into bigger ones")
    comp.add_argument("table")
    comp.add_argument("--target-rows-per-fragment", type=int)
    comp.add_argument("--in-process", action="store_true",
                      help="run the rewrites in this process instead of a local Spark session")
    comp.set_defaults(run=compact)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns the exit code (0, 1 for a failure, 2 for bad input)."""
    args = parser().parse_args(argv)  # exits 2 on a bad command line, as argparse does
    run: Callable[[Connection, argparse.Namespace], Any] = args.run
    try:
        out = run(connection(args), args)
    except BAD_INPUT as exc:
        _error(exc)
        return 2
    except GenevaError as exc:
        _error(exc)
        return 1
    print(json.dumps(out, indent=2, default=str) if args.json else out)
    return 0


def _error(exc: BaseException) -> None:
    """The error as one line (its message names what is at fault; the package's messages carry no secrets)."""
    message = " ".join(str(exc).split())
    print(f"geneva-provider: {type(exc).__name__}: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
