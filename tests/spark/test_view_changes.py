"""Views follow every source change at the next refresh: deletes, updates, compactions, other versions."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import geneva_provider as gp
from geneva_provider.core.views.meta import SOURCE_ROW_ID
from tests.helpers import _log_calls, clear_calls, counting_double, events_table, read_calls, times


def rows(view) -> dict[int, tuple]:
    t = view.to_arrow([SOURCE_ROW_ID, "x", "y"]).to_pydict()
    return {i: (x, y) for i, x, y in zip(t[SOURCE_ROW_ID], t["x"], t["y"], strict=True)}


def expected(src, where: str | None = None) -> dict[int, tuple]:
    t = src.dataset().to_table(columns=["x"], filter=where, with_row_id=True).to_pydict()
    return {i: (x, 2 * x) for i, x in zip(t["_rowid"], t["x"], strict=True)}


@pytest.fixture
def setup(db, spark, call_dir):
    src = db.create_table("events", events_table(20_000), max_rows_per_file=2_000)
    view = db.create_materialized_view("v", src.search(None).where("x % 2 = 0").select(
        {"x": "x", "y": counting_double(call_dir)}), max_rows_per_fragment=2_500)
    assert view.refresh(spark=spark).rows_computed == 10_000
    clear_calls(call_dir)
    return src, view


def test_deleted_source_rows_leave_the_view_without_computing(setup, spark, call_dir):
    src, view = setup
    src.delete("x % 40 = 0")  # 5 % of the source rows, 500 of them in the view
    res = view.refresh(spark=spark)
    assert res.rows_computed == 0 and read_calls(call_dir) == []
    assert rows(view) == expected(src, "x % 2 = 0") and view.count_rows() == 9_500
    view.dataset().validate()


def test_an_update_recomputes_exactly_the_updated_rows(setup, spark, call_dir):
    src, view = setup
    src.dataset().update({"x": "x + 100000"}, where="x % 200 = 0")  # 1 % of the rows, all in the view
    res = view.refresh(spark=spark)
    assert res.rows_computed == 100
    assert sorted(read_calls(call_dir)) == [x + 100_000 for x in range(0, 20_000, 200)]
    assert rows(view) == expected(src, "x % 2 = 0")
    view.dataset().validate()


def test_updates_that_change_membership_and_a_delete_then_update(setup, spark, call_dir):
    src, view = setup
    src.delete("x < 1000")
    src.dataset().update({"x": "x + 1"}, where="x >= 1000 AND x < 1100")  # 50 rows leave the view, 50 join it
    res = view.refresh(spark=spark)
    assert rows(view) == expected(src, "x % 2 = 0")
    assert res.rows_computed == 50 and sorted(read_calls(call_dir)) == list(range(1_002, 1_101, 2))
    view.dataset().validate()


def test_source_compaction_costs_nothing_and_a_compacted_view_stays_incremental(setup, spark, call_dir):
    src, view = setup
    src.dataset().optimize.compact_files(target_rows_per_fragment=10_000)
    assert view.refresh(spark=spark).rows_computed == 0 and read_calls(call_dir) == []
    view.compact(target_rows_per_fragment=10_000, spark=spark)
    assert len(view.dataset().get_fragments()) == 1
    assert view.refresh(spark=spark).rows_computed == 0
    src.add(events_table(1_000, start=20_000))
    res = view.refresh(spark=spark)
    assert res.rows_computed == 500 and sorted(read_calls(call_dir)) == list(range(20_000, 21_000, 2))
    assert rows(view) == expected(src, "x % 2 = 0")
    view.dataset().validate()


def test_refresh_to_an_older_and_back_to_a_newer_source_version(setup, spark, call_dir):
    src, view = setup
    v1 = src.version
    src.add(events_table(2_000, start=20_000))
    src.delete("x < 100")
    view.refresh(spark=spark)
    assert rows(view) == expected(src, "x % 2 = 0")
    clear_calls(call_dir)
    view.refresh(src_version=v1, spark=spark)  # backwards: the appended rows go, the deleted ones come back
    assert rows(view) == {i: r for i, r in expected(src.connection.open_table("events"), "x % 2 = 0").items()
                          if i < 20_000} | {x: (x, 2 * x) for x in range(0, 100, 2)}
    assert sorted(read_calls(call_dir)) == list(range(0, 100, 2))
    view.refresh(spark=spark)  # and forwards again
    assert rows(view) == expected(src, "x % 2 = 0")
    with pytest.raises(gp.InvalidArgumentError, match="has no version 999"):
        view.refresh(src_version=999, spark=spark)
    view.dataset().validate()


def window(src, where: str | None, offset: int, limit: int | None) -> dict[int, tuple]:
    """The unshuffled offset/limit view computed directly: matching rows in row-id order, then offset and limit."""
    whole = expected(src, where)
    ids = sorted(whole)[offset:offset + limit if limit is not None else None]
    return {i: whole[i] for i in ids}


def test_offset_and_limit_keep_their_meaning_through_every_source_change(db, spark, call_dir):
    """The view is the query's rows at the refreshed version: skipped rows never come back."""
    src = db.create_table("events", events_table(200), max_rows_per_file=25)
    view = db.create_materialized_view("w", src.search(None).where("x % 2 = 0").select(
        {"x": "x", "y": counting_double(call_dir)}).offset(30).limit(5))
    view.refresh(spark=spark)
    assert rows(view) == window(src, "x % 2 = 0", 30, 5) and sorted(rows(view)) == [60, 62, 64, 66, 68]
    clear_calls(call_dir)

    src.compact(target_rows_per_fragment=1_000, spark=spark)  # same rows: nothing moves, nothing computed
    src.delete("x = 1")                                        # a row the filter excludes
    src.dataset().update({"id": "id + 1"}, where="x = 64")     # a column the view does not read
    res = view.refresh(spark=spark)
    assert rows(view) == window(src, "x % 2 = 0", 30, 5) and read_calls(call_dir) == []
    assert res.rows_computed == 0

    src.delete("x = 60")  # in the window: the window moves on by one row
    res = view.refresh(spark=spark)
    assert rows(view) == window(src, "x % 2 = 0", 30, 5) and sorted(rows(view)) == [62, 64, 66, 68, 70]
    assert read_calls(call_dir) == [70] and res.rows_computed == 1
    clear_calls(call_dir)

    src.delete("x = 10")  # before the window: it moves on again, 62 is skipped now
    view.refresh(spark=spark)
    assert sorted(rows(view)) == [64, 66, 68, 70, 72] and read_calls(call_dir) == [72]
    view.dataset().validate()


