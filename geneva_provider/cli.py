"""``geneva-provider``: the jobs and tables of a database from a shell -- list, show and cancel jobs, a table's
staleness, a search of a table (vector or full-text, through the read seam ``tbl.search`` uses), its indexes
(build, refresh, list), checkpoint clean-up and compaction, and ``serve``: the database over the Lance
Namespace REST protocol (:mod:`geneva_provider.serve`).

The database is ``--db URI`` (what ``geneva_provider.connect`` takes) or ``--conn-id ID`` (an Airflow ``lance``
connection, read through :class:`~geneva_provider.hooks.lance.LanceHook`; Airflow is imported only then, so the
tool runs without it); a local directory that does not exist is refused, not read as an empty database.  Output
is a text table for people, or JSON with ``--json`` for scripts.  The package's errors, and a bad command line,
are one line on stderr: exit code 2 for bad input (an unknown table, job or argument), 1 for a failure.
Storage options are never printed: they may hold credentials.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from geneva_provider.core.catalog import DIRECTORY
from geneva_provider.core.docstrings import plain_text
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
TOKEN_ENV = "GENEVA_SERVE_TOKEN"  # serve's bearer token, unless --token-conn-id
MAX_DAYS = 999_999_999  # the longest datetime.timedelta


def connection(args: argparse.Namespace) -> Connection:
    """The database named by ``--db`` or ``--conn-id``; a local directory that does not exist is refused.

    No command creates a table, so a directory that is not there is a typo, not an empty database: listing
    it would answer "no jobs" as if all were well.
    """
    db = _database(args)
    if db.catalog.impl == DIRECTORY and "://" not in db.uri and not os.path.isdir(db.uri):
        given = f"--db {args.db}" if args.conn_id is None else f"--conn-id {args.conn_id}"
        raise InvalidArgumentError(f"{given}: no such database directory ({db.uri} does not exist); check the path")
    return db


def _database(args: argparse.Namespace) -> Connection:


    if args.conn_id is not None:
        try:
            from geneva_provider.hooks.lance import LanceHook
        except ImportError as exc:
            raise InvalidArgumentError(f"--conn-id {args.conn_id}: Airflow is not installed here ({exc}); "
                                       "pass the database URI with --db") from None
        return LanceHook(args.conn_id).database
    import geneva_provider as gp

    return gp.connect(args.db)


def serve(db: Connection, args: argparse.Namespace) -> Any:
    """Serves the database until SIGTERM / SIGINT (:mod:`geneva_provider.serve`); the token is never printed."""
    try:
        from geneva_provider import serve as server
    except ImportError as exc:
        raise InvalidArgumentError(f"serve: FastAPI / uvicorn are not installed ({exc}); "
                                   "pip install 'airflow-provider-geneva[serve]'") from None
    token = None if args.no_auth else _serve_token(args)
    server.check_auth(args.host, token, not args.no_auth)
    options = db.storage_options or {}
    server.serve(server.namespace_for(db.uri, options), host=args.host, port=args.port, token=token,
                 auth=not args.no_auth, secrets=tuple(str(v) for v in options.values()))
    return "server stopped"


def _serve_token(args: argparse.Namespace) -> str | None:
    if args.token_conn_id is None:
        return os.environ.get(TOKEN_ENV) or None
    try:
        from geneva_provider.hooks.errors import airflow_connection
    except ImportError as exc:
        raise InvalidArgumentError(f"--token-conn-id {args.token_conn_id}: Airflow is not installed here ({exc}); "
                                   f"set {TOKEN_ENV} instead") from None
    return airflow_connection(args.token_conn_id, "--token-conn-id", "any type, the token as its password").password


def _job_rows(records: list[JobRecord]) -> str:
    return format_rows(
        ["job_id", "kind", "table", "column", "status", "stage", "rows committed", "rows planned", "created_at"],
        [[r.job_id, r.kind, r.table, r.column or "", r.status, r.stage, r.rows_committed, r.rows_planned,
          r.created_at[:19]] for r in records])


def _record(db: Connection, job_id: str) -> JobRecord:
    from geneva_provider.core.contracts.operations import GetJob
    from geneva_provider.operations import run

    return run(db, GetJob(job_id=job_id)).job


def jobs_list(db: Connection, args: argparse.Namespace) -> Any:
    from geneva_provider.core.contracts.operations import ListJobs, request
    from geneva_provider.operations import run

    records = run(db, request(ListJobs, id=[args.table] if args.table else None,
                              status=args.status.upper() if args.status else None)).jobs
    if args.json:
        return [r.model_dump(mode="json") for r in records]
    return _job_rows(records) if records else "no jobs"


def jobs_show(db: Connection, args: argparse.Namespace) -> Any:
    record = _record(db, args.job_id)
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
    from geneva_provider.core.contracts.operations import CancelJob
    from geneva_provider.operations import run

    run(db, CancelJob(job_id=args.job_id))
    record = _record(db, args.job_id)
    if args.wait:
        deadline = time.monotonic() + args.timeout
        while record.status in ("PENDING", "RUNNING") and time.monotonic() < deadline:
            time.sleep(WAIT_POLL_SECONDS)
            record = _record(db, args.job_id)
    if args.json:
        return record.model_dump(mode="json")
    if record.status in ("PENDING", "RUNNING"):
        return f"job {record.job_id}: cancel requested; still {record.status} (stage {record.stage})"
    return f"job {record.job_id}: cancel requested; it ended {record.status} ({record.error})"


def table_status(db: Connection, args: argparse.Namespace) -> Any:
    report = db.open_table(args.name).status()
    return report.model_dump(mode="json") if args.json else str(report)


def table_search(db: Connection, args: argparse.Namespace) -> Any:
    """The rows ``tbl.search(...)`` reads, built from the command line (the same builder, so the same checks)."""
    tbl = db.open_table(args.name)
    if args.vector is not None and args.text is not None:
        raise InvalidArgumentError("table search: give --vector or --text, not both")
    query: Any = None
    if args.vector is not None:
        try:
            query = json.loads(args.vector)
        except ValueError:
            raise InvalidArgumentError(f"table search: --vector must be a JSON list of numbers, got {args.vector!r}") \
                from None
    query = args.text if args.text is not None else query
    fts = args.fts_columns.split(",") if args.fts_columns else None
    search = tbl.search(query, vector_column_name=args.column, query_type="fts" if args.text is not None else "auto",
                        fts_columns=fts)
    if args.metric is not None:
        search = search.distance_type(args.metric)
    if args.where is not None:
        search = search.where(args.where, prefilter=not args.postfilter)
    if args.nprobes is not None:
        search = search.nprobes(args.nprobes)
    if args.refine_factor is not None:
        search = search.refine_factor(args.refine_factor)
    if args.fast_search:
        search = search.fast_search()
    if args.select:
        search = search.select(args.select.split(","))
    rows = search.offset(args.offset).limit(args.limit).to_arrow()
    if args.json:
        return rows.to_pylist()
    return format_rows(rows.column_names, [list(r.values()) for r in rows.to_pylist()])


def table_followers(db: Connection, args: argparse.Namespace) -> Any:
    """What a change of the table is followed by (the follower graph): each step, after the steps it waits for."""
    plan = db.followers(args.name)
    if args.json:
        return plan.model_dump(mode="json")
    labels = [f.step.label(args.name) for f in plan.followers]
    if not labels:
        return f"nothing follows a change of table {args.name}"
    return format_rows(["step", "kind", "after"], [[labels[i], f.step.kind, ", ".join(labels[j] for j in f.after)]
                                                   for i, f in enumerate(plan.followers)])


def cleanup(db: Connection, args: argparse.Namespace) -> Any:
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


def _index_runner(args: argparse.Namespace) -> Any:
    """``--in-process``: the index's segment tasks in this process; else a local Spark session (started only when
    there is something to build)."""
    if not args.in_process:
        return None
    from geneva_provider.stages import InProcessRunner

    return InProcessRunner()


def table_create_index(db: Connection, args: argparse.Namespace) -> Any:
    """An index build as ``tbl.create_index`` runs it (the same checks, the same job), through the front door."""
    from geneva_provider.core.contracts.operations import CreateIndex, request
    from geneva_provider.operations import run

    options = {"target_groups": args.target_groups} if args.target_groups is not None else {}
    build = request(CreateIndex, id=[args.name], column=args.column, index_type=args.index_type,
                    distance_type=args.metric, num_partitions=args.num_partitions,
                    num_sub_vectors=args.num_sub_vectors, num_bits=args.num_bits, name=args.index_name,
                    replace=not args.no_replace)
    result = run(db, build, spark=_index_runner(args), options=options)
    return result.model_dump(mode="json") if args.json else f"table {args.name}: {result.describe()}"


def table_refresh_index(db: Connection, args: argparse.Namespace) -> Any:
    result = db.open_table(args.name).refresh_index(args.index, retrain=args.retrain, spark=_index_runner(args))
    return result.model_dump(mode="json") if args.json else f"table {args.name}: {result.describe()}"


def table_indices(db: Connection, args: argparse.Namespace) -> Any:
    """Every index of the table with what it covers."""
    from geneva_provider.core.contracts.operations import ListIndices
    from geneva_provider.operations import run

    stats = run(db, ListIndices(id=[args.name])).indexes
    if args.json:
        return [s.model_dump(mode="json") for s in stats]
    if not stats:
        return f"table {args.name} has no index"
    return format_rows(["index", "type", "columns", "indexed", "unindexed", "segments", "partitions"],
                       [[s.name, s.index_type, ",".join(s.columns), s.num_indexed_rows, s.num_unindexed_rows,
                         s.num_segments, s.num_partitions] for s in stats])


def number(unit: str, most: float) -> Callable[[str], float]:
    """An argparse type: a finite number of ``unit`` from 0 to ``most``, else a usage error naming the value."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 <= value <= most):
            bounds = "0 or more" if math.isinf(most) else f"from 0 to {most:.0f}"
            raise argparse.ArgumentTypeError(f"must be a finite number of {unit} {bounds}, got {text!r}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line said on one line as the package's errors are (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="geneva-provider", description=plain_text(__doc__),
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    where = top.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="the database URI (a directory or an object-store prefix)")
    where.add_argument("--conn-id", help="an Airflow 'lance' connection id (needs Airflow)")
    top.add_argument("--json", action="store_true", help="print JSON for scripts")
    groups = top.add_subparsers(dest="group", required=True)

    jobs = groups.add_parser("jobs", help="backfill, refresh, compaction and index jobs").add_subparsers(
        dest="action", required=True)
    listing = jobs.add_parser("list", help="the jobs, newest first")
    listing.add_argument("--table", help="only this table's jobs")
    listing.add_argument("--status", help="PENDING, RUNNING, DONE, FAILED, CANCELLED or ABANDONED")
    listing.set_defaults(run=jobs_list)
    show = jobs.add_parser("show", help="a job's record and the first rows its UDF failed on")
    show.add_argument("job_id")
    show.set_defaults(run=jobs_show)
    cancel = jobs.add_parser("cancel", help="ask a running job to stop")
    cancel.add_argument("job_id")
    cancel.add_argument("--wait", action="store_true", help="wait until the job has ended")
    cancel.add_argument("--timeout", type=number("seconds", math.inf), default=300.0,
                        help="seconds --wait waits at most (300)")
    cancel.set_defaults(run=jobs_cancel)

    table = groups.add_parser("table", help="tables").add_subparsers(dest="action", required=True)
    status = table.add_parser("status", help="UDF columns' rows valid / stale / missing; a view's lag; indexes")
    status.add_argument("name")
    status.set_defaults(run=table_status)
    search = table.add_parser("search", help="a table's rows nearest a vector, matching a text, or filtered")
    search.add_argument("name")
    search.add_argument("--vector", help="a vector search: the query vector as a JSON list, e.g. '[0.1, 0.2]'")
    search.add_argument("--text", help="a full-text search over an FTS (INVERTED) index")
    search.add_argument("--column", help="the vector column (default: the table's one vector column)")
    search.add_argument("--fts-columns", help="the full-text columns, comma-separated (default: every indexed one)")
    search.add_argument("--where", help="a SQL filter, applied before the search unless --postfilter")
    search.add_argument("--postfilter", action="store_true", help="filter the nearest rows after the search")
    search.add_argument("--select", help="the columns to print, comma-separated (default: all)")
    search.add_argument("--limit", type=int, help="rows to read (a search: 10; a plain read: all)")
    search.add_argument("--offset", type=int, help="rows to skip first")
    search.add_argument("--metric", help="l2 (default), cosine, dot or hamming")
    search.add_argument("--nprobes", type=int, help="IVF partitions a search through an index probes")
    search.add_argument("--refine-factor", type=int, help="re-rank refine_factor * limit candidates exactly")
    search.add_argument("--fast-search", action="store_true", help="only rows the index covers")
    search.set_defaults(run=table_search)
    follows = table.add_parser("followers", help="what a change of the table is followed by (table_change_dag's steps)")
    follows.add_argument("name")
    follows.set_defaults(run=table_followers)
    create = table.add_parser("create-index", help="build an index (vector, scalar or full-text) as one job")
    create.add_argument("name")
    create.add_argument("--column", help="the column to index (default: the table's one vector column)")
    create.add_argument("--index-type", default="IVF_PQ",
                        help="IVF_PQ (default), IVF_FLAT, IVF_SQ, IVF_HNSW_SQ, IVF_HNSW_PQ, BTREE, BITMAP, "
                             "LABEL_LIST or FTS")
    create.add_argument("--metric", default="l2", help="l2 (default), cosine or dot")
    create.add_argument("--num-partitions", type=int, help="IVF partitions (default: the square root of the rows)")
    create.add_argument("--num-sub-vectors", type=int, help="PQ sub-vectors (default: the dimension / 16)")
    create.add_argument("--num-bits", type=int, default=8, help="bits per PQ code: 4 or 8 (8)")
    create.add_argument("--index-name", help="the index's name (default: <column>_idx)")
    create.add_argument("--no-replace", action="store_true", help="refuse to replace an index of the same name")
    create.add_argument("--target-groups", type=int, help="segment tasks (default: the session's parallelism)")
    create.add_argument("--in-process", action="store_true",
                        help="build the segments in this process instead of a local Spark session")
    create.set_defaults(run=table_create_index)
    refresh = table.add_parser("refresh-index", help="index the fragments an index does not cover (add-only)")
    refresh.add_argument("name")
    refresh.add_argument("index", help="the index's name")
    refresh.add_argument("--retrain", action="store_true", help="train anew and build every segment again")
    refresh.add_argument("--in-process", action="store_true",
                         help="build the segments in this process instead of a local Spark session")
    refresh.set_defaults(run=table_refresh_index)
    indices = table.add_parser("indices", help="a table's indexes: rows indexed / unindexed, segments, partitions")
    indices.add_argument("name")
    indices.set_defaults(run=table_indices)

    clean = groups.add_parser("cleanup", help="remove checkpoints no job can use (every table, or one)")
    clean.add_argument("--table", help="only this table")
    clean.add_argument("--older-than-days", type=number("days", MAX_DAYS), default=7.0,
                       help="remove finished jobs' plans older than this (7)")
    clean.set_defaults(run=cleanup)

    comp = groups.add_parser("compact", help="rewrite a table's small fragments into bigger ones")
    comp.add_argument("table")
    comp.add_argument("--target-rows-per-fragment", type=int)
    comp.add_argument("--in-process", action="store_true",
                      help="run the rewrites in this process instead of a local Spark session")
    comp.set_defaults(run=compact)

    srv = groups.add_parser("serve", help="serve the database over the Lance Namespace REST protocol (until SIGTERM)")
    srv.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    srv.add_argument("--port", type=int, default=2333, help="the port (2333)")
    srv.add_argument("--token-conn-id", help=f"an Airflow connection whose password is the bearer token "
                                             f"(default: the environment variable {TOKEN_ENV})")
    srv.add_argument("--no-auth", action="store_true", help="no token (only with a loopback --host)")
    srv.set_defaults(run=serve)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns the exit code (0, 1 for a failure, 2 for bad input)."""
    args = parser().parse_args(argv)  # exits 2 on a bad command line, as argparse does
    run: Callable[[Connection, argparse.Namespace], Any] = args.run
    db: Connection | None = None
    try:
        db = connection(args)
        out = run(db, args)
    except BAD_INPUT as exc:
        _error(exc)
        return 2
    except GenevaError as exc:
        _error(exc)
        return 1
    except Exception as exc:  # noqa: BLE001 - Lance's or the file system's (a table half-made): one line as well
        _error(exc, hide=list((db.storage_options or {}).values()) if db is not None else [])
        return 1
    print(json.dumps(out, indent=2, default=str) if args.json else out)
    return 0


def _error(exc: BaseException, hide: Sequence[str] = ()) -> None:
    """The error as one line (its message names what is at fault; the package's messages carry no secrets, and
    another library's is cut short, without Rust source paths, and any storage option value in it masked)."""
    from geneva_provider.core.filters import lance_reason

    message = " ".join(str(exc).split()) if isinstance(exc, GenevaError) else " ".join(lance_reason(exc, 300).split())
    for value in hide:
        if len(value) >= 4:
            message = message.replace(value, "***")
    print(f"geneva-provider: {type(exc).__name__}: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
