"""Errors of stage order and of listings: write+commit before apply, ColumnError's columns, VerificationError's.

The part that needs a Spark session; the rest is in tests/unit/test_stage_errors.py.
"""

from __future__ import annotations

import pytest

import geneva_provider as gp
from geneva_provider.pipeline.stages.job_records import read_record
from geneva_provider.stages import plan_backfill, run_apply, run_write_commit
from tests.helpers import events_table, times


def _last_job_id(spark, group: str) -> int:
    """Runs a one-task probe job in its own group and returns its Spark job id (ids grow by one per job)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        sc.parallelize([1], 1).count()
        return max(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)


def test_write_commit_of_a_plan_whose_apply_never_ran_fails_before_any_spark_job(db, spark):
    tbl = db.create_table("events", events_table(400), max_rows_per_file=100)
    tbl.add_columns({"y": times(2)})
    summary = plan_backfill(tbl.ref, "y")
    store = tbl.checkpoint_store
    version, keys, record = tbl.version, store.list_keys(), read_record(store, summary.job_id)

    before = _last_job_id(spark, "probe-before")
    with pytest.raises(gp.CheckpointMissingError) as info:
        run_write_commit(summary.plan_uri, spark)
    after = _last_job_id(spark, "probe-after")
    assert after == before + 1  # no Spark job ran in between

    message = str(info.value)
    assert summary.job_id in message and "table 'events'" in message and "column 'y'" in message
    assert "run the apply stage first" in message and "400 of its 400 rows to compute" in message
    for fragment in range(4):
        assert f"fragment {fragment} has no checkpoint for 100 of its 100 planned rows" in message
    # Nothing changed: the table, the checkpoint store, the job's record.
    assert tbl.version == version and store.list_keys() == keys
    assert read_record(store, summary.job_id) == record
    tbl.dataset().validate()

    run_apply(summary.plan_uri, spark)  # in order, the same plan lands
    result = run_write_commit(summary.plan_uri, spark)
    assert result.rows_committed == 400
    assert all(r["y"] == 2 * r["x"] for r in tbl.to_arrow(columns=["x", "y"]).to_pylist())
    tbl.dataset().validate()


def test_write_commit_after_an_apply_that_failed_part_way_names_what_is_missing(db, spark, tmp_path):
    """An apply whose UDF failed on some rows left the other tasks' checkpoints: write+commit still refuses, at once."""
    import pyarrow as pa

    @gp.udf(data_type=pa.int64(), name="picky")
    def picky(x: int) -> int:
        if x == 350:
            raise ValueError("no 350")
        return x * 2

    tbl = db.create_table("events", events_table(400), max_rows_per_file=100)
    tbl.add_columns({"y": picky})
    summary = plan_backfill(tbl.ref, "y", gp.BackfillOptions(task_size=100))
    with pytest.raises(gp.UDFExecutionError):
        run_apply(summary.plan_uri, spark)
    version = tbl.version
    with pytest.raises(gp.CheckpointMissingError, match=r"\(100 of its 400 rows to compute have no checkpoint\): "
                                                        r"fragment 3 has no checkpoint for 100 of its 100 planned"):
        run_write_commit(summary.plan_uri, spark)
    assert tbl.version == version
    tbl.dataset().validate()


