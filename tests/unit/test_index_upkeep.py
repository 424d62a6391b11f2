"""Indexes kept fresh (issue 43): the follower graph's index step, and the index stage of a backfill, a view's
refresh and a compaction, on real Lance tables and the in-process task runner (no JVM; tests/spark runs the
must-show cases on Spark)."""

from __future__ import annotations

import logging

import lance
import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.index_models import IndexSpec
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.pipeline.followers import (
    BackfillColumn,
    ColumnBackfilled,
    Compacted,
    RefreshIndex,
    RefreshView,
    TableChange,
    TableFacts,
    ViewRefreshed,
    followers_of,
    step_from_json,
)
from geneva_provider.pipeline.indexes import create_index, index_stats, indexes_on, refresh_indexes
from geneva_provider.pipeline.indexes.drift import DRIFT_RETRAIN_FACTOR
from geneva_provider.stages import InProcessRunner
from tests.index_data import DIM, clustered, embedding, make_embed, queries, recall, write_table


def pq_spec() -> IndexSpec:
    return IndexSpec.of("vec", "IVF_PQ", metric="l2", num_partitions=16, num_sub_vectors=8)


@gp.udf(data_type=pa.int64(), auto_backfill=True)
def doubled(id: int) -> int:
    return 2 * id


# ------------------------------------------------------------------ the walk (plain data)
@pytest.fixture
def schemas(db):
    """The schemas of a table ``src`` (plain ``id``, ``auto_backfill`` UDF column ``two``) and a view ``evens``
    over it refreshed on change (with its own ``auto_backfill`` column ``t``): what the rules read."""
    src = db.create_table("src", pa.table({"id": list(range(20))}), max_rows_per_file=5)
    src.add_columns({"two": doubled})
    evens = db.create_materialized_view("evens", src.search(None).where("id % 2 = 0").select({"id": "id"}),
                                        refresh_on_change=True)
    evens.add_columns({"t": doubled})
    return {"src": src.schema, "evens": evens.schema}


def test_a_backfill_is_followed_by_a_refresh_of_the_indexes_on_its_column_only(schemas):
    tables = {"src": TableFacts(schemas["src"], {"two_idx": ("two",), "id_idx": ("id",)}),
              "evens": TableFacts(schemas["evens"])}
    plan = followers_of(ColumnBackfilled(table="src", column="two"), tables)
    assert plan.steps() == [RefreshIndex(table="src", index="two_idx")]
    assert plan.steps()[0].label("src") == "index_two_idx" and plan.steps()[0].label("other") == "index_src_two_idx"
    assert step_from_json(plan.steps()[0].model_dump_json()) == plan.steps()[0]


def test_a_change_refreshes_given_columns_indexes_and_udf_columns_indexes_after_their_backfill(schemas):
    tables = {"src": TableFacts(schemas["src"], {"two_idx": ("two",), "id_idx": ("id",)}),
              "evens": TableFacts(schemas["evens"], {"t_idx": ("t",), "eid": ("id",)})}
    plan = followers_of(TableChange(table="src"), tables)
    steps = plan.steps()
    order = {s: i for i, s in enumerate(steps)}
    assert set(steps) == {BackfillColumn(table="src", column="two"), RefreshView(view="evens", source="src"),
                          RefreshIndex(table="src", index="id_idx"), RefreshIndex(table="src", index="two_idx"),
                          BackfillColumn(table="evens", column="t"), RefreshIndex(table="evens", index="eid"),
                          RefreshIndex(table="evens", index="t_idx")}
    # the UDF column's index after its backfill; the view's indexes after every step writing the view
    assert order[RefreshIndex(table="src", index="two_idx")] > order[BackfillColumn(table="src", column="two")]
    for index in ("eid", "t_idx"):
        i = order[RefreshIndex(table="evens", index=index)]
        assert i > order[BackfillColumn(table="evens", column="t")] > order[RefreshView(view="evens", source="src")]
        assert order[BackfillColumn(table="evens", column="t")] in plan.followers[i].after
    # the given column's index follows the change itself, waiting for nothing before it but what writes src
    follower = plan.followers[order[RefreshIndex(table="src", index="id_idx")]]
    assert follower.cause == TableChange(table="src")
    assert {steps[j] for j in follower.after} == {BackfillColumn(table="src", column="two")}


