"""A column's first backfill on a local session starts with a trial on the driver (``pipeline/stages/on_driver.py``):
a cheap UDF's job ends there without a Spark job; a slow one's tasks stop at a checkpoint when the trial's time is
up and Spark computes the rest from those checkpoints -- each row computed once, values exact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from geneva_provider.pipeline.stages import on_driver
from tests.helpers import counting_double, events_table, read_calls


def calls_by_process(log_dir: str) -> dict[int, list[int]]:
    """The x values each process called the UDF on, by its pid."""
    return {int(p.stem): [int(line) for line in p.read_text().split()] for p in Path(log_dir).glob("*.log")}


def test_a_cheap_first_backfill_is_computed_on_the_driver_without_a_spark_job(db, spark, call_dir):
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=500)
    tbl.add_columns({"y": counting_double(call_dir)})
    spark.sparkContext.setJobGroup("trial-cheap", "trial-cheap")
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup("trial-cheap"))
    result = tbl.backfill("y", spark=spark)
    assert result.rows_computed == 2_000
    assert list(calls_by_process(call_dir)) == [os.getpid()]  # the driver: this process
    assert sorted(read_calls(call_dir)) == list(range(2_000))  # each row once
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup("trial-cheap")) == jobs_before
    assert tbl.to_arrow(columns=["x", "y"]).to_pydict()["y"] == [2 * x for x in range(2_000)]
    tbl.dataset().validate()


def test_a_slow_first_backfill_leaves_the_driver_when_the_trial_ends_and_computes_each_row_once(
        db, spark, call_dir, monkeypatch):
    monkeypatch.setattr(on_driver, "TRIAL_SECONDS", 0.3)
    tbl = db.create_table("events", events_table(400), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.01)})  # 10 ms a row: ~4 s in all, far past the trial
    result = tbl.backfill("y", spark=spark)
    assert result.rows_computed == 400
    by_process = calls_by_process(call_dir)
    on_the_driver = by_process.pop(os.getpid(), [])
    assert 0 < len(on_the_driver) < 100  # the trial computed a few rows (its probe, then what fitted in its time)
    assert by_process and sum(len(v) for v in by_process.values()) == 400 - len(on_the_driver)  # Spark: the rest
    assert sorted(read_calls(call_dir)) == list(range(400))  # no row computed twice
    assert tbl.to_arrow(columns=["x", "y"]).sort_by("x").to_pydict()["y"] == [2 * x for x in range(400)]
    tbl.dataset().validate()
    record = db.get_job(result.job_id)
    assert record.status == "DONE" and record.rows_committed == 400


@pytest.mark.parametrize("checkpoint_size", [50])
def test_a_fixed_checkpoint_size_is_never_cut_by_a_trial(db, spark, call_dir, checkpoint_size):
    """A size the user fixed (a GPU batch) is theirs: no trial, the first backfill runs on Spark."""
    tbl = db.create_table("events", events_table(200), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark, checkpoint_size=checkpoint_size)
    assert os.getpid() not in calls_by_process(call_dir)
    assert sorted(read_calls(call_dir)) == list(range(200))
