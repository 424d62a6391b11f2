"""The checkpoint store's layout: one module knows every key, and a store written by an older version is read.

The part that needs a Spark session; the rest is in tests/unit/test_store_layout.py.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import shutil
from pathlib import Path

import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import PLAN_FORMAT, JobStatus
from geneva_provider.core.store.layout import (
    JobStore,
    LedgerKey,
    parse_key,
)
from geneva_provider.pipeline.columns.inputs import udf_info
from geneva_provider.pipeline.columns.plan_backfill import backfill_prefix
from geneva_provider.pipeline.stages.planning import load_plan
from tests.store_fixture import FIXTURE, HOME


@pytest.fixture
def main_lake():
    """The fixture lake at the path it was written at (its keys hash the table URI), one test at a time."""
    home = Path(HOME)
    with open(f"{HOME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(FIXTURE / "db", home / "db")
        try:
            yield gp.connect(str(home / "db"))
        finally:
            shutil.rmtree(home, ignore_errors=True)


def test_a_store_written_by_main_is_read_and_its_unwritten_backfill_finished_from_its_checkpoints(main_lake, spark):
    db = main_lake
    events = db.open_table("events")
    jobs = db.list_jobs("events")
    assert sorted(j.kind for j in jobs) == ["backfill", "backfill", "backfill", "compaction"]
    assert [j.kind for j in db.list_jobs("doubled")] == ["refresh"]
    pending = next(j for j in jobs if j.column == "w")
    assert pending.status is JobStatus.ABANDONED and pending.stage == "apply"  # its process "died" after apply
    store = JobStore(events.checkpoint_store)
    assert sorted(k.job_id for k in store.plans()) == sorted(j.job_id for j in jobs)
    for job in jobs:  # plans of an older format are refused by name (a stage never misreads one) ...
        with pytest.raises(gp.PlanFormatError, match=rf"has plan format 3, expected {PLAN_FORMAT}"):
            load_plan(store.plan_uri(job.job_id))
    assert store.is_committed(pending.job_id) is False
    assert all(store.is_committed(j.job_id) for j in jobs if j.kind == "backfill" and j.column == "y")

    # ... but their checkpoints are not: the apply main left is reused, not one row is computed again.
    result = events.backfill("w", spark=spark)
    assert result.rows_computed == 0 and result.rows_reused == 20
    plan, _ = load_plan(store.plan_uri(result.job_id))
    assert (plan.column, plan.rows_to_compute) == ("w", 0)  # the planner found every row checkpointed
    assert db.get_job(pending.job_id).taken_over_by == result.job_id
    t = events.to_arrow(["x", "y", "w"])
    assert t.column("w").to_pylist() == [3 * x for x in t.column("x").to_pylist()]
    assert t.column("y").to_pylist() == [2 * x for x in t.column("x").to_pylist()]
    assert db.open_table("doubled").refresh(spark=spark).rows_computed == 0

    cleaned = events.cleanup_checkpoints(older_than=dt.timedelta(0))  # every job ended: all of it goes
    assert cleaned.removed == {"plans": 5, "plan results": 5, "job records": 5, "batch checkpoints": 7,
                               "staged-file records": 4}
    assert cleaned.kept_for_live_jobs == 0
    left = {parse_key(k) for k in events.checkpoint_store.list_keys()}
    y_prefix = backfill_prefix(udf_info(events.ref.dataset(), "y"), "y", events.ref.uri)
    assert left == {LedgerKey.of(plan.job_prefix), LedgerKey.of(y_prefix)}  # the caches of y and w