def test_an_offset_beyond_the_rows_counts_rows_appended_later(db, spark, call_dir):
    src = db.create_table("events", events_table(10))
    view = db.create_materialized_view("w", src.search(None).select(
        {"x": "x", "y": counting_double(call_dir)}).offset(20).limit(5))
    view.refresh(spark=spark)
    assert view.count_rows() == 0
    src.add(events_table(30, start=10))
    view.refresh(spark=spark)
    assert rows(view) == window(src, None, 20, 5) and sorted(read_calls(call_dir)) == list(range(20, 25))
    view.dataset().validate()


def test_a_shuffled_split_stays_a_split_through_source_changes(db, spark, call_dir):
    """shuffle(seed).limit(k) and shuffle(seed).offset(k): disjoint, together every matching row, at every version."""
    src = db.create_table("events", events_table(4_000), max_rows_per_file=500)
    q = src.search(None).where("x % 4 != 3").select({"x": "x", "y": counting_double(call_dir)}).shuffle(seed=11)
    test = db.create_materialized_view("test", q.limit(300))
    train = db.create_materialized_view("train", q.offset(300))
    changes = [
        lambda: None,
        lambda: src.add(events_table(1_000, start=4_000)),
        lambda: src.delete("x % 10 = 0"),
        lambda: src.dataset().update({"x": "x + 1"}, where="x % 4 = 2 AND x < 2000"),  # rows leave the filter
        lambda: src.compact(target_rows_per_fragment=100_000, spark=spark),
    ]
    for change in changes:
        change()
        test.refresh(spark=spark)
        train.refresh(spark=spark)
        a, b = rows(test), rows(train)
        assert len(a) == 300 and not a.keys() & b.keys()
        assert a | b == expected(src, "x % 4 != 3")
    test.dataset().validate()
    train.dataset().validate()


