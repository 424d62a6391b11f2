"""Materialized views on real Lance tables and real Spark, checked against pyarrow."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import geneva_provider as gp
from geneva_provider.core.views.meta import IS_SET, SOURCE_ROW_ID, view_info
from tests.helpers import clear_calls, counting_double, events_table, read_calls


def data_files(tbl) -> dict[int, list[str]]:
    return {f.fragment_id: sorted(df.path for df in f.metadata.files) for f in tbl.dataset().get_fragments()}


def expected(src, where, columns, offset=0, limit=None):
    """The (unshuffled) view computed directly with pylance + pyarrow: filter in scan order, offset, limit."""
    t = src.dataset().to_table(filter=where, with_row_id=True).slice(offset, limit)
    return {out: t.column(col).to_pylist() for out, col in columns.items()} | {
        SOURCE_ROW_ID: t.column("_rowid").cast(pa.int64()).to_pylist()}


@pytest.fixture
def source(db):
    return db.create_table("events", events_table(20_000), max_rows_per_file=5_000)


@pytest.mark.parametrize(("where", "seed", "offset", "limit"), [
    ("x % 3 = 0", None, 0, None),        # filter + column selection + UDF column
    (None, 42, 0, None),                 # shuffle
    ("x >= 100", 7, 10, 1_000),          # shuffle + offset + limit
    ("x < 5000", None, 250, 100),        # offset + limit in scan order
])
def test_view_matches_the_query_computed_directly(db, source, spark, call_dir, where, seed, offset, limit):
    q = source.search(None).where(where).select({"key": "id", "x": "x", "y": counting_double(call_dir)})
    if seed is not None:
        q = q.shuffle(seed=seed)
    view = q.offset(offset).limit(limit).create_materialized_view(db, "v")
    res = view.refresh(spark=spark)
    got = view.to_arrow().to_pydict()
    if seed is None:
        want = expected(source, where, {"key": "id", "x": "x"}, offset, limit)
    else:
        # Shuffled: the rows of the whole shuffled query (a permutation of the filtered rows, not in scan order),
        # then offset and limit -- checked against the filter computed directly, not against the shuffle's code.
        whole = expected(source, where, {"key": "id", "x": "x"})
        order = db.create_materialized_view("whole", q).to_arrow([SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_pylist()
        assert sorted(order) == sorted(whole[SOURCE_ROW_ID]) and order != whole[SOURCE_ROW_ID]
        by_id = {rid: (k, x) for rid, k, x in zip(whole[SOURCE_ROW_ID], whole["key"], whole["x"], strict=True)}
        ids = order[offset:offset + limit if limit is not None else None]
        want = {SOURCE_ROW_ID: ids, "key": [by_id[i][0] for i in ids], "x": [by_id[i][1] for i in ids]}
    assert got[SOURCE_ROW_ID] == want[SOURCE_ROW_ID]
    assert got["key"] == want["key"] and got["x"] == want["x"]
    assert got["y"] == [2 * x for x in want["x"]] and all(got[IS_SET])
    assert res.rows_computed == len(want["x"]) == len(read_calls(call_dir))
    view.dataset().validate()


def test_incremental_refresh_computes_only_new_matching_rows(db, spark, call_dir):
    src = db.create_table("events", events_table(100_000), max_rows_per_file=20_000)
    q = src.search(None).where("x % 2 = 0").select({"x": "x", "y": counting_double(call_dir)}).shuffle(seed=1)
    view = db.create_materialized_view("evens", q, max_rows_per_fragment=10_000)
    assert view.refresh(spark=spark).rows_computed == 50_000
    old_files = data_files(view)
    clear_calls(call_dir)

    src.add(events_table(10_000, start=100_000))
    res = view.refresh(spark=spark)
    new_even = list(range(100_000, 110_000, 2))
    assert sorted(read_calls(call_dir)) == new_even
    assert res.rows_computed == 5_000 and res.rows_reused == 50_000
    after = data_files(view)
    assert {f: after[f] for f in old_files} == old_files  # old view fragments untouched
    # Equal to a full recompute of the same query.
    full = db.create_materialized_view("full", src.search(None).where("x % 2 = 0").select(
        {"x": "x", "y": counting_double(call_dir)}))
    full.refresh(spark=spark)
    got = view.to_arrow(["x", "y"]).sort_by("x")
    assert got.equals(full.to_arrow(["x", "y"]).sort_by("x"))
    # New rows were shuffled among themselves (with the view's seed), after the old ones.
    tail = view.to_arrow(["x"]).column("x").to_pylist()[50_000:]
    assert sorted(tail) == new_even and tail != new_even
    view.dataset().validate()


def test_source_changes_invalidate_only_the_view_rows_that_read_them(db, spark, call_dir):
    src = db.create_table("events", events_table(8_000), max_rows_per_file=2_000)

    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def plus_one(x: pa.Array) -> pa.Array:
        return pc.add(x, 1)

    src.add_columns({"x1": plus_one, "other": (plus_one, ["id"])})
    src.backfill("x1", spark=spark)
    view = db.create_materialized_view("v", src.search(None).select({"x1": "x1", "y": counting_double(call_dir)}),
                                       max_rows_per_fragment=2_000)  # view fragment i reads source fragment i
    view.refresh(spark=spark)
    clear_calls(call_dir)

    src.backfill("other", spark=spark)  # a column the view does not read
    assert view.refresh(spark=spark).rows_computed == 0

    src.backfill("x1", where="x < 3000", spark=spark)  # values still valid: nothing recomputed, nothing rewritten
    assert view.refresh(spark=spark).rows_computed == 0

    src.dataset().update({"x1": "x1 + 100"}, where="x >= 1000 AND x < 3000")  # a column the view copies
    res = view.refresh(spark=spark)  # x1 copied again into those rows; y, of x alone, not run at all
    assert res.rows_computed == 2_000 and read_calls(call_dir) == []
    src.dataset().update({"x": "x + 8000"}, where="x >= 7000")  # y's input
    res = view.refresh(spark=spark)
    assert res.rows_computed == 1_000 and sorted(read_calls(call_dir)) == list(range(15_000, 16_000))
    got = view.to_arrow(["x1", "y"]).to_pydict()
    assert got["x1"] == [x + 1 + (100 if 1_000 <= x < 3_000 else 0) for x in range(8_000)]
    assert got["y"] == [2 * x + (16_000 if x >= 7_000 else 0) for x in range(8_000)]
    view.dataset().validate()


def test_format_1_view_without_stable_row_ids(db, spark, call_dir):
    src = db.create_table("plain", events_table(3_000), max_rows_per_file=1_000, stable_row_ids=False)
    with pytest.warns(UserWarning, match="no stable row ids"):
        view = db.create_materialized_view("v1", src.search(None).where("x < 1500").select(
            {"x": "x", "y": counting_double(call_dir)}))
    assert view_info(view.schema.metadata, "v1").format == "1"
    res = view.refresh(spark=spark)
    assert res.rows_computed == 1_500
    got = view.to_arrow(["x", "y", SOURCE_ROW_ID]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and got["x"] == list(range(1_500))
    assert got[SOURCE_ROW_ID][1_200] == (1 << 32) + 200  # a row address: fragment 1, offset 200
    src.add(events_table(10, start=3_000))
    with pytest.raises(gp.InvalidArgumentError, match=r"stable_row_ids=True"):
        view.refresh(spark=spark)
    with pytest.raises(gp.InvalidArgumentError, match="format 1"):
        view.refresh(src_version=src.version, spark=spark)
    assert view.refresh(src_version=src.version - 1, spark=spark).rows_computed == 0


def test_chained_views_and_fragment_splitting(db, spark, call_dir):
    src = db.create_table("events", events_table(100), max_rows_per_file=50)
    parent = db.create_materialized_view("parent", src.search(None).where("x % 2 = 0").select(
        {"x": "x", "y": counting_double(call_dir)}))
    parent.refresh(spark=spark)
    child = db.create_materialized_view("child", parent.search(None).where("x % 4 = 0").select(["x", "y"]))
    child.refresh(spark=spark)
    assert sorted(child.to_arrow(["x"]).column("x").to_pylist()) == list(range(0, 100, 4))

    src.add(events_table(30, start=100))       # 15 new even rows
    n_frags = len(parent.dataset().get_fragments())
    res = parent.refresh(max_rows_per_fragment=7, spark=spark)
    assert res.rows_computed == 15
    sizes = [f.count_rows() for f in parent.dataset().get_fragments()][n_frags:]
    assert sizes == [7, 7, 1]
    child.refresh(spark=spark)
    got = child.to_arrow(["x", "y"]).sort_by("x").to_pydict()
    assert got["x"] == list(range(0, 130, 4)) and got["y"] == [2 * x for x in got["x"]]
    child.dataset().validate()


