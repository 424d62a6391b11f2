"""Watch latency: from an outside commit to its backfilled rows being readable, a watcher DAG beside a 1-minute cron.

Why this exists: issue 31 replaces "run the backfill DAG every minute" with a DAG that a table watcher starts
(``table_change_dag``: ``lance_table_asset`` polled by the triggerer).  The figure a user cares about is how
long after their write the new rows have their UDF values, for each of the two set-ups, on one deployment.

One real Airflow deployment on 127.0.0.1 -- scheduler, dag-processor, triggerer, api-server (the tasks'
Execution API) on SQLite with the LocalExecutor, the Spark stages on a local Spark Connect server
(``local[2]``) -- started with tests/system/test_scheduler.py's ``AirflowStack`` (so run this from the repo
root), and two tables of the same shape, both with the UDF column ``y = 3 * x`` (``auto_backfill=True``):

* ``watched``, followed by ``table_change_dag("watched", poll_interval=2.0)``;
* ``cron``, backfilled by ``backfill_task_group`` in a DAG on ``schedule="* * * * *"`` (``max_active_runs=1``).

Each round a plain Python process (outside Airflow) appends ``--rows`` new rows to both tables, one right after
the other, and prints when each commit returned; this process then polls both tables (every 0.25 s) until
every new row's ``y`` is readable and right, and reports the seconds from each table's commit to that moment.
Where in the cron's minute the write lands decides the cron's figure, so the rounds' writes are spread evenly
over the minute: round i of n writes at the second ``60 * (i - 1) / n`` of a minute of the wall clock (rounds
started as soon as the one before ended would all land just after a cron run, and measure its worst case).
A warm-up round (not counted) comes first: the first Spark stages of a fresh
server are slower than the rest.  Prints each round's figures, then the median and p90 of each side, and how
many cores other processes used meanwhile (``machine_load.py``; the deployment is this process's tree).

Run ``.venv/bin/python benchmarks/watch_latency_bench.py`` from the repo root (``--rounds 10``, ``--rows 1000``;
``--keep`` keeps the temp dir with the Airflow home, the component and task logs).  Everything it starts is
stopped, whatever happens, and the temp dir removed.  This prints figures; it is not a test and asserts nothing
beyond the correctness of the values read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from machine_load import LoadMeter  # beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.system.test_scheduler: the deployment the system tests start

import geneva_provider as gp  # noqa: E402
from tests.system.test_scheduler import AirflowStack  # noqa: E402

WATCHED, CRON = "watched", "cron"
POLL = 0.25  # seconds between two looks at the tables
ROUND_TIMEOUT = 600.0
DAG_FILE = """
\"\"\"The benchmark's two Airflow DAGs (the words "airflow" and "dag" make the dag-processor parse this file).\"\"\"
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group, table_change_dag

watcher = table_change_dag("watched", poll_interval=2.0, retries=0)

with DAG(dag_id="geneva_cron_backfill", schedule="* * * * *", start_date=datetime(2026, 1, 1), catchup=False,
         max_active_runs=1) as cron:
    backfill_task_group("backfill_y", "cron", "y", retries=0)
"""
WRITER = """
import json, sys, time
import pyarrow as pa
import geneva_provider as gp

lake, start, rows, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
db = gp.connect(lake)
tables = [db.open_table(name) for name in ("watched", "cron")]
batch = pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                  "x": pa.array(range(start, start + rows), pa.int64())})
time.sleep(max(at - time.time(), 0.0))  # the wall-clock time the round writes at
committed = {}
for table in tables:
    table.add(batch)
    committed[table.name] = time.time()
print(json.dumps(committed))
"""


def tripled() -> gp.UDF:
    """y = 3 * x, recomputed by the watcher (``auto_backfill``); defined in a function, so pickled by value."""

    @gp.udf(data_type=pa.int64(), name="triple", auto_backfill=True)
    def triple(x: int) -> int:
        return 3 * x

    return triple


def make_tables(lake: Path, rows: int) -> None:
    db = gp.connect(str(lake))
    xs = pa.array(range(rows), pa.int64())
    for name in (WATCHED, CRON):
        table = db.create_table(name, pa.table({"id": xs, "x": xs}))
        table.add_columns({"y": tripled()})


def done_rows(lake: Path, name: str, upto: int) -> bool:
    """Every row up to ``upto`` is in the table and has its y (= 3x)."""
    table = gp.connect(str(lake)).open_table(name)
    if table.count_rows() < upto or table.count_rows("y IS NULL") > 0:
        return False
    got = table.to_arrow(["x", "y"]).to_pydict()
    wrong = [(x, y) for x, y in zip(got["x"], got["y"], strict=True) if y != 3 * x]
    assert not wrong and sorted(got["x"]) == list(range(upto)), f"{name}: wrong values {wrong[:5]}"
    return True


def one_round(stack: AirflowStack, start: int, rows: int, second: float | None = None) -> dict[str, float]:
    """Appends rows [start, start + rows) to both tables from a plain Python process (at ``second`` of a minute
    of the wall clock, 5 s from now at the earliest; None: at once); the seconds from each table's commit until
    its new rows' values are readable, and the second of the minute of the first commit."""
    at = time.time() if second is None else time.time() + 5.0 + (second - time.time() - 5.0) % 60.0
    out = subprocess.run([sys.executable, "-c", WRITER, str(stack.lake), str(start), str(rows), str(at)],
                         check=True, capture_output=True, text=True, timeout=180)
    committed: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    readable: dict[str, float] = {}
    deadline = time.monotonic() + ROUND_TIMEOUT
    while len(readable) < 2:
        for name in (WATCHED, CRON):
            if name not in readable and done_rows(stack.lake, name, start + rows):
                readable[name] = time.time()
        dead = {n: p.returncode for n, p in stack.procs.items() if p.poll() is not None}
        assert not dead and time.monotonic() < deadline, stack.report(
            f"round from row {start}: components exited {dead} or still waiting after {ROUND_TIMEOUT:.0f}s "
            f"(readable: {sorted(readable)})")
        time.sleep(POLL)
    return {**{name: readable[name] - committed[name] for name in (WATCHED, CRON)},
            "second": committed[WATCHED] % 60.0}