def test_a_view_refresh_and_a_compaction_refresh_every_index_of_their_table(schemas):
    tables = {"src": TableFacts(schemas["src"], {"two_idx": ("two",), "id_idx": ("id",)}),
              "evens": TableFacts(schemas["evens"], {"eid": ("id",)})}
    assert followers_of(Compacted(table="src"), tables).steps() == [
        RefreshIndex(table="src", index="id_idx"), RefreshIndex(table="src", index="two_idx")]
    assert followers_of(Compacted(table="evens"), tables).steps() == [RefreshIndex(table="evens", index="eid")]
    steps = followers_of(ViewRefreshed(table="evens"), tables).steps()
    assert steps == [BackfillColumn(table="evens", column="t"), RefreshIndex(table="evens", index="eid")]
    assert followers_of(Compacted(table="src"), {"src": TableFacts(schemas["src"])}).steps() == []


# ------------------------------------------------------------------ the index stage of a job
def embedded(db, n: int = 4000):
    """Table ``docs``: ``id`` and ``vec`` = ``embedding(id, 0)`` (a UDF column) in 500-row fragments, with an IVF_PQ
    index built by the package on ``vec``."""
    runner = InProcessRunner(parallelism=2)
    embed = make_embed()
    tbl = db.create_table("docs", pa.table({"id": pa.array(range(n), pa.int64())}), max_rows_per_file=500)
    tbl.add_columns({"vec": embed(model=0)})
    tbl.backfill("vec", spark=runner)
    create_index(tbl.ref, pq_spec(), runner)
    return tbl, embed, runner


def test_a_backfill_of_appended_rows_indexes_them_in_the_same_job_add_only(db):
    tbl, _, runner = embedded(db)
    old = {s["uuid"] for s in tbl.to_lance().list_indices()}
    tbl.add(pa.table({"id": pa.array(range(4000, 4600), pa.int64())}))
    result = tbl.backfill("vec", spark=runner)
    assert [(r.index_name, r.refresh, r.trained) for r in result.indexes] == [("vec_idx", True, False)]
    assert result.indexes[0].fragments_indexed == [8] and "index" in result.seconds
    ds = tbl.to_lance()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_indexed_rows, stats.num_partitions) == (0, 4600, 16)
    assert old <= {s["uuid"] for s in ds.list_indices()}  # the old segments untouched
    got = ds.to_table(nearest={"column": "vec", "q": embedding(4321, 0), "k": 1, "nprobes": 4, "refine_factor": 20},
                      columns=["id"])
    assert got.column("id").to_pylist() == [4321]
    ds.validate()


def test_refresh_indexes_false_leaves_them_unindexed_and_the_next_backfill_finishes_them(db):
    tbl, _, runner = embedded(db)
    tbl.add(pa.table({"id": pa.array(range(4000, 4500), pa.int64())}))
    version = tbl.version
    with pytest.raises(InvalidArgumentError, match=r"backfill of table 'docs': refresh_indexes must be True or "
                                                   r"False, got 'no'"):
        tbl.backfill("vec", spark=runner, refresh_indexes="no")
    assert tbl.version == version
    result = tbl.backfill("vec", spark=runner, refresh_indexes=False)
    assert result.indexes == [] and result.rows_computed == 500 and "index" not in result.seconds
    assert index_stats(tbl.to_lance(), "vec_idx").num_unindexed_rows == 500
    again = tbl.backfill("vec", spark=runner)  # nothing to compute: its index stage still runs
    assert again.rows_computed == 0 and [r.fragments_indexed for r in again.indexes] == [[8]]
    assert index_stats(tbl.to_lance(), "vec_idx").num_unindexed_rows == 0
    assert tbl.backfill("vec", spark=runner).indexes == []  # nothing left: no commit
    assert tbl.version == again.indexes[0].version


def test_an_index_the_package_did_not_build_is_left_alone_with_a_warning(db, caplog):
    tbl, _, runner = embedded(db, 2000)
    tbl.to_lance().create_scalar_index("id", "BTREE", name="by_hand")
    tbl.add(pa.table({"id": pa.array(range(2000, 2300), pa.int64())}))
    tbl.backfill("vec", spark=runner)
    ds = tbl.to_lance()
    assert indexes_on(ds, ["id"]) == ["by_hand"] and indexes_on(ds) == ["by_hand", "vec_idx"]
    with caplog.at_level(logging.WARNING, logger="geneva_provider"):
        assert refresh_indexes(tbl.ref, ["by_hand"], runner) == []
    assert "index 'by_hand' of table 'docs' was not built by this package" in caplog.text
    assert "create_index(..., name='by_hand', replace=True)" in caplog.text
    assert index_stats(tbl.to_lance(), "by_hand").num_unindexed_rows == 300


