"""Deferred and durable Spark Connect stages under a real scheduler, triggerer and LocalExecutor.

The deployment is test_scheduler.py's (same fixture, a module of its own); the DAGs are
tests/dags/geneva_test_stage_modes.py: one backfill whose Spark stages defer, the same waited for in
the task, and the same run durably.  What only a real deployment shows: a deferred apply holds no
worker slot while Spark runs (its task instance is ``deferred``, its trigger in the triggerer
process) and leaves the same table as a blocking run; and a task process SIGKILLed mid-apply is
retried by the scheduler, the retry reattaching to the stage still running instead of computing
it again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import counting_double, events_table, read_calls
from tests.system.test_scheduler import ROOT, AirflowStack, assert_no_secret_in_logs, stack, with_logs

pytestmark = pytest.mark.slow
__all__ = ["stack"]  # the deployment fixture, one for this module

ROWS, CHECKPOINT = 12_000, 500
MODES = ("deferred", "durable", "blocking")


@pytest.fixture(scope="module")
def modes(stack: AirflowStack) -> None:
    """The stage-mode DAGs, parsed and unpaused."""
    shutil.copy(ROOT / "tests" / "dags" / "geneva_test_stage_modes.py", stack.dags)
    wanted = {f"geneva_test_{m}" for m in MODES}

    def ready() -> set[str] | None:
        dags = {d["dag_id"]: d for d in stack.get("/dags", params={"limit": 100})["dags"]}
        assert stack.get("/importErrors")["total_entries"] == 0, stack.get("/importErrors")
        found = {d for d in wanted if d in dags and not dags[d]["is_paused"]}
        return found if found == wanted else None

    stack.wait_for("the stage-mode DAGs to be parsed, unpaused", ready, timeout=120)


def _table(stack: AirflowStack, name: str, call_dir: str, sleep: float) -> Any:
    import geneva_provider as gp

    tbl = gp.connect(str(stack.lake)).create_table(name, events_table(ROWS), max_rows_per_file=ROWS // 2)
    tbl.add_columns({"y": counting_double(call_dir, sleep=sleep)})
    return tbl


def _apply(stack: AirflowStack, mode: str, run_id: str) -> dict[str, Any]:
    return stack.get(f"/dags/geneva_test_{mode}/dagRuns/{run_id}/taskInstances/backfill_y.apply")


def _apply_log(stack: AirflowStack, mode: str, run_id: str, attempt: int) -> str:
    (path,) = stack.logs.glob(f"dag_id=geneva_test_{mode}/run_id={run_id}/task_id=backfill_y.apply/"
                              f"attempt={attempt}.log")
    return path.read_text(errors="replace")


@with_logs
def test_a_deferred_connect_apply_frees_its_worker_slot_and_leaves_the_blocking_run_s_table(
        stack: AirflowStack, modes: None, tmp_path: Path) -> None:
    for name in ("calls-deferred", "calls-blocking"):
        (tmp_path / name).mkdir()
    deferred = _table(stack, "deferred", str(tmp_path / "calls-deferred"), sleep=0.002)
    blocking = _table(stack, "blocking", str(tmp_path / "calls-blocking"), sleep=0.0)
    run_id = stack.trigger("geneva_test_deferred", {})

    def apply_deferred() -> dict[str, Any] | None:
        ti = _apply(stack, "deferred", run_id)
        assert ti["state"] in (None, "scheduled", "queued", "running", "deferred"), f"apply: {ti}"
        return ti if ti["state"] == "deferred" and ti["trigger"] and ti["triggerer_job"] else None

    ti = stack.wait_for("the apply task to be deferred and its trigger claimed by the triggerer", apply_deferred,
                        timeout=300, interval=0.5)
    assert ti["trigger"]["classpath"] == "geneva_provider.triggers.stage.GenevaStageTrigger", ti
    assert "FAKE" not in ti["trigger"]["kwargs"]  # ids only
    pool = stack.get("/pools/default_pool")  # while Spark computes the column, no task holds a worker slot
    assert (pool["deferred_slots"], pool["running_slots"]) == (1, 0), pool
    rows_while_deferred = len(read_calls(tmp_path / "calls-deferred"))
    assert rows_while_deferred < ROWS, "apply ended before the task was seen deferred: nothing was shown"

    states = stack.wait_for_run("geneva_test_deferred", run_id, timeout=400)
    assert states.pop("backfill_y.index") == "skipped", states  # no index on the column
    assert set(states.values()) == {"success"}, states
    assert _apply(stack, "deferred", run_id)["try_number"] == 1
    log = _apply_log(stack, "deferred", run_id, 1)
    assert "Started the apply stage" in log and "The apply stage's runner logged" in log, log[-3000:]

    blocking_run = stack.trigger("geneva_test_blocking", {})
    blocked = stack.wait_for_run("geneva_test_blocking", blocking_run, timeout=400)
    assert blocked.pop("backfill_y.index") == "skipped" and set(blocked.values()) == {"success"}, blocked
    assert "Started the apply stage" not in _apply_log(stack, "blocking", blocking_run, 1)  # in its task

    def rows(tbl: Any) -> list[tuple[int, int]]:
        got = tbl.to_arrow(["x", "y"]).to_pydict()
        return sorted(zip(got["x"], got["y"], strict=True))

    assert rows(deferred) == rows(blocking) == [(x, 2 * x) for x in range(ROWS)]
    assert sorted(read_calls(tmp_path / "calls-deferred")) == list(range(ROWS))  # each row computed once
    for mode, run in (("deferred", run_id), ("blocking", blocking_run)):
        xcom = stack.get(f"/dags/geneva_test_{mode}/dagRuns/{run}/taskInstances/backfill_y.apply/"
                         "xcomEntries/return_value")["value"]
        value = json.loads(xcom) if isinstance(xcom, str) else xcom
        assert value["status"] == "success" and value["rows_computed"] == ROWS, value
    deferred.dataset().validate()
    assert_no_secret_in_logs(stack)


@with_logs
def test_a_killed_task_process_s_retry_reattaches_to_its_durable_connect_apply(stack: AirflowStack, modes: None,
                                                                              tmp_path: Path) -> None:
    from geneva_provider.core.store.layout import JobStore

    calls = tmp_path / "calls-durable"
    calls.mkdir()
    tbl = _table(stack, "durable", str(calls), sleep=0.003)
    store = tbl.checkpoint_store
    run_id = stack.trigger("geneva_test_durable", {})

    def apply_mid_stage() -> dict[str, Any] | None:
        ti = _apply(stack, "durable", run_id)
        assert ti["state"] in (None, "scheduled", "queued", "running"), f"apply: {ti}"
        return ti if ti["state"] == "running" and ti["pid"] and len(JobStore(store).batches("")) >= 4 else None

    ti = stack.wait_for("apply to be running with checkpoints written", apply_mid_stage, timeout=300, interval=0.3)
    os.kill(ti["pid"], signal.SIGKILL)  # the worker's task process dies, as in a crash
    rows_at_kill = len(read_calls(calls))
    assert rows_at_kill < ROWS

    states = stack.wait_for_run("geneva_test_durable", run_id, timeout=400)
    assert states.pop("backfill_y.index") == "skipped", states  # no index on the column
    assert set(states.values()) == {"success"}, states
    assert _apply(stack, "durable", run_id)["try_number"] == 2  # the scheduler retried the killed task
    retry_log = _apply_log(stack, "durable", run_id, 2)
    # Airflow's ResumableJobMixin read the stage's ids from the task state store and found it running.
    assert "Reconnecting to existing job" in retry_log, retry_log[-3000:]
    assert "Started the apply stage" not in retry_log  # reattached: not started a second time
    computed = read_calls(calls)
    assert len(computed) <= ROWS + CHECKPOINT and set(computed) == set(range(ROWS))
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert sorted(zip(got["x"], got["y"], strict=True)) == [(x, 2 * x) for x in range(ROWS)]
    tbl.dataset().validate()
