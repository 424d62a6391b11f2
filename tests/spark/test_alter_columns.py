"""Revising a UDF column's code with ``alter_columns``: the old values stay until a backfill computes them again.

On real Spark, with every UDF call counted: after the revision each value is stale; a ``where`` backfill computes
exactly the stale rows it selects and leaves the others' old values (still stale), and a plain backfill then
computes exactly the rest.
"""

from __future__ import annotations

from tests.helpers import clear_calls, counting_times, events_table, read_calls

ROWS = 4_000


def _state(tbl, column):
    return next((c.rows_valid, c.rows_stale, c.rows_missing) for c in tbl.status().columns if c.column == column)


def test_a_revised_udf_recomputes_exactly_the_stale_rows_a_where_selects_then_the_rest(db, spark, call_dir):
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_times(call_dir, 2)})
    tbl.backfill("y", spark=spark, progress=False)
    assert sorted(read_calls(call_dir)) == list(range(ROWS))
    clear_calls(call_dir)

    tbl.alter_columns({"path": "y", "udf": counting_times(call_dir, 3)})
    assert read_calls(call_dir) == []  # a schema change: no UDF runs
    assert tbl.to_arrow(["x", "y"]).to_pydict()["y"] == [2 * x for x in range(ROWS)]  # old values, still read
    assert _state(tbl, "y") == (0, ROWS, 0)
    listed = tbl.udf_columns()["y"]
    assert (listed["name"], listed["rows_valid"], listed["rows_stale"], listed["rows_missing"]) == \
        ("times_3", 0, ROWS, 0)

    result = tbl.backfill("y", where="x >= 500 AND x < 1700", spark=spark, progress=False)
    assert sorted(read_calls(call_dir)) == list(range(500, 1_700))  # the selected stale rows, each once
    assert result.rows_computed == 1_200
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [3 * x if 500 <= x < 1_700 else 2 * x for x in got["x"]]  # the others keep their values
    assert _state(tbl, "y") == (1_200, ROWS - 1_200, 0)  # still stale, outside the where
    assert db.get_job(result.job_id).rows_stale == ROWS  # what the plan found
    clear_calls(call_dir)

    result = tbl.backfill("y", spark=spark, progress=False)
    assert sorted(read_calls(call_dir)) == [x for x in range(ROWS) if not 500 <= x < 1_700]  # exactly the rest
    assert db.get_job(result.job_id).rows_stale == ROWS - 1_200
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [3 * x for x in got["x"]] and len(got["x"]) == ROWS
    assert _state(tbl, "y") == (ROWS, 0, 0)
    tbl.dataset().validate()
    clear_calls(call_dir)

    assert tbl.backfill("y", spark=spark, progress=False).rows_computed == 0 and read_calls(call_dir) == []