def test_a_follow_after_a_backfill_runs_the_index_step(db):
    tbl, embed, runner = embedded(db, 2000)
    tbl.alter_columns({"path": "vec", "udf": embed(model=1)})
    tbl.backfill("vec", where="id < 500", spark=runner, refresh_indexes=False)  # fragment 0 rewritten
    plan = db.followers(ColumnBackfilled(table="docs", column="vec"))
    assert plan.steps() == [RefreshIndex(table="docs", index="vec_idx")]
    done = db.follow(ColumnBackfilled(table="docs", column="vec"), spark=runner)
    assert [d.step for d in done] == plan.steps() and done[0].result.fragments_indexed == [0]
    ds = tbl.to_lance()
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0
    stale = ds.to_table(nearest={"column": "vec", "q": embedding(7, 0), "k": 10, "nprobes": 16}, columns=["id"])
    assert 7 not in stale.column("id").to_pylist()  # the old vector is not in the index
    assert db.follow(ColumnBackfilled(table="docs", column="vec"), spark=runner)[0].result is None  # nothing to do


def test_a_view_refresh_refreshes_the_views_index(db):
    runner = InProcessRunner(parallelism=2)
    src = db.create_table("src", clustered(3000), max_rows_per_file=500)
    view = db.create_materialized_view("near", src.search(None).where("id % 2 = 0").select({"id": "id", "vec": "vec"}))
    view.refresh(spark=runner)
    create_index(view.ref, IndexSpec.of("vec", "IVF_FLAT", num_partitions=8), runner)
    src.add(clustered(1000, start=3000, seed=5))
    result = view.refresh(spark=runner)
    assert [(r.index_name, r.trained) for r in result.indexes] == [("vec_idx", False)]
    ds = view.to_lance()
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0 and ds.count_rows() == 2000
    ds.validate()


def test_a_compaction_keeps_the_index_and_recall_and_loses_no_row(db):
    runner = InProcessRunner(parallelism=2)
    tbl = db.create_table("t", clustered(4000), max_rows_per_file=500)
    create_index(tbl.ref, pq_spec(), runner)
    for i in range(4):  # 4 small fragments, each appended and indexed by the follower of the change
        tbl.add(clustered(100, start=4000 + 100 * i, seed=10 + i))
    assert [d.result.fragments_indexed for d in db.follow("t", spark=runner)] == [[8, 9, 10, 11]]
    ds = tbl.to_lance()
    qs = queries(ds.to_table())
    before, fragments = recall(ds, qs), len(ds.get_fragments())
    result = tbl.compact(500, spark=runner)
    assert result.fragments_removed >= 3 and result.indexes == []  # the remap covered every new fragment
    ds = tbl.to_lance()
    assert len(ds.get_fragments()) <= fragments - 2
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == list(range(4400))
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0
    assert recall(ds, qs) == pytest.approx(before, abs=0.01)
    ds.validate()


# ------------------------------------------------------------------ the drift rule
def test_rows_from_the_training_distribution_are_added_and_drifted_rows_retrain(tmp_path):
    runner = InProcessRunner(parallelism=2)
    table = write_table(tmp_path, clustered(4000), 500)
    create_index(table, pq_spec(), runner)
    lance.write_dataset(clustered(500, start=4000, seed=3), table.uri, mode="append")
    [same] = refresh_indexes(table, ["vec_idx"], runner)
    assert same.refresh and not same.trained and same.drift == pytest.approx(1.0, abs=0.15)
    far = clustered(1000, start=4500, seed=4, shift=25.0)  # away from every centroid
    lance.write_dataset(far, table.uri, mode="append")
    [moved] = refresh_indexes(table, ["vec_idx"], runner)
    assert moved.drift > DRIFT_RETRAIN_FACTOR and moved.trained and not moved.refresh
    ds = table.dataset()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_partitions, stats.num_segments) == (0, 16, 1)
    qs = np.concatenate([queries(far, 20), queries(clustered(4000), 20)])
    assert recall(ds, qs) >= 0.9 and DIM == qs.shape[1]
