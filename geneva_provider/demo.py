"""The README demo.

``python -m geneva_provider.demo dags`` runs the example DAGs with ``airflow dags test`` (set up by
``make demo``: Airflow on SQLite, tables in ``.demo/lake``, Spark from the ``spark_default``
connection): ingest, backfill, a no-op backfill, more ingest, an incremental backfill -- then prints
the table, with the seconds of every step and of every task.  When ``spark_default`` is a
``spark_connect`` connection to 127.0.0.1 (as ``make demo`` sets it), the demo starts the local
Spark Connect server first and stops it at the end (it stops with the server's error, before any
DAG runs, when another process holds the port); a ``spark`` connection runs the stages with
spark-submit instead.

``python -m geneva_provider.demo notebook`` does the same work from Python, without Airflow, on the table
``events`` of ``--db``: it replaces that table (and its checkpoints), and leaves every other table of the
database as it is.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import time
from pathlib import Path

import geneva_provider as gp
from geneva_provider.core.docstrings import plain_text
from geneva_provider.core.wording import counted
from geneva_provider.examples import embed, sample, word_count
from geneva_provider.stages import local_session

DEMO_TABLE = "events"


def run_notebook(args: argparse.Namespace) -> None:
    """The whole flow in-process through the core API."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    db = gp.connect(args.db)
    if DEMO_TABLE in db.table_names():  # the demo's own table only: other tables of the database stay
        db.drop_table(DEMO_TABLE)
    tbl = db.create_table(DEMO_TABLE, sample(args.rows), max_rows_per_file=max(args.rows // 8, 1))
    tbl.add_columns({"words": word_count, "embedding": embed})
    fragments = counted(len(tbl.dataset().get_fragments()), "fragment")
    print(f"table {tbl.uri}: {counted(tbl.count_rows(), 'row')} in {fragments}")

    t = time.perf_counter()
    spark = local_session("local[*]", app_name="geneva-demo", conf={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - t
    rows = []
    try:
        for column in ("words", "embedding"):
            res = tbl.backfill(column, spark=spark)
            rows.append(("first backfill", column, res))
        appended = max(args.rows // 10, 1)
        tbl.add(sample(appended, start=args.rows))
        for column in ("words", "embedding"):
            res = tbl.backfill(column, spark=spark)
            rows.append((f"after appending {appended} rows", column, res))
    finally:
        spark.stop()

    print(f"\nSpark session start: {session_s:.1f}s")
    print(f"{'run':<28} {'column':<10} {'computed':>9} {'reused':>9} {'fragments':>9} {'version':>7} {'seconds':>8}")
    for label, column, res in rows:
        print(f"{label:<28} {column:<10} {res.rows_computed:>9} {res.rows_reused:>9} "
              f"{res.fragments_committed:>9} {res.version:>7} {res.seconds.get('total', 0):>8.2f}")
    print("\nfirst rows:")
    print(tbl.to_arrow(["id", "text", "words", "embedding"]).slice(0, 5).to_pandas().to_string(index=False))
    tbl.dataset().validate()
    missing = tbl.count_rows("words IS NULL OR embedding IS NULL")
    print(f"\n{tbl.count_rows()} rows, {missing} without values; table validated")


def run_dags(args: argparse.Namespace) -> None:
    """The example DAGs through the Airflow CLI, as a user would run them (on the local Connect server if asked)."""
    spark_conn = json.loads(os.environ.get("AIRFLOW_CONN_SPARK_DEFAULT") or "{}")
    if spark_conn.get("conn_type") != "spark_connect":
        print(f"Spark stages run with spark-submit on {spark_conn.get('host', 'the spark_default connection')}")
        _run_dag_steps(args)
        return
    from geneva_provider.connect_server import ConnectServerError, LocalConnectServer, PortTakenError

    server = LocalConnectServer(int(spark_conn.get("port") or 15002), directory=".demo/connect")
    t0 = time.perf_counter()
    try:
        # The demo's own server, or none: start() refuses a port another process (another Connect server) holds.
        server.start()
    except PortTakenError as exc:  # the demo's port is SPARK_CONN's (the Makefile's knob), not a --port
        raise SystemExit(f"demo: {exc.held}: stop it, or run the demo on another port, e.g. "
                         f"{_demo_command(spark_conn, exc.port)}") from None
    except ConnectServerError as exc:
        raise SystemExit(f"demo: {exc}") from None
    with server:  # stops the server at the end only if it started it here
        print(f"Spark stages run over Spark Connect: local server {server.url} ready in "
              f"{time.perf_counter() - t0:.1f}s (log {server.log_path})")
        _run_dag_steps(args)
    if server.started_here:
        print("local Spark Connect server stopped")


def _demo_command(spark_conn: dict[str, object], taken: int) -> str:
    """``make demo`` with ``spark_conn`` on a port free now (after ``taken``), as the Makefile's SPARK_CONN takes it."""
    from geneva_provider.connect_server import free_port_from

    port = free_port_from(taken + 1) or taken + 1
    return f"make demo SPARK_CONN='{json.dumps({**spark_conn, 'port': port})}'"


_DAG_TEST_TASK = re.compile(r"^(\S+) .*\[DAG TEST\] (starting|end task) task_id=(\S+)")
_TASK_STARTED = re.compile(r"^(\S+) .*\] Task started .*previous_state=queued")


def _task_seconds(log: str) -> dict[str, float]:
    """Seconds per task of an ``airflow dags test`` run: from the task's start to its "[DAG TEST] end task".

    A task starts when its runner reports it started ("Task started", from Airflow's execution
    API), not at "[DAG TEST] starting": before the first task, that span also holds Airflow's own
    start-up (its in-process execution API), which is no task's work.
    """
    from datetime import datetime

    started: dict[str, datetime] = {}
    seconds: dict[str, float] = {}
    current: str | None = None  # dags test runs one task at a time
    for line in log.splitlines():
        if (m := _TASK_STARTED.match(line)) and current is not None:
            started[current] = datetime.fromisoformat(m[1].replace("Z", "+00:00"))
            continue
        m = _DAG_TEST_TASK.match(line)
        if not m:
            continue
        at = datetime.fromisoformat(m[1].replace("Z", "+00:00"))
        if m[2] == "starting":
            current = m[3]
            started[current] = at
        elif m[3] in started:
            seconds[m[3]] = (at - started[m[3]]).total_seconds()
            current = None
    return seconds


def _run_dag_steps(args: argparse.Namespace) -> None:
    logs = Path(".demo/logs")
    logs.mkdir(parents=True, exist_ok=True)
    runs = [
        ("geneva_ingest_events", {"rows": args.rows}, "ingest"),
        ("geneva_backfill_after_ingest", None, "backfill (first run)"),
        ("geneva_backfill_after_ingest", None, "backfill (no new data)"),
        ("geneva_ingest_events", {"rows": max(args.rows // 10, 1)}, "ingest more"),
        ("geneva_backfill_after_ingest", None, "backfill (incremental)"),
    ]
    print(f"{'step':<26} {'DAG':<30} {'result':<8} {'seconds':>8}   seconds per task")
    for i, (dag_id, conf, label) in enumerate(runs):
        cmd = ["airflow", "dags", "test", dag_id]
        if conf:
            cmd += ["-c", json.dumps(conf)]
        log = logs / f"{i}-{dag_id}.log"
        t0 = time.perf_counter()
        with open(log, "w") as out:
            code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=os.environ)
        text = log.read_text()
        ok = code == 0 and re.search(r"DagRun Finished: .*state=success", text) is not None
        tasks = "  ".join(f"{task.rsplit('.', 1)[-1]} {sec:.1f}" for task, sec in _task_seconds(text).items())
        print(f"{label:<26} {dag_id:<30} {'ok' if ok else 'FAILED':<8} {time.perf_counter() - t0:>8.1f}   {tasks}")
        if not ok:
            raise SystemExit(f"{dag_id} failed; see {log}")
    lake = json.loads(os.environ["AIRFLOW_CONN_LANCE_DEFAULT"])["host"]
    tbl = gp.connect(lake).open_table("events")
    fragments = counted(len(tbl.dataset().get_fragments()), "fragment")
    print(f"\ntable {tbl.uri}: {counted(tbl.count_rows(), 'row')}, {fragments}, "
          f"version {tbl.version}; rows without 'words': {tbl.count_rows('words IS NULL')}")
    print(tbl.to_arrow(["id", "text", "words"]).slice(0, 5).to_pandas().to_string(index=False))
    print(f"\nDAG run logs: {logs}/")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m geneva_provider.demo", description=plain_text(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["dags", "notebook"])
    parser.add_argument("--db", default=".demo/lake",
                        help="database directory of the notebook mode (its table 'events' is replaced)")
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args(argv)
    (run_dags if args.mode == "dags" else run_notebook)(args)


if __name__ == "__main__":
    main()
