"""A daily partitioned DAG backfills only its partition's rows (``partition_where``), on a real scheduler.

``dag.test()`` cannot give a run a partition key (it creates a plain manual run), so this runs on the deployment
of test_scheduler.py: the DAG is on a ``CronPartitionTimetable`` and each run is triggered through the REST API
with a ``partition_key``, as the UI's "Trigger" form or a partitioned upstream asset would give it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.system import test_scheduler
from tests.system.test_scheduler import AirflowStack, with_logs
from tests.system.test_watchers import calls_of, counting_triple

deployment = test_scheduler.stack  # the deployment fixture ("stack"), started for this module

pytestmark = pytest.mark.slow

DAG_ID = "geneva_daily_partitions"
DAG_FILE = """
\"\"\"An Airflow DAG backfilling one day of table days per run (the words "airflow" and "dag" make it parsed).\"\"\"
from datetime import datetime

from airflow.sdk import DAG, CronPartitionTimetable

from geneva_provider.task_groups import backfill_task_group

with DAG("geneva_daily_partitions", start_date=datetime(2024, 1, 1), catchup=False,
         schedule=CronPartitionTimetable("0 1 * * *", timezone="UTC", run_offset=-1, key_format="%Y-%m-%d")):
    backfill_task_group("backfill_tripled", "days", "tripled", partition_where="date = {{ partition_key }}",
                        retries=0)
"""
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def test_each_partitioned_run_computes_only_its_days_rows(deployment: AirflowStack) -> None:
    with_logs(partitioned)(deployment)  # any failure carries the tail of every component's log


def trigger(stack: AirflowStack, partition_key: str) -> str:
    response = stack.client.post(f"/api/v2/dags/{DAG_ID}/dagRuns",
                                 json={"logical_date": None, "partition_key": partition_key})
    assert response.status_code == 200, stack.report(f"trigger: {response.status_code} {response.text}")
    run = response.json()
    assert run["partition_key"] == partition_key, run
    return str(run["dag_run_id"])


def plan_log(stack: AirflowStack, run_id: str) -> str:
    logs = list((stack.logs / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=backfill_tripled.plan").rglob("*"))
    return "".join(p.read_text(errors="replace") for p in logs if p.is_file())


def partitioned(stack: AirflowStack) -> None:
    import geneva_provider as gp

    calls = stack.root / "partition-calls.txt"
    db = gp.connect(str(stack.lake))
    dates = [d for d in DAYS for _ in range(100)]  # x = 0..99 on the 1st, 100..199 on the 2nd, 200..299 on the 3rd
    xs = pa.array(range(len(dates)), pa.int64())
    tbl = db.create_table("days", pa.table({"id": xs, "x": xs, "date": dates}), max_rows_per_file=120)
    tbl.add_columns({"tripled": counting_triple(calls)})
    (stack.dags / "daily_partitions.py").write_text(DAG_FILE)

    def parsed() -> dict[str, Any] | None:
        errors = stack.get("/importErrors")
        assert errors["total_entries"] == 0, f"DAG import errors: {errors}"
        dags = {d["dag_id"]: d for d in stack.get("/dags", params={"limit": 100})["dags"]}
        return dags.get(DAG_ID) if DAG_ID in dags and not dags[DAG_ID]["is_paused"] else None

    stack.wait_for("the partitioned DAG to be parsed", parsed, timeout=120)

    second = trigger(stack, "2024-01-02")
    stack.wait_for_run(DAG_ID, second, timeout=400)
    assert calls_of(calls) == list(range(100, 200))  # the UDF ran on exactly that day's rows
    assert values(stack.lake) == {x: 3 * x if 100 <= x < 200 else None for x in range(300)}
    assert "Partition '2024-01-02'" in plan_log(stack, second) and "date = '2024-01-02'" in plan_log(stack, second)

    third = trigger(stack, "2024-01-03")
    stack.wait_for_run(DAG_ID, third, timeout=400)
    assert calls_of(calls) == list(range(100, 300))  # only the 3rd's rows more
    assert values(stack.lake) == {x: 3 * x if 100 <= x < 300 else None for x in range(300)}
    db.open_table("days").dataset().validate()


def values(lake: Path) -> dict[int, int | None]:
    import geneva_provider as gp

    table = gp.connect(str(lake)).open_table("days").to_arrow(["x", "tripled"]).to_pydict()
    return dict(zip(table["x"], table["tripled"], strict=True))
