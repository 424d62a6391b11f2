"""Indexes kept fresh (issue 43): the follower graph's index step, and the index stage of a backfill, a view's
refresh and a compaction, on real Lance tables and the in-process task runner (no JVM; tests/spark runs the
must-show cases on Spark)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

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
from geneva_provider.pipeline.indexes import create_index, index_stats
from geneva_provider.pipeline.indexes.drift import DRIFT_RETRAIN_FACTOR
from geneva_provider.pipeline.indexes.upkeep import indexes_on, refresh_indexes
from geneva_provider.stages import InProcessRunner
from tests.helpers import Chunk
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


def test_a_tables_change_is_followed_by_its_backfill_then_the_index_step(db):
    @gp.udf(data_type=pa.list_(pa.float32(), DIM), auto_backfill=True)
    def vec(id: int) -> list[float]:
        return embedding(id, 0).tolist()

    runner = InProcessRunner(parallelism=2)
    tbl = db.create_table("docs", pa.table({"id": pa.array(range(2000), pa.int64())}), max_rows_per_file=500)
    tbl.add_columns({"vec": vec})
    tbl.backfill("vec", spark=runner)
    create_index(tbl.ref, pq_spec(), runner)
    tbl.add(pa.table({"id": pa.array(range(2000, 2400), pa.int64())}))
    plan = db.followers("docs")
    assert plan.steps() == [BackfillColumn(table="docs", column="vec"), RefreshIndex(table="docs", index="vec_idx")]
    assert plan.followers[1].after == (0,)
    done = db.follow("docs", spark=runner)
    backfilled, indexed = done[0].result, done[1].result
    assert backfilled.rows_computed == 400 and [r.fragments_indexed for r in backfilled.indexes] == [[4]]
    assert indexed is None  # the backfill's own index stage left it nothing to do: no commit
    assert tbl.version == backfilled.indexes[0].version
    assert index_stats(tbl.to_lance(), "vec_idx").num_unindexed_rows == 0
    tbl.add(pa.table({"id": pa.array(range(2400, 2500), pa.int64())}))
    handle = tbl.backfill_async("vec", spark=runner, refresh_indexes=False)
    assert handle.result().indexes == [] and index_stats(tbl.to_lance(), "vec_idx").num_unindexed_rows == 100


def test_a_view_refresh_refreshes_the_views_index(db):
    runner = InProcessRunner(parallelism=2)
    src = db.create_table("src", clustered(3000), max_rows_per_file=500)
    view = db.create_materialized_view("near", src.search(None).where("id % 2 = 0").select({"id": "id", "vec": "vec"}))
    view.refresh(spark=runner)
    view.add_columns({"e": make_embed()(model=0)})  # a UDF column put on the view: its backfill computes it
    view.backfill("e", spark=runner)
    create_index(view.ref, IndexSpec.of("vec", "IVF_FLAT", num_partitions=8), runner)
    create_index(view.ref, IndexSpec.of("e", "IVF_FLAT", num_partitions=8), runner)
    src.add(clustered(1000, start=3000, seed=5))
    result = view.refresh(spark=runner)
    assert [(r.index_name, r.trained) for r in result.indexes] == [("vec_idx", False)]  # not e's: NULL until
    ds = view.to_lance()
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0 and ds.count_rows() == 2000
    assert index_stats(ds, "e_idx").num_unindexed_rows == 500
    assert [r.index_name for r in view.backfill("e", spark=runner).indexes] == ["e_idx"]
    assert index_stats(view.to_lance(), "e_idx").num_unindexed_rows == 0
    view.to_lance().validate()


def test_a_compaction_coalesces_fragments_each_indexed_apart_and_keeps_recall_and_rows(db):
    runner = InProcessRunner(parallelism=2)
    tbl = db.create_table("t", clustered(4000), max_rows_per_file=500)
    create_index(tbl.ref, pq_spec(), runner)
    for i in range(4):  # 4 small fragments, each appended and indexed apart by the follower of the change
        tbl.add(clustered(100, start=4000 + 100 * i, seed=10 + i))
        assert [d.result.fragments_indexed for d in db.follow("t", spark=runner)] == [[8 + i]]
    ds = tbl.to_lance()
    assert index_stats(ds, "vec_idx").num_segments == 5
    qs = queries(ds.to_table())
    before = recall(ds, qs)
    with pytest.raises(InvalidArgumentError, match="target_rows_per_fragment"):
        tbl.compact(0, spark=runner)
    assert tbl.version == ds.version  # a bad option changes nothing
    result = tbl.compact(500, spark=runner)
    assert result.fragments_removed >= 3
    [remapped] = result.indexes  # the remap check indexed what the compaction made of the small fragments
    assert remapped.refresh and not remapped.trained and remapped.rows_indexed == 400
    ds = tbl.to_lance()
    assert len(ds.get_fragments()) <= 9
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == list(range(4400))
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_segments, stats.num_partitions) == (0, 2, 16)
    assert recall(ds, qs) == pytest.approx(before, abs=0.01)
    ds.validate()
    assert tbl.compact(500, spark=runner).indexes == []  # nothing left to compact or to index


@gp.chunker
def pairs(text: str) -> Iterator[Chunk]:
    words = text.split()
    for i in range(0, len(words), 2):
        yield Chunk(" ".join(words[i:i + 2]), i)


def test_a_chunker_views_refresh_refreshes_its_full_text_index(db):
    runner = InProcessRunner(parallelism=2)
    words = ["apple", "banana", "cherry", "damson"]
    text = [" ".join(words[(i + k) % 4] for k in range(6)) + f" doc{i}" for i in range(1200)]
    docs = db.create_table("docs", pa.table({"id": pa.array(range(1200), pa.int64()), "text": text}),
                           max_rows_per_file=300)
    chunks = db.create_udtf_view("chunks", docs.search(None).select(["id", "text"]), udtf=pairs)
    chunks.refresh(spark=runner)
    create_index(chunks.ref, IndexSpec.of("chunk", "FTS"), runner)
    docs.add(pa.table({"id": pa.array([1200, 1201], pa.int64()), "text": ["zucchini apple", "fig zucchini"]}))
    result = chunks.refresh(spark=runner)
    assert [(r.index_name, r.refresh) for r in result.indexes] == [("chunk_idx", True)]
    ds = chunks.to_lance()
    assert index_stats(ds, "chunk_idx").num_unindexed_rows == 0
    found = ds.to_table(full_text_query="zucchini", columns=["id", "chunk"])
    assert sorted(found.column("chunk").to_pylist()) == ["fig zucchini", "zucchini apple"]
    ds.validate()


def test_a_compaction_leaves_a_builds_segments_and_a_single_delta_alone(db):
    """No churn: a build's SQ segments (one per group, never merged) and one refresh's delta are not dropped, so
    the compaction re-encodes nothing; the index stays whole."""
    runner = InProcessRunner(parallelism=4)
    tbl = db.create_table("t", clustered(4000), max_rows_per_file=500)
    assert create_index(tbl.ref, IndexSpec.of("vec", "IVF_SQ", num_partitions=8), runner).segments_committed == 4
    tbl.add(clustered(200, start=4000, seed=3))
    [done] = db.follow("t", spark=runner)
    assert done.result.fragments_indexed == [8]
    result = tbl.compact(spark=runner)  # lance's default target: every fragment is small
    assert result.indexes == []
    ds = tbl.to_lance()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_segments) == (0, 5) and ds.count_rows() == 4200
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
