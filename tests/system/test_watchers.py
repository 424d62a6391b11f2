"""A table watched by a real triggerer starts its DAG after an outside write, and only then.

On the deployment of test_scheduler.py (scheduler, dag-processor, triggerer, api-server on 127.0.0.1, Spark
stages over a Spark Connect server): ``table_change_dag("clicks")`` backfills the ``auto_backfill`` column and
refreshes a chain of ``refresh_on_change`` views after each write that a plain Python process makes; its own
commits start no run (runs counted over 2 minutes after them); a triggerer stopped while a delete lands reports
it once when it is back.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.system import test_scheduler
from tests.system.test_scheduler import AirflowStack, with_logs

deployment = test_scheduler.stack  # the deployment fixture ("stack"), started for this module

pytestmark = pytest.mark.slow

DAG_ID = "geneva_on_change_clicks"
QUIET_S = 120.0  # how long after a run's own commits the runs are counted (the issue: "over 2 minutes")
DAG_FILE = """
\"\"\"An Airflow DAG following table clicks (the words "airflow" and "dag" make the dag-processor parse it).\"\"\"
from geneva_provider.task_groups import table_change_dag

dag = table_change_dag("clicks", poll_interval=2.0, retries=0)
"""


def counting_triple(calls: Path) -> Any:
    """x*3, logging each x it is called on to ``calls`` (pickled by value: the Spark workers need no test code)."""
    import geneva_provider as gp

    @gp.udf(data_type=pa.int64(), name="triple", auto_backfill=True)
    def triple(x: int) -> int:
        with open(calls, "a") as f:
            f.write(f"{x}\n")
        return 3 * x

    return triple


def calls_of(path: Path) -> list[int]:
    return sorted(int(v) for v in path.read_text().split()) if path.exists() else []


def external_write(lake: Path, code: str) -> None:
    """``code`` run by a plain Python process (``db`` is the lake): a writer outside Airflow."""
    script = f"import geneva_provider as gp, pyarrow as pa\ndb = gp.connect({str(lake)!r})\n{textwrap.dedent(code)}"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def runs(stack: AirflowStack) -> list[dict[str, Any]]:
    return stack.get(f"/dags/{DAG_ID}/dagRuns", params={"order_by": "run_after", "limit": 100})["dag_runs"]


def cursor(stack: AirflowStack) -> int | None:
    """The watcher's cursor in the asset state store, through the REST API (None before its first look)."""
    assets = stack.get("/assets", params={"name_pattern": "lance.lance_default.clicks"})["assets"]
    mine = [a for a in assets if a["name"] == "lance.lance_default.clicks"]
    if not mine:
        return None
    response = stack.client.get(f"/api/v2/assets/{mine[0]['id']}/state-store/geneva.reported_version")
    return response.json()["value"] if response.status_code == 200 else None


def view_xs(lake: Path, name: str) -> list[int]:
    import geneva_provider as gp

    return sorted(gp.connect(str(lake)).open_table(name).to_arrow(["x"]).column("x").to_pylist())


def test_an_outside_write_runs_the_watching_dag_once_and_a_restarted_triggerer_misses_nothing(
        deployment: AirflowStack) -> None:
    with_logs(watched)(deployment)  # any failure carries the tail of every component's log


