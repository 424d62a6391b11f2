"""Correct and cheap under every table change: compaction, deletes, updates, merges, filters, UDF changes.

UDF rows are counted in the Spark workers (each call logs its x), so "computes 0 rows" means the
UDF really ran on nothing.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.store.layout import JobStore, LedgerKey, PlanFamilyKey, parse_key
from geneva_provider.stages import plan_backfill, run_apply, run_write_commit, verify
from tests.helpers import clear_calls, counting_array_triple, counting_double, events_table, read_calls, times


def values(tbl, column: str) -> dict[int, object]:
    t = tbl.to_arrow(["x", column])
    return dict(zip(t.column("x").to_pylist(), t.column(column).to_pylist(), strict=True))


@pytest.fixture(scope="module")
def million(tmp_path_factory, spark):
    """A fully backfilled 1M-row table of 100 fragments, with deletes; re-made per test that changes it."""
    def make(name: str, call_dir: str):
        db = gp.connect(str(tmp_path_factory.mktemp(name)))
        tbl = db.create_table("events", events_table(1_000_000), max_rows_per_file=10_000)
        tbl.delete("x % 97 = 0")
        tbl.add_columns({"y": counting_array_triple(call_dir)})
        assert tbl.backfill("y", spark=spark).rows_computed == 1_000_000 - 10_310
        clear_calls(call_dir)
        return tbl

    return make


@pytest.mark.parametrize("how", ["tbl.compact on Spark", "compact_files"])
def test_compaction_costs_no_recompute(million, spark, call_dir, how):
    tbl = million(how.replace(" ", "_").replace(".", "_"), call_dir)
    before = tbl.to_arrow(["id", "x", "y"]).sort_by("id")
    assert len(tbl.dataset().get_fragments()) == 100
    if how == "compact_files":
        tbl.dataset().optimize.compact_files(target_rows_per_fragment=95_000)
    else:
        result = tbl.compact(target_rows_per_fragment=95_000, spark=spark)
        assert result.fragments_removed == 100 and result.fragments_added == 10
    assert len(tbl.dataset().get_fragments()) == 10
    res = tbl.backfill("y", spark=spark)
    assert res.rows_computed == 0 and read_calls(call_dir) == [] and res.fragments_committed == 0
    after = tbl.to_arrow(["id", "x", "y"]).sort_by("id")
    assert after.equals(before) and after.num_rows == 1_000_000 - 10_310
    assert tbl.count_rows("x % 97 = 0") == 0
    tbl.dataset().validate()

    # 10 % more rows, compacted together with the old ones: exactly the new rows are computed.
    tbl.add(events_table(100_000, start=1_000_000))
    tbl.compact(target_rows_per_fragment=200_000, spark=spark) if how != "compact_files" else \
        tbl.dataset().optimize.compact_files(target_rows_per_fragment=200_000)
    res = tbl.backfill("y", spark=spark)
    assert res.rows_computed == 100_000 and sorted(read_calls(call_dir)) == list(range(1_000_000, 1_100_000))
    assert tbl.count_rows("y IS NULL") == 0 and tbl.count_rows("y != x * 3") == 0
    tbl.dataset().validate()


def test_distributed_compaction_equals_single_process_compaction(db, spark):
    data = events_table(30_000)
    a = db.create_table("a", data, max_rows_per_file=1_000)
    b = db.create_table("b", data, max_rows_per_file=1_000)
    for t in (a, b):
        t.delete("x % 7 = 0")
    a.compact(target_rows_per_fragment=8_000, spark=spark)
    b.dataset().optimize.compact_files(target_rows_per_fragment=8_000)
    ta = a.dataset().to_table(with_row_id=True)
    tb = b.dataset().to_table(with_row_id=True)
    assert ta.equals(tb)  # same rows, same order, same stable row ids
    sizes = [[f.count_rows() for f in t.dataset().get_fragments()] for t in (a, b)]
    assert sizes[0] == sizes[1]
    a.dataset().validate()


def test_compaction_leaves_a_live_backfills_fragments_alone(db, spark, call_dir):
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark, where="x < 10000")        # fragments 0-4 done
    tbl.add(events_table(4_000, start=20_000))               # fragment 10 new
    summary = plan_backfill(tbl.ref, "y")                    # a live backfill: fragments 5-10
    run_apply(summary.plan_uri, spark)
    result = tbl.compact(target_rows_per_fragment=95_000, spark=spark)
    assert result.excluded == list(range(5, 11)) and result.fragments_removed == 5
    written = run_write_commit(summary.plan_uri, spark)
    assert written.fragments_vanished == [] and written.fragments_committed == 6
    verify(summary.plan_uri)
    assert values(tbl, "y") == {x: 2 * x for x in range(24_000)}
    tbl.dataset().validate()


def test_compaction_with_every_fragment_held_reports_them_and_changes_nothing(db, spark, call_dir):
    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=400)
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl.ref, "y")  # a live backfill holds all 10 fragments
    run_apply(summary.plan_uri, spark)
    version = tbl.version
    result = tbl.compact(target_rows_per_fragment=10_000, spark=spark)
    assert result.excluded == list(range(10)) and result.fragments_removed == 0 and tbl.version == version
    assert run_write_commit(summary.plan_uri, spark).fragments_committed == 10
    tbl.dataset().validate()


def test_where_then_unfiltered_backfill_computes_each_row_once(db, spark, call_dir):
    tbl = db.create_table("events", events_table(100), max_rows_per_file=30)
    tbl.add_columns({"y": counting_double(call_dir)})
    assert tbl.backfill("y", where="x < 20", spark=spark).rows_computed == 20
    assert sorted(read_calls(call_dir)) == list(range(20))
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 80
    assert sorted(read_calls(call_dir)) == list(range(20, 100))
    assert values(tbl, "y") == {x: 2 * x for x in range(100)}


def test_update_and_merge_insert_recompute_exactly_the_changed_rows(db, spark, call_dir):
    tbl = db.create_table("events", events_table(50_000), max_rows_per_file=5_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark)
    clear_calls(call_dir)
    tbl.dataset().update({"x": "x + 1000000"}, where="id % 100 = 1")             # 500 rows
    changes = pa.table({"id": pa.array(range(2, 50_000, 100), pa.int64()),       # 500 rows ...
                        "x": pa.array([i + 2_000_000 for i in range(2, 50_000, 100)], pa.int64())})
    tbl.dataset().merge_insert("id").when_matched_update_all().execute(changes)
    same = pa.table({"id": pa.array(range(3, 50_000, 100), pa.int64()),          # ... and 500 rewritten unchanged
                     "x": pa.array(range(3, 50_000, 100), pa.int64())})
    tbl.dataset().merge_insert("id").when_matched_update_all().execute(same)
    res = tbl.backfill("y", spark=spark)
    changed = [i + 1_000_000 for i in range(1, 50_000, 100)] + [i + 2_000_000 for i in range(2, 50_000, 100)]
    assert res.rows_computed == 1_000 and sorted(read_calls(call_dir)) == sorted(changed)
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]]
    tbl.dataset().validate()


def test_narrow_where_backfills_and_dependent_columns(db, spark, call_dir):
    tbl = db.create_table("events", events_table(100_000), max_rows_per_file=10_000)
    tbl.add_columns({"a": times(2), "b": (counting_array_triple(call_dir), ["a"])})
    tbl.backfill("a", where="x % 100 != 0", spark=spark)   # 1 % of the rows, in every fragment, left out
    tbl.backfill("b", spark=spark)
    clear_calls(call_dir)

    def files():
        return {f.fragment_id: sorted(df.path for df in f.metadata.files) for f in tbl.dataset().get_fragments()}

    # A filtered pass over rows whose values are valid computes nothing and rewrites no file.
    before = files()
    assert tbl.backfill("a", where="x % 100 = 5", spark=spark).rows_computed == 0
    assert files() == before
    # The 1 % left out: computed, and a column computed from `a` recomputes exactly those rows.
    assert tbl.backfill("a", where="x % 100 = 0", spark=spark).rows_computed == 1_000
    res = tbl.backfill("b", spark=spark)
    assert res.rows_computed == 1_000 and sorted(read_calls(call_dir)) == list(range(0, 200_000, 200))
    got = tbl.to_arrow(["x", "a", "b"]).to_pydict()
    assert got["a"] == [2 * x for x in got["x"]] and got["b"] == [3 * a for a in got["a"]]
    tbl.dataset().validate()


def test_a_changed_closure_recomputes_an_identical_udf_does_not(db, spark):
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=500)
    scaled = times
    tbl.add_columns({"y": scaled(2)})
    # Every chunk checkpointed (a cheap UDF's chunks are not, unless the checkpoint size is the user's).
    assert tbl.backfill("y", spark=spark, checkpoint_size=250).rows_computed == 2_000
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": scaled(2)})             # identical: its checkpoints are reused
    assert tbl.backfill("y", spark=spark).rows_computed == 0
    assert values(tbl, "y") == {x: 2 * x for x in range(2_000)}
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": scaled(5)})             # same code, another captured constant
    assert tbl.backfill("y", spark=spark).rows_computed == 2_000
    assert values(tbl, "y") == {x: 5 * x for x in range(2_000)}


def test_a_fragment_deleted_during_a_backfill_is_reported_and_the_rest_lands(db, spark, call_dir):
    tbl = db.create_table("events", events_table(8_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl.ref, "y")
    run_apply(summary.plan_uri, spark)
    tbl.delete("x >= 2000 AND x < 4000")                     # all of fragment 1
    written = run_write_commit(summary.plan_uri, spark)
    assert written.fragments_vanished == [1] and written.fragments_committed == 3
    result = verify(summary.plan_uri)
    assert result.fragments_deleted == [1] and result.rows_verified == 6_000
    assert values(tbl, "y") == {x: 2 * x for x in range(8_000) if not 2_000 <= x < 4_000}
    assert tbl.backfill("y", spark=spark).rows_computed == 0
    tbl.dataset().validate()


def test_rows_compacted_away_during_a_backfill_are_computed_where_they_now_live(db, spark, call_dir):
    tbl = db.create_table("events", events_table(8_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan_backfill(tbl.ref, "y")
    run_apply(summary.plan_uri, spark)
    tbl.dataset().optimize.compact_files(target_rows_per_fragment=4_000, excluded_fragment_ids=[0, 1])
    written = run_write_commit(summary.plan_uri, spark)
    assert written.fragments_vanished == [2, 3] and written.fragments_committed == 2
    with pytest.raises(gp.VerificationError, match=r"fragment 2 \(2000 rows\) no longer exists: it was compacted"):
        verify(summary.plan_uri)
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 4_000
    assert sorted(read_calls(call_dir)) == list(range(4_000, 8_000))
    assert values(tbl, "y") == {x: 2 * x for x in range(8_000)}
    tbl.dataset().validate()


def test_checkpoint_cleanup_keeps_a_running_jobs_and_removes_what_nothing_can_use(db, spark, call_dir):
    import datetime as dt

    from geneva_provider.core.store.layout import PlanKey, parse_batch_key

    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=2_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    for hour in range(5):  # hourly ingest + backfill
        tbl.backfill("y", spark=spark, checkpoint_size=500)
        tbl.add(events_table(1_000, start=20_000 + 1_000 * hour))
    live = plan_backfill(tbl.ref, "y")  # a running job: planned and applied, not committed
    run_apply(live.plan_uri, spark)
    store = tbl.checkpoint_store
    before = store.list_keys("")
    result = tbl.cleanup_checkpoints(older_than=dt.timedelta(0))
    after = store.list_keys("")
    assert result.total == len(before) - len(after) > 0 and result.kept_for_live_jobs > 0
    # What is left: the live plan, its checkpoints, and the ledger; nothing of the finished jobs.
    assert [k for k in after if isinstance(parse_key(k), PlanFamilyKey)] == [PlanKey(live.job_id).key()]
    live_frags = {bk.frag_id for k in after if (bk := parse_batch_key(k)) is not None}
    assert live_frags == {14}  # the one fragment the running job computes
    # The running job still lands, and the next run needs none of what was removed.
    assert run_write_commit(live.plan_uri, spark).fragments_committed == 1
    verify(live.plan_uri)
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []
    assert values(tbl, "y") == {x: 2 * x for x in range(25_000)}
    tbl.cleanup_checkpoints(older_than=dt.timedelta(0))
    assert [k for k in store.list_keys("") if not isinstance(parse_key(k), LedgerKey)] == []


def test_tables_without_stable_row_ids_keep_their_values_through_compaction(db, spark, call_dir):
    tbl = db.create_table("plain", events_table(20_000), max_rows_per_file=1_000, stable_row_ids=False)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark)
    tbl.delete("x % 10 = 0")
    tbl.dataset().optimize.compact_files(target_rows_per_fragment=10_000)
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []
    assert values(tbl, "y") == {x: 2 * x for x in range(20_000) if x % 10}
    tbl.dataset().validate()


def test_a_compaction_racing_a_backfill_in_another_process(db, spark, call_dir):
    """A backfill runs in its own process while this one compacts the table: both land, nothing is lost."""
    import subprocess
    import sys
    import textwrap
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    tbl = db.create_table("events", events_table(20_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.0004)})
    tbl.backfill("y", where="x < 10000", spark=spark)            # fragments 0-9 hold values already
    clear_calls(call_dir)
    script = textwrap.dedent(f"""
        import geneva_provider as gp
        from geneva_provider.stages import InProcessRunner
        spark = InProcessRunner(parallelism=2)
        res = gp.connect({db.uri!r}).open_table("events").backfill("y", spark=spark, checkpoint_size=500)
        print("COMPUTED", res.rows_computed, "VANISHED", res.fragments_vanished)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    store = tbl.checkpoint_store
    earlier = set(store.list_keys(""))
    deadline = time.monotonic() + 120
    while not [bk for bk in JobStore(store).batches("") if bk.key() not in earlier]:  # it is computing
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    result = tbl.compact(target_rows_per_fragment=5_000, spark=spark)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert result.fragments_removed == 10 and result.excluded == list(range(10, 20))
    assert "COMPUTED 10000 VANISHED []" in out
    assert values(tbl, "y") == {x: 2 * x for x in range(20_000)}
    assert sorted(read_calls(call_dir)) == list(range(10_000, 20_000))
    assert tbl.backfill("y", spark=spark).rows_computed == 0
    tbl.dataset().validate()


