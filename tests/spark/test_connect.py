"""The same stages over Spark Connect: a backfill, a view refresh and a compaction from a Connect client."""

from __future__ import annotations

import pytest

from tests.helpers import clear_calls, counting_double, events_table, read_calls


def test_a_backfill_a_refresh_and_a_compaction_over_spark_connect(db, connect_spark, call_dir):
    from geneva_provider.pipeline.spark.runner import is_connect

    assert is_connect(connect_spark)
    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=500)
    tbl.add_columns({"y": counting_double(call_dir)})
    result = tbl.backfill("y", spark=connect_spark, checkpoint_size=500)
    assert result.rows_computed == 4_000 and sorted(read_calls(call_dir)) == list(range(4_000))
    assert tbl.count_rows("y IS NULL OR y != x * 2") == 0
    assert db.get_job(result.job_id).status == "DONE"

    tbl.add(events_table(100, start=4_000))
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=connect_spark).rows_computed == 100
    assert sorted(read_calls(call_dir)) == list(range(4_000, 4_100))

    view = db.create_materialized_view("evens", tbl.search(None).where("x % 2 = 0").select({"x": "x", "y": "y"}))
    assert view.refresh(spark=connect_spark).rows_computed == 2_050
    assert view.count_rows("y != x * 2") == 0

    compacted = tbl.compact(target_rows_per_fragment=10_000, spark=connect_spark)
    assert compacted.fragments_added == 1 and len(tbl.dataset().get_fragments()) == 1
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=connect_spark).rows_computed == 0 and read_calls(call_dir) == []
    tbl.dataset().validate()


@pytest.mark.parametrize("which", ["classic", "connect"])
def test_a_package_error_raised_in_a_task_reaches_the_caller_as_itself(request, which):
    """Not Spark's wrapper around it: the caller (an operator) catches the package's type and message."""
    import geneva_provider as gp
    from geneva_provider.pipeline.spark.runner import run_tasks

    session = request.getfixturevalue("spark" if which == "classic" else "connect_spark")

    def _fail_at_three(tasks):  # defined here: pickled by value (the server's workers cannot import tests)
        for t in tasks:
            if t == 3:
                raise gp.CheckpointMissingError(f"task {t}: no checkpoint for it")
            yield t * 10

    assert run_tasks(session, [1, 2, 4], _fail_at_three, description="ok") == [10, 20, 40]
    with pytest.raises(gp.CheckpointMissingError, match=r"^task 3: no checkpoint for it$"):
        run_tasks(session, [1, 2, 3, 4], _fail_at_three, description="fails", concurrency=2)