def watched(stack: AirflowStack) -> None:
    import geneva_provider as gp
    from geneva_provider.stages import InProcessRunner

    calls = stack.root / "triple-calls.txt"
    db = gp.connect(str(stack.lake))
    xs = pa.array(range(200), pa.int64())
    src = db.create_table("clicks", pa.table({"id": xs, "x": xs}))
    src.add_columns({"tripled": counting_triple(calls)})
    src.backfill("tripled", spark=InProcessRunner())
    evens = db.create_materialized_view("clicks_even", src.search(None).where("x % 2 = 0").select({"x": "x"}),
                                        refresh_on_change=True)
    evens.refresh(spark=InProcessRunner())
    big = db.create_materialized_view("clicks_even_big", evens.search(None).where("x >= 100").select({"x": "x"}),
                                      refresh_on_change=True)
    big.refresh(spark=InProcessRunner())
    calls.unlink()
    (stack.dags / "clicks_on_change.py").write_text(DAG_FILE)

    def parsed() -> dict[str, Any] | None:
        errors = stack.get("/importErrors")
        assert errors["total_entries"] == 0, f"DAG import errors: {errors}"
        dags = {d["dag_id"]: d for d in stack.get("/dags", params={"limit": 100})["dags"]}
        return dags.get(DAG_ID) if DAG_ID in dags and not dags[DAG_ID]["is_paused"] else None

    stack.wait_for("the watching DAG to be parsed", parsed, timeout=120)
    baseline = stack.wait_for("the watcher's first look", lambda: cursor(stack), timeout=120)
    assert baseline == src.dataset().version

    # 1. An append from a plain Python process: one run within 30 s, backfilling exactly the new rows.
    external_write(stack.lake, "db.open_table('clicks').add(pa.table({'id': list(range(200, 260)), "
                               "'x': list(range(200, 260))}))")
    t0 = time.monotonic()
    first = stack.wait_for("a run after the append", lambda: runs(stack) or None, timeout=30)[0]
    started_s = time.monotonic() - t0
    assert first["run_type"] == "asset_triggered", first
    stack.wait_for_run(DAG_ID, first["dag_run_id"], timeout=400)
    assert calls_of(calls) == list(range(200, 260))
    table = db.open_table("clicks").to_arrow(["x", "tripled"]).to_pydict()
    assert sorted(zip(table["x"], table["tripled"], strict=True)) == [(x, 3 * x) for x in range(260)]
    assert view_xs(stack.lake, "clicks_even") == list(range(0, 260, 2))
    assert view_xs(stack.lake, "clicks_even_big") == list(range(100, 260, 2))
    events = stack.get("/assets/events", params={"limit": 100})["asset_events"]
    mine = [e for e in events if e["extra"].get("payload", {}).get("table") == "clicks"]
    assert len(mine) == 1 and mine[0]["extra"]["payload"]["rows_added"] == 60, mine

    # 2. The run's own commits (column writes, view refreshes) start no other run: counted from here to the end of
    # the test (at least QUIET_S), where exactly one more run -- the delete's of step 3 -- may be found.
    quiet_from = time.monotonic()
    time.sleep(60)
    assert len(runs(stack)) == 1, runs(stack)
    assert cursor(stack) == db.open_table("clicks").dataset().version  # moved past the run's own commits

    # 3. The triggerer is down while a delete lands: when it is back, the delete is reported once.
    stack.stop_component("triggerer")
    external_write(stack.lake, "db.open_table('clicks').delete('x < 10 OR x >= 250')")
    stack.start_component("triggerer", "--skip-serve-logs")
    second = stack.wait_for("a run after the delete", lambda: r[-1] if len(r := runs(stack)) == 2 else None,
                            timeout=120)
    stack.wait_for_run(DAG_ID, second["dag_run_id"], timeout=400)
    assert view_xs(stack.lake, "clicks_even") == list(range(10, 250, 2))  # no cron: the watcher's run
    assert view_xs(stack.lake, "clicks_even_big") == list(range(100, 250, 2))
    assert calls_of(calls) == list(range(200, 260))  # nothing computed again
    # At least 30 s after the second run too, and QUIET_S after the first one's commits, in all.
    time.sleep(max(30.0, QUIET_S - (time.monotonic() - quiet_from)))
    quiet_s = time.monotonic() - quiet_from
    assert len(runs(stack)) == 2, runs(stack)
    events = [e for e in stack.get("/assets/events", params={"limit": 100})["asset_events"]
              if e["extra"].get("payload", {}).get("table") == "clicks"]
    reported = sorted((e["extra"]["payload"]["rows_added"], e["extra"]["payload"]["rows_deleted"]) for e in events)
    assert reported == [(0, 20), (60, 0)], events
    print(f"\nthe watching DAG's run started {started_s:.1f}s after the outside append; runs counted over "
          f"{quiet_s:.0f}s after its own commits")
