"""Small jobs on a warm local session (issue 44): the driver computes what a Spark job would cost more to launch.

A column whose last apply measured its rows cheap has its small increments computed on the driver (no Spark job),
every fragment of them whole in one task (no checkpoints read back by a writer job); a column never measured, or
measured expensive, runs on Spark as before.  Either way each new row is computed once and the values are exact.
"""

from __future__ import annotations

import os
from pathlib import Path

from geneva_provider.stages import load_plan, plan_backfill, run_apply
from tests.helpers import clear_calls, counting_array_triple, counting_double, events_table, read_calls, times


def _jobs(spark) -> int:
    """Spark jobs the session has started so far."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


def _own_calls(call_dir: str) -> list[int]:
    """The rows a counting UDF was called on in this very process (the driver)."""
    path = Path(call_dir, f"{os.getpid()}.log")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _measured(db, spark, call_dir, udf, rows: int = 20_000):
    """A table of ``rows`` rows in 4 fragments whose column y was backfilled once on Spark (its cost measured)."""
    tbl = db.create_table("t", events_table(rows), max_rows_per_file=rows // 4)
    tbl.add_columns({"y": udf})
    before = _jobs(spark)
    assert tbl.backfill("y", spark=spark).rows_computed == rows
    assert _jobs(spark) > before and _own_calls(call_dir) == []  # the first backfill: Spark's workers computed it
    clear_calls(call_dir)
    return tbl


def test_a_small_increment_of_a_measured_cheap_column_is_computed_on_the_driver_exactly_once(db, spark, call_dir):
    tbl = _measured(db, spark, call_dir, counting_array_triple(call_dir))
    tbl.add(events_table(2_000, start=20_000))
    before = _jobs(spark)
    res = tbl.backfill("y", spark=spark)
    assert _jobs(spark) == before  # no Spark job: plan, apply, write+commit and verify on the driver
    assert sorted(_own_calls(call_dir)) == sorted(read_calls(call_dir)) == list(range(20_000, 22_000))
    assert res.rows_computed == 2_000 and res.fragments_committed == 1
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["x"] == list(range(22_000)) and got["y"] == [3 * x for x in range(22_000)]
    tbl.dataset().validate()
    # Up to date: a plan alone, nothing computed, no Spark job.
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0
    assert _jobs(spark) == before and read_calls(call_dir) == []


def test_a_measured_cheap_column_keeps_a_large_new_fragment_whole_where_an_unmeasured_one_splits_it(db, spark,
                                                                                                    call_dir):
    # 8,000 rows: large enough that guided tasks split it over two slots, small enough that the cheap UDF's measured
    # cost (~5 us a row quiet, the apply's reads included) stays well under the split's ~0.3 s even on a loaded
    # machine (37 us a row would be needed to split it).
    n = 8_000
    tbl = _measured(db, spark, call_dir, counting_array_triple(call_dir))
    tbl.add(events_table(n, start=20_000))  # one new fragment of n rows
    new = max(f.fragment_id for f in tbl.dataset().get_fragments())
    plan, _ = load_plan(plan_backfill(tbl.ref, "y", parallelism=2).plan_uri)
    parts = [(p.frag, p.ranges, p.target is not None) for t in plan.tasks for p in t.parts]
    assert parts == [(new, [(0, n)], True)]  # one task computes it whole and writes its file
    # The same fragment in a table whose column was never measured: guided tasks split it over the slots.
    fresh = db.create_table("fresh", events_table(n))
    fresh.add_columns({"y": times(3, name="triple")})
    plan, _ = load_plan(plan_backfill(fresh.ref, "y", parallelism=2).plan_uri)
    assert len(plan.tasks) > 1 and all(p.target is None for t in plan.tasks for p in t.parts)
    res = tbl.backfill("y", spark=spark)
    assert res.rows_computed == n and sorted(read_calls(call_dir)) == list(range(20_000, 20_000 + n))
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [3 * x for x in range(20_000 + n)]
    tbl.dataset().validate()


def test_an_increment_of_a_column_measured_expensive_stays_on_spark(db, spark, call_dir):
    tbl = _measured(db, spark, call_dir, counting_double(call_dir, sleep=0.0005), rows=10_000)
    tbl.add(events_table(2_000, start=10_000))  # ~1 s of calls: their share of the slots saves more than a job costs
    before = _jobs(spark)
    assert tbl.backfill("y", spark=spark).rows_computed == 2_000
    assert _jobs(spark) > before and _own_calls(call_dir) == []
    assert sorted(read_calls(call_dir)) == list(range(10_000, 12_000))
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [2 * x for x in range(12_000)]


def test_a_driver_apply_whose_job_ended_before_its_commit_is_committed_by_the_rerun_without_computing(db, spark,
                                                                                                       call_dir):
    tbl = _measured(db, spark, call_dir, counting_array_triple(call_dir))
    tbl.add(events_table(2_000, start=20_000))
    version = tbl.version
    before = _jobs(spark)
    run_apply(plan_backfill(tbl.ref, "y").plan_uri, spark)  # the job stops here: no write+commit, no verify
    assert _jobs(spark) == before and sorted(_own_calls(call_dir)) == list(range(20_000, 22_000))
    assert tbl.version == version and tbl.count_rows("y IS NULL") == 2_000  # nothing committed yet
    clear_calls(call_dir)
    res = tbl.backfill("y", spark=spark)  # the rerun commits the file the driver staged
    assert read_calls(call_dir) == [] and res.rows_computed == 0 and res.fragments_committed == 1
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [3 * x for x in range(22_000)]
    tbl.dataset().validate()


def test_a_udf_measured_on_one_table_runs_its_first_backfill_of_another_on_the_driver_unless_its_fragments_are_many(
        db, spark, call_dir):
    """A warm process knows the UDF's cost from another table: its first backfill of a small table is computed on the
    driver, each fragment whole; the same rows in hundreds of fragments (whose files cost more than their rows) go to
    Spark's slots.  Every row is computed once, exactly."""
    udf = counting_array_triple(call_dir)
    _measured(db, spark, call_dir, udf)
    other = db.create_table("other", events_table(4_000), max_rows_per_file=1_000)
    other.add_columns({"y": udf})
    plan, _ = load_plan(plan_backfill(other.ref, "y", parallelism=2).plan_uri)
    assert all(p.target is not None for t in plan.tasks for p in t.parts)  # every fragment whole
    before = _jobs(spark)
    assert other.backfill("y", spark=spark).rows_computed == 4_000
    assert _jobs(spark) == before  # no Spark job
    assert sorted(_own_calls(call_dir)) == sorted(read_calls(call_dir)) == list(range(4_000))
    assert other.to_arrow(["y"]).column("y").to_pylist() == [3 * x for x in range(4_000)]
    other.dataset().validate()

    clear_calls(call_dir)
    many = db.create_table("many", events_table(4_000), max_rows_per_file=10)  # 400 fragments of 10 rows
    many.add_columns({"y": udf})
    before = _jobs(spark)
    assert many.backfill("y", spark=spark).rows_computed == 4_000
    assert _jobs(spark) > before and _own_calls(call_dir) == []  # Spark's workers computed them
    assert sorted(read_calls(call_dir)) == list(range(4_000))
    assert many.to_arrow(["y"]).column("y").to_pylist() == [3 * x for x in range(4_000)]
    many.dataset().validate()
