"""A multi-output UDF (``-> Columns[T]``) on Spark: one call per row computes every column of its group.

UDF calls are counted in the Spark workers (each call logs its x), so "once per row" means the UDF ran
exactly once per row for all three columns, and an input update recomputes exactly the changed rows.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp
from tests.helpers import clear_calls, counting_dims, dims_of, events_table, read_calls

COLUMNS = ["height", "label", "ratio"]


def group_values(tbl) -> dict[int, tuple]:
    t = tbl.to_arrow(["x", *COLUMNS])
    return {x: (h, lab, r) for x, h, lab, r in zip(*(t.column(c).to_pylist() for c in ["x", *COLUMNS]), strict=True)}


def test_a_group_is_computed_once_per_row_and_an_update_recomputes_only_changed_rows(db, spark, call_dir):
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=250)  # 8 fragments
    tbl.add_columns(counting_dims(call_dir))
    schema = tbl.schema
    assert [schema.field(c).type for c in COLUMNS] == [pa.int64(), pa.string(), pa.float64()]

    res = tbl.backfill("label", spark=spark)  # any column of the group backfills the group
    assert res.rows_computed == 2_000 and res.fragments_committed == 8
    assert sorted(read_calls(call_dir)) == list(range(2_000))  # once per row, for all three columns
    assert group_values(tbl) == {x: dims_of(x) for x in range(2_000)}
    assert tbl.count_rows("ratio IS NULL") == len(range(0, 2_000, 7))
    assert tbl.count_rows("height >= 1510 AND label LIKE 'n1%'") == 500  # real, filterable columns
    tbl.dataset().validate()

    clear_calls(call_dir)
    assert tbl.backfill("height", spark=spark).rows_computed == 0 and read_calls(call_dir) == []

    tbl.dataset().update({"x": "x + 100000"}, where="id % 100 = 3")  # 20 rows' input changed
    changed = [x + 100_000 for x in range(3, 2_000, 100)]
    res = tbl.backfill("ratio", spark=spark)
    assert res.rows_computed == 20
    assert sorted(read_calls(call_dir)) == changed  # each changed row once, all its columns with it
    assert group_values(tbl) == {x: dims_of(x) for x in [*(x for x in range(2_000) if x % 100 != 3), *changed]}
    tbl.dataset().validate()


def test_a_group_in_a_materialized_view(db, spark, call_dir):
    src = db.create_table("src", events_table(600), max_rows_per_file=200)
    view = db.create_materialized_view("v", src.search(None).select(["id", "x"]))
    view.refresh(spark=spark)
    view.add_columns(gp.UnpackedUDF(counting_dims(call_dir), prefix="d_"))
    assert view.backfill("d_height", spark=spark).rows_computed == 600
    assert sorted(read_calls(call_dir)) == list(range(600))

    src.dataset().update({"x": "x + 5000"}, where="id % 50 = 0")  # 12 rows
    view.refresh(spark=spark)
    clear_calls(call_dir)
    assert view.backfill("d_label", spark=spark).rows_computed == 12
    assert sorted(read_calls(call_dir)) == [x + 5_000 for x in range(0, 600, 50)]
    t = view.to_arrow(["x", "d_height", "d_label", "d_ratio"])
    got = {x: (h, lab, r) for x, h, lab, r in zip(*(c.to_pylist() for c in t.columns), strict=True)}
    assert got == {x: dims_of(x) for x in t.column("x").to_pylist()} and len(got) == 600
    view.dataset().validate()


def test_a_group_is_dropped_whole_or_not_at_all(db, spark, call_dir):
    tbl = db.create_table("events", events_table(100))
    tbl.add_columns(counting_dims(call_dir))
    tbl.backfill("height", spark=spark)
    version = tbl.version
    with pytest.raises(gp.ColumnError, match=r"computes the columns \['height', 'label', 'ratio'\] together"):
        tbl.drop_columns(["label"])
    assert tbl.version == version and tbl.schema.names[-4:] == [*COLUMNS, "__geneva_fp__height"]
    tbl.drop_columns(COLUMNS)
    assert tbl.schema.names == ["id", "x"]
    tbl.dataset().validate()