def test_a_fingerprint_column_dropped_outside_the_package_is_restored_by_the_next_backfill(db, spark, call_dir):
    """pylance drops ``__geneva_fp__y``, then rows are updated: the next backfill recomputes the rows whose value
    nothing proves valid any more (the updated ones), restores every fingerprint and commits; later ones stay cheap."""
    import lance

    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    # Every chunk checkpointed (a cheap UDF's chunks are not, unless the checkpoint size is the user's): the
    # checkpoints are what proves the rows nobody updated valid once the fingerprints are gone.
    tbl.backfill("y", spark=spark, checkpoint_size=250)
    lance.dataset(tbl.uri).drop_columns(["__geneva_fp__y"])
    tbl.dataset().update({"x": "x + 100000"}, where="x % 100 = 0")  # 40 rows, y now stale
    clear_calls(call_dir)
    tbl.backfill("y", spark=spark)
    assert sorted(read_calls(call_dir)) == [x + 100_000 for x in range(0, 4_000, 100)]
    got = tbl.dataset().to_table(columns=["x", "y", "__geneva_fp__y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and len(got["x"]) == 4_000
    assert None not in got["__geneva_fp__y"]
    tbl.dataset().validate()
    clear_calls(call_dir)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []
    tbl.dataset().update({"x": "x + 200000"}, where="x % 1000 = 1")  # 4 rows
    assert tbl.backfill("y", spark=spark).rows_computed == 4
    assert sorted(read_calls(call_dir)) == [x + 200_000 for x in range(1, 4_000, 1_000)]
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]]
    tbl.dataset().validate()


