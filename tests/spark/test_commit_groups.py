"""``commit_granularity=N`` makes one commit per N fragments, in order, whichever path wrote each fragment.

A fragment an apply task computed whole has its column file written by that task (staged); a fragment
split over tasks gets its file from a writer task.  Issue 44: with both kinds in one job, 10 fragments
at ``commit_granularity=2`` made 6 commits ([0,1] [2,3] [4,5] [6,7] [8] [9]) -- the two kinds were grouped
apart.  Every version between the job's first and its last is checked as a reader sees it: valid, and
two more fragments filled.
"""

from __future__ import annotations

import pytest

from tests.helpers import counting_array_triple, counting_double, events_table

FRAGMENT_ROWS = 1_000


@pytest.mark.parametrize("udf", ["row-at-a-time", "vectorised"])
@pytest.mark.parametrize("task_size", [None, 1_500])  # 1,500: every other fragment is split over two tasks
def test_granularity_two_over_ten_fragments_makes_five_commits_of_two(db, spark, call_dir, udf, task_size):
    tbl = db.create_table("events", events_table(10 * FRAGMENT_ROWS), max_rows_per_file=FRAGMENT_ROWS)
    assert len(tbl.dataset().get_fragments()) == 10
    make, factor = (counting_double, 2) if udf == "row-at-a-time" else (counting_array_triple, 3)
    tbl.add_columns({"y": make(call_dir)})
    v = tbl.version
    options = {"task_size": task_size} if task_size else {}
    res = tbl.backfill("y", spark=spark, commit_granularity=2, progress=False, **options)
    assert res.fragments_committed == 10 and res.version == v + 5, (res.fragments_committed, res.version, v)
    assert tbl.dataset().latest_version == v + 5  # five commits, nothing else
    for i in range(1, 6):
        ds = tbl.dataset(v + i)
        ds.validate()
        filled = [f.fragment_id for f in ds.get_fragments() if f.count_rows("y IS NOT NULL") == FRAGMENT_ROWS]
        empty = [f.fragment_id for f in ds.get_fragments() if f.count_rows("y IS NULL") == FRAGMENT_ROWS]
        # each commit adds the next two fragments, in order: the last group is no smaller here
        assert filled == list(range(2 * i)) and empty == list(range(2 * i, 10)), (i, filled, empty)
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [factor * x for x in got["x"]] and sorted(got["x"]) == list(range(10 * FRAGMENT_ROWS))