def counting_plus_one_of_y(log_dir: str) -> gp.UDF:
    """y + 1 (NULL stays NULL), logging the y of each row it runs on."""

    @gp.udf(data_type=pa.int64(), input_columns=["y"], name="plus_one_of_y")
    def plus_one(y: pa.Array) -> pa.Array:
        _log_calls(log_dir, [-1 if v is None else v for v in y.to_pylist()])
        return pc.add(y, 1)

    return plus_one


def test_a_view_udf_runs_again_only_when_its_own_inputs_change(db, spark, tmp_path):
    """A view copies the source UDF column y (not backfilled yet) and computes z(x): backfilling y copies the
    new y values into every row and runs z on none of them; a view UDF reading y runs on exactly the rows whose y
    changed."""
    calls_z, calls_w = tmp_path / "z", tmp_path / "w"
    calls_z.mkdir(), calls_w.mkdir()
    src = db.create_table("events", events_table(10_000), max_rows_per_file=2_000)
    src.add_columns({"y": times(3)})
    view = db.create_materialized_view("v", src.search(None).select(
        {"x": "x", "y": "y", "z": counting_double(str(calls_z)), "w": counting_plus_one_of_y(str(calls_w))}),
        max_rows_per_fragment=2_500)
    view.refresh(spark=spark)
    assert sorted(read_calls(calls_z)) == list(range(10_000)) and read_calls(calls_w) == [-1] * 10_000
    assert view.to_arrow(["y"]).column("y").null_count == 10_000
    clear_calls(calls_z), clear_calls(calls_w)

    src.backfill("y", spark=spark)
    view.refresh(spark=spark)
    assert read_calls(calls_z) == []  # x never changed
    assert sorted(read_calls(calls_w)) == [3 * x for x in range(10_000)]  # w reads y, which did
    got = view.to_arrow(["x", "y", "z", "w"]).to_pydict()
    assert got["x"] == list(range(10_000)) and got["y"] == [3 * x for x in got["x"]]
    assert got["z"] == [2 * x for x in got["x"]] and got["w"] == [3 * x + 1 for x in got["x"]]
    view.dataset().validate()
    clear_calls(calls_w)

    src.dataset().update({"y": "y + 7"}, where="x % 100 = 5")   # 100 rows: only w reads y
    src.dataset().update({"x": "x + 100000"}, where="x % 1000 = 9")  # 10 rows: only z reads x
    view.refresh(spark=spark)
    assert sorted(read_calls(calls_w)) == sorted(3 * x + 7 for x in range(5, 10_000, 100))
    assert sorted(read_calls(calls_z)) == [x + 100_000 for x in range(9, 10_000, 1_000)]
    t = src.dataset().to_table(columns=["x", "y"], with_row_id=True).to_pydict()
    got = view.to_arrow([SOURCE_ROW_ID, "x", "y", "z", "w"]).to_pydict()
    assert dict(zip(got[SOURCE_ROW_ID], zip(got["x"], got["y"], got["z"], got["w"], strict=True), strict=True)) == {
        i: (x, y, 2 * x, y + 1) for i, x, y in zip(t["_rowid"], t["x"], t["y"], strict=True)}
    view.dataset().validate()