def test_a_plain_column_named_like_a_fingerprint_column_is_refused_and_nothing_changes(db, spark, call_dir):
    import lance

    tbl = db.create_table("events", events_table(100), max_rows_per_file=30)
    lance.dataset(tbl.uri).add_columns({"__geneva_fp__y": "x * 3"})
    version = tbl.version
    with pytest.raises(gp.ColumnError, match=r"'__geneva_fp__y'.*'events'|'events'.*'__geneva_fp__y'"):
        tbl.add_columns({"y": counting_double(call_dir)})
    assert tbl.version == version and "y" not in tbl.dataset().schema.names
    assert tbl.dataset().to_table(columns=["__geneva_fp__y"]).column(0).to_pylist() == [3 * x for x in range(100)]
    # A fingerprint column left behind when its UDF column was dropped outside the package goes when it is re-added.
    tbl.add_columns({"z": counting_double(call_dir)})
    tbl.backfill("z", spark=spark)
    lance.dataset(tbl.uri).drop_columns(["z"])
    tbl.add_columns({"z": counting_double(call_dir)})
    assert tbl.to_arrow(["z"]).column("z").null_count == 100  # the old fingerprints no longer vouch for NULLs
    tbl.backfill("z", spark=spark)  # its batch checkpoints (same UDF, same inputs) may serve the values
    got = tbl.dataset().to_table(columns=["x", "z", "__geneva_fp__z"]).to_pydict()
    assert got["z"] == [2 * x for x in range(100)] and None not in got["__geneva_fp__z"]
    tbl.dataset().validate()
    # Fingerprints replaced outside the package by a plain column of that name: the backfill refuses to trust them.
    lance.dataset(tbl.uri).drop_columns(["__geneva_fp__z"])
    lance.dataset(tbl.uri).add_columns({"__geneva_fp__z": "CAST(x AS BIGINT)"})
    version = tbl.version
    with pytest.raises(gp.ColumnError, match=r"'z'.*'events'.*'__geneva_fp__z'"):
        tbl.backfill("z", spark=spark)
    assert tbl.version == version
