"""How a backfill task fails under a real scheduler: a UDF bug once, with its reason first; an I/O blip retried.

On the deployment of test_scheduler.py (a module of its own, so its own deployment): two backfill DAGs, each
``backfill_task_group(..., retries=3)`` with the package's default retry policy.  What only a real
deployment shows: the scheduler's own bookkeeping of the tries (``try_number``, the tries' history), and the
task log files a user opens in the UI, as the api-server serves them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.helpers import events_table
from tests.system.test_scheduler import AirflowStack, stack, with_logs

pytestmark = pytest.mark.slow
__all__ = ["stack"]  # the deployment fixture, one for this module

ROWS = 2_000
HEAD_LINES = 20  # where in the task log a user must find the reason
DAG_FILE = """
\"\"\"Test-only Airflow DAGs of test_task_failures.py ("airflow" and "dag": the dag-processor parses it).\"\"\"
from datetime import datetime, timedelta

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group

for table, delay in (("udf_bug", 2), ("io_blip", 10)):
    with DAG(dag_id=f"geneva_test_{table}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        backfill_task_group("backfill_y", table, "y", retries=3, retry_delay=timedelta(seconds=delay))
"""


def bad_row_udf() -> Any:
    """x*2, except that row 7 is bad (pickled by value: the Spark workers need no test code)."""
    import geneva_provider as gp

    @gp.udf(data_type=pa.int64(), name="strict_double")
    def strict_double(x: int) -> int:
        if x == 7:
            raise ValueError("bad row 7")
        return 2 * x

    return strict_double


def plain_udf() -> Any:
    import geneva_provider as gp

    @gp.udf(data_type=pa.int64(), name="double")
    def double(x: int) -> int:
        return 2 * x

    return double


@pytest.fixture(scope="module")
def dags(stack: AirflowStack) -> None:
    """The two DAGs, parsed and unpaused."""
    (stack.dags / "geneva_test_failures.py").write_text(DAG_FILE)
    wanted = {"geneva_test_udf_bug", "geneva_test_io_blip"}

    def ready() -> set[str] | None:
        found = {d["dag_id"] for d in stack.get("/dags", params={"limit": 100})["dags"] if not d["is_paused"]}
        assert stack.get("/importErrors")["total_entries"] == 0, stack.get("/importErrors")
        return wanted if wanted <= found else None

    stack.wait_for("the DAGs to be parsed, unpaused", ready, timeout=120)


def _ti(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    return stack.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")


def _tries(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> list[tuple[int, str]]:
    """(try number, state) of every try of the task, as the scheduler recorded them."""
    tries = stack.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")["task_instances"]
    return sorted((t["try_number"], t["state"]) for t in tries)


def _log(stack: AirflowStack, dag_id: str, run_id: str, task_id: str, attempt: int) -> list[str]:
    """The try's task log as the api-server streams it to the UI: one line (a JSON object) per log event."""
    response = stack.client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{attempt}",
                                params={"full_content": True}, headers={"Accept": "application/x-ndjson"})
    assert response.status_code == 200, f"log of {task_id} try {attempt}: {response.status_code} {response.text}"
    return response.text.splitlines()


def _run_failed(stack: AirflowStack, dag_id: str, run_id: str) -> dict[str, str | None]:
    def ended() -> str | None:
        state = stack.get(f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    assert stack.wait_for(f"{dag_id} run {run_id} to end", ended, timeout=400) == "failed"
    return stack.task_states(dag_id, run_id)


@with_logs
def test_a_failing_udf_fails_its_task_on_the_first_try_with_the_udf_s_error_first_in_the_log(
        stack: AirflowStack, dags: None) -> None:
    import geneva_provider as gp

    table = gp.connect(str(stack.lake)).create_table("udf_bug", events_table(ROWS), max_rows_per_file=ROWS // 2)
    table.add_columns({"y": bad_row_udf()})
    dag_id = "geneva_test_udf_bug"
    run_id = stack.trigger(dag_id, {})
    states = _run_failed(stack, dag_id, run_id)
    assert states["backfill_y.plan"] == "success" and states["backfill_y.apply"] == "failed", states
    # retries=3, yet one try: a retry cannot fix a UDF bug (no up_for_retry in between).
    assert _ti(stack, dag_id, run_id, "backfill_y.apply")["try_number"] == 1
    assert _tries(stack, dag_id, run_id, "backfill_y.apply") == [(1, "failed")]
    assert not list(stack.logs.glob(f"dag_id={dag_id}/run_id={run_id}/task_id=backfill_y.apply/attempt=2.log"))

    head = _log(stack, dag_id, run_id, "backfill_y.apply", 1)[:HEAD_LINES]
    reason = [line for line in head if "ValueError: bad row 7" in line]
    assert reason, "the UDF's error is not in the first lines of the task log:\n" + "\n".join(head)
    assert "strict_double" in reason[0] and "'y'" in reason[0] and "'udf_bug'" in reason[0], reason[0]
    assert table.count_rows("y IS NOT NULL") == 0  # nothing committed


@with_logs
def test_a_transient_io_error_retries_the_task_and_the_run_succeeds(stack: AirflowStack, dags: None) -> None:
    """The table's checkpoint directory is unusable (a file stands in its place) for the first try only."""
    import geneva_provider as gp

    table = gp.connect(str(stack.lake)).create_table("io_blip", events_table(ROWS), max_rows_per_file=ROWS // 2)
    table.add_columns({"y": plain_udf()})
    blocker = Path(table.checkpoint_store.uri)
    assert not blocker.exists()
    blocker.write_text("not a directory")
    dag_id = "geneva_test_io_blip"
    run_id = stack.trigger(dag_id, {})

    def first_try_failed() -> dict[str, Any] | None:
        ti = _ti(stack, dag_id, run_id, "backfill_y.plan")
        assert ti["state"] not in ("failed", "success"), f"plan: {ti}"
        return ti if ti["state"] == "up_for_retry" else None

    stack.wait_for("the plan task's first try to fail", first_try_failed, timeout=300, interval=0.3)
    blocker.unlink()  # the storage is back (the retry waits retry_delay=10 s)
    states = stack.wait_for_run(dag_id, run_id, timeout=400)
    assert states.pop("backfill_y.index") == "skipped", states  # no index on the column
    assert set(states.values()) == {"success"}, states
    # Seen up_for_retry above; the history keeps the first try as failed, the second as the one that succeeded.
    assert _tries(stack, dag_id, run_id, "backfill_y.plan") == [(1, "failed"), (2, "success")]
    first = "\n".join(_log(stack, dag_id, run_id, "backfill_y.plan", 1))
    # The package's retry policy judged it: an I/O error, which a retry can fix.
    assert "an I/O error: the storage or the network may be back on the next try" in first, first[-3000:]
    assert "Not a directory" in first or "File exists" in first, first[-3000:]
    got = table.to_arrow(["x", "y"]).to_pydict()
    assert sorted(zip(got["x"], got["y"], strict=True)) == [(x, 2 * x) for x in range(ROWS)]
    table.dataset().validate()