def test_a_view_made_before_per_udf_fingerprints_keeps_refreshing(db, spark, call_dir):
    """A view whose UDF columns have no fingerprint column of their own (made by an earlier version) refreshes
    correctly: its rows recompute their UDF once when they next change, then only when the UDF's inputs do."""
    import lance

    src = db.create_table("events", events_table(4_000), max_rows_per_file=1_000)
    src.add_columns({"y": times(3)})
    view = db.create_materialized_view("v", src.search(None).select(
        {"x": "x", "y": "y", "z": counting_double(call_dir)}), max_rows_per_fragment=1_000)
    view.refresh(spark=spark)
    lance.dataset(view.uri).drop_columns(["__geneva_fp__z"])  # the layout an earlier version left
    clear_calls(call_dir)
    src.dataset().update({"x": "x + 100000"}, where="x % 100 = 0")  # 40 rows
    assert view.refresh(spark=spark).rows_computed == 40
    assert sorted(read_calls(call_dir)) == [x + 100_000 for x in range(0, 4_000, 100)]
    src.backfill("y", spark=spark)
    view.refresh(spark=spark)  # the one recompute of the rows without z's fingerprint yet
    clear_calls(call_dir)
    src.backfill("y", where="x < 10", spark=spark)  # nothing changes
    src.dataset().update({"y": "y + 1"}, where="x % 50 = 1")
    view.refresh(spark=spark)
    assert read_calls(call_dir) == []
    t = src.dataset().to_table(columns=["x", "y"], with_row_id=True).to_pydict()
    got = view.to_arrow([SOURCE_ROW_ID, "x", "y", "z"]).to_pydict()
    assert dict(zip(got[SOURCE_ROW_ID], zip(got["x"], got["y"], got["z"], strict=True), strict=True)) == {
        i: (x, y, 2 * x) for i, x, y in zip(t["_rowid"], t["x"], t["y"], strict=True)}
    view.dataset().validate()


def test_rows_a_view_udf_skipped_are_retried_for_that_udf_alone(db, spark, tmp_path):
    """A skip policy leaves z NULL on the rows it failed on (reported at their own rows); the next refresh runs z on
    those rows alone -- not the view's other UDF, whose values on those rows are valid."""
    calls_z, calls_w, flag = tmp_path / "z", tmp_path / "w", tmp_path / "broken"
    calls_z.mkdir(), calls_w.mkdir(), flag.touch()
    log_z, flag_path = str(calls_z), str(flag)

    @gp.udf(data_type=pa.int64(), name="fragile", on_error=gp.skip_on_error())
    def fragile(x: int) -> int:
        if x % 100 == 7 and os.path.exists(flag_path):
            raise ValueError(f"cannot compute x={x}")
        _log_calls(log_z, [x])
        return 3 * x

    bad = list(range(7, 3_000, 100))
    src = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    view = db.create_materialized_view("v", src.search(None).select(
        {"x": "x", "z": fragile, "w": counting_double(str(calls_w))}), max_rows_per_fragment=1_000)
    res = view.refresh(spark=spark)
    assert res.rows_failed == len(bad)
    got = view.to_arrow(["x", "z", "w"]).to_pydict()
    assert [x for x, z in zip(got["x"], got["z"], strict=True) if z is None] == bad
    assert got["w"] == [2 * x for x in got["x"]]
    by_address = {r["_rowaddr"]: r["x"] for r in view.dataset().to_table(columns=["x"], with_row_address=True)
                  .to_pylist()}
    assert sorted(by_address[a] for a in view.get_failed_row_addresses(res.job_id, "z")) == bad

    flag.unlink()
    clear_calls(calls_z), clear_calls(calls_w)
    assert view.refresh(spark=spark).rows_computed == len(bad)
    assert sorted(read_calls(calls_z)) == bad and read_calls(calls_w) == []
    got = view.to_arrow(["x", "z", "w"]).to_pydict()
    assert got["z"] == [3 * x for x in got["x"]] and got["w"] == [2 * x for x in got["x"]]
    assert view.refresh(spark=spark).rows_computed == 0
    view.dataset().validate()