def p90(values: list[float]) -> float:
    """The nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]


def start_deployment(root: Path) -> tuple[AirflowStack, Any]:
    """The deployment of test_scheduler.py with only this benchmark's DAGs and a lance connection to ``lake``."""
    from geneva_provider.connect_server import LocalConnectServer

    spark_server = LocalConnectServer(0, master="local[2]", directory=root / "spark-connect")
    stack = AirflowStack(root / "airflow", spark_server)
    for copied in stack.dags.iterdir():  # the system tests' DAGs are not this benchmark's
        copied.unlink()
    stack.env["AIRFLOW_CONN_LANCE_DEFAULT"] = json.dumps({"conn_type": "lance", "host": str(stack.lake)})
    return stack, spark_server


def wait_ready(stack: AirflowStack) -> None:
    """Every component healthy, both DAGs parsed and unpaused, the watcher's first look taken."""

    def healthy() -> bool | None:
        response = stack.client.get("/api/v2/monitor/health")
        return True if response.status_code == 200 and all(
            response.json().get(c, {}).get("status") == "healthy"
            for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")) else None

    stack.wait_for("every component to report healthy", healthy, timeout=300)
    stack.login()

    def parsed() -> bool | None:
        errors = stack.get("/importErrors")
        assert errors["total_entries"] == 0, f"DAG import errors: {errors}"
        dags = {d["dag_id"]: d for d in stack.get("/dags", params={"limit": 100})["dags"]}
        wanted = ("geneva_on_change_watched", "geneva_cron_backfill")
        return True if all(d in dags and not dags[d]["is_paused"] for d in wanted) else None

    stack.wait_for("the two DAGs to be parsed, unpaused", parsed, timeout=180)

    def first_look() -> int | None:
        assets = stack.get("/assets", params={"name_pattern": "lance.lance_default.watched"})["assets"]
        mine = [a for a in assets if a["name"] == "lance.lance_default.watched"]
        if not mine:
            return None
        response = stack.client.get(f"/api/v2/assets/{mine[0]['id']}/state-store/geneva.reported_version")
        return response.json()["value"] if response.status_code == 200 else None

    stack.wait_for("the watcher's first look at the table", first_look, timeout=180)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--rows", type=int, default=1_000, help="rows appended to each table per round")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (Airflow home, logs, tables)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="geneva-watch-latency-"))
    stack: AirflowStack | None = None
    spark_server: Any = None
    try:
        stack, spark_server = start_deployment(tmp)
        make_tables(stack.lake, args.rows)  # before the DAG file: table_change_dag reads the table when parsed
        (stack.dags / "geneva_watch_latency.py").write_text(textwrap.dedent(DAG_FILE))
        t0 = time.monotonic()
        spark_server.start()
        stack.start()
        wait_ready(stack)
        print(f"deployment up in {time.monotonic() - t0:.0f}s (tmp {tmp})", flush=True)
        start = args.rows
        warm = one_round(stack, start, args.rows)
        start += args.rows
        print(f"warm-up round (not counted): watcher {warm[WATCHED]:.1f}s, cron {warm[CRON]:.1f}s", flush=True)
        figures: list[dict[str, float]] = []
        meter, t_rounds = LoadMeter(), time.monotonic()
        print(f"{'round':>5}  {'written at :ss':>14}  {'watcher (s)':>11}  {'1-min cron (s)':>14}", flush=True)
        for n in range(1, args.rounds + 1):
            figures.append(one_round(stack, start, args.rows, second=60.0 * (n - 1) / args.rounds))
            start += args.rows
            print(f"{n:>5}  {figures[-1]['second']:>14.0f}  {figures[-1][WATCHED]:>11.1f}  {figures[-1][CRON]:>14.1f}",
                  flush=True)
        watched = [f[WATCHED] for f in figures]
        cron = [f[CRON] for f in figures]
        print(f"{'median':>6} {'':>15} {statistics.median(watched):>11.1f}  {statistics.median(cron):>14.1f}")
        print(f"{'p90':>6} {'':>15} {p90(watched):>11.1f}  {p90(cron):>14.1f}")
        load = meter.load(time.monotonic() - t_rounds)
        print(f"(seconds from an outside commit of {args.rows} rows to every new row's UDF value being readable, "
              f"{args.rounds} rounds; watcher poll_interval 2 s; meanwhile other processes used "
              f"{'n/a' if load is None else f'{load.other_cores:.2f} cores, steal {load.steal_pct:.0f}%'})")
    finally:
        if stack is not None:
            spark_stop = threading.Thread(target=spark_server.stop)
            spark_stop.start()
            _, killed = stack.stop()
            spark_stop.join()
            if killed:
                print(f"SIGKILLed after 30 s: {killed}")
        if args.keep:
            print(f"kept {tmp}")
        else:
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
