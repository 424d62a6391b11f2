"""Index builds by real Spark tasks (classic local[2]): IVF_PQ segments per task, recall against an exact scan and
pylance's single-process build, an add-only refresh, compaction of the refreshed fragments, a killed build resumed;
and the same through the facade (``tbl.create_index`` / ``create_scalar_index`` / ``create_fts_index``: index jobs)."""

from __future__ import annotations

import lance
import pytest

from geneva_provider.core.contracts.index_models import IndexSpec
from geneva_provider.core.store.layout import IndexRecords, IndexSegmentKey, parse_key
from geneva_provider.pipeline.indexes import create_index, index_stats, refresh_index, unindexed_fragments
from geneva_provider.pipeline.spark.task_runner import SparkRunner
from tests.index_data import NPROBES, REFINE, KilledAfter, clustered, exact_ids, queries, recall, write_table


def test_ivf_pq_by_spark_tasks_then_add_only_refresh_then_compaction(tmp_path, spark):
    table = write_table(tmp_path, clustered(4000), 500)  # 8 fragments
    spec = IndexSpec.of("vec", "IVF_PQ", metric="l2", num_partitions=16, num_sub_vectors=8)
    result = create_index(table, spec, spark, target_groups=4)
    assert result.segments_per_task == [1, 1, 1, 1]  # one segment per Spark task
    assert (result.segments_built, result.segments_committed, result.fragments_indexed) == (4, 1, list(range(8)))
    ds = table.dataset()
    qs = queries(ds.to_table())
    ours = recall(ds, qs)
    single_uri = str(tmp_path / "single.lance")
    lance.write_dataset(clustered(4000), single_uri, max_rows_per_file=500)
    theirs = recall(lance.dataset(single_uri).create_index("vec", "IVF_PQ", metric="l2", num_partitions=16,
                                                           num_sub_vectors=8), qs)
    assert ours >= 0.9 and ours >= theirs - 0.01, (ours, theirs)

    first = ds.list_indices()
    for i in range(4):
        lance.write_dataset(clustered(100, start=4000 + 100 * i, seed=20 + i), table.uri, mode="append")
    assert unindexed_fragments(table.dataset(), "vec_idx") == [8, 9, 10, 11]
    refreshed = refresh_index(table, "vec_idx", spark)
    assert refreshed.refresh and not refreshed.trained and refreshed.segments_committed == 1
    ds = table.dataset()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_partitions, stats.num_segments) == (0, 16, 2)
    assert [s for s in ds.list_indices() if s["uuid"] == first[0]["uuid"]] == first  # untouched
    before = recall(ds, qs)
    assert ds.optimize.compact_files(target_rows_per_fragment=500).fragments_removed >= 3
    ds = table.dataset()
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == list(range(4400))
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0
    assert recall(ds, qs) == pytest.approx(before, abs=0.01)
    ds.validate()


def test_a_killed_spark_build_resumes_without_rebuilding_finished_segments(tmp_path, spark):
    table = write_table(tmp_path, clustered(3000), 300)  # 10 fragments
    spec = IndexSpec.of("vec", "IVF_HNSW_SQ", metric="cosine", num_partitions=4)
    with pytest.raises(Exception, match="killed before segment"):
        create_index(table, spec, KilledAfter(SparkRunner(spark), 3), target_groups=5)
    assert not table.dataset().describe_indices()
    store = table.checkpoint_store()
    finished = [k for key in store.list_keys("index-") if isinstance(k := parse_key(key), IndexSegmentKey)]
    assert sorted(k.group for k in finished) == [0, 1, 2]
    kept = {r.lance_index().uuid for r in IndexRecords(store, "vec_idx").segments(finished[0].build_id)}
    result = create_index(table, spec, spark, target_groups=5)
    assert (result.segments_built, result.segments_reused) == (2, 3)  # only the unfinished segments built
    ds = table.dataset()
    committed = {s["uuid"] for s in ds.list_indices()}
    assert kept <= committed and len(committed) == 5  # SQ segments: never merged
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0
    ds.validate()


def _facade_table(db, n: int = 4000, rows_per_fragment: int = 500):
    """A 64-d embedding column over ``n / rows_per_fragment`` fragments, with a label, tags and a text column."""
    import pyarrow as pa

    data = clustered(n)
    ids = range(n)
    data = data.append_column("label", pa.array([f"l{i % 5}" for i in ids])) \
        .append_column("tags", pa.array([[f"t{i % 3}", f"t{i % 7}"] for i in ids], pa.list_(pa.string()))) \
        .append_column("text", pa.array([f"doc {i} about {'cats' if i % 4 == 0 else 'dogs'}" for i in ids]))
    return db.create_table("emb", data, max_rows_per_file=rows_per_fragment)


def test_tbl_create_index_builds_ivf_pq_by_spark_tasks_with_pylances_recall(db, tmp_path, spark):
    tbl = _facade_table(db)
    assert len(tbl.dataset().get_fragments()) == 8
    result = tbl.create_index(vector_column_name="vec", metric="l2", index_type="IVF_PQ", num_partitions=16,
                              num_sub_vectors=8, spark=spark, target_groups=4)
    assert result.segments_per_task == [1, 1, 1, 1]  # one segment per Spark task
    assert (result.segments_built, result.segments_committed, result.rows_indexed) == (4, 1, 4000)
    [job] = db.list_jobs("emb", kind="index")
    assert (job.status, job.segments_done, job.rows_committed) == ("DONE", 4, 4000)
    ds = tbl.dataset()
    ds.validate()
    qs = queries(ds.to_table())
    # Recall through the facade's search at the documented settings (nprobes=4, refine_factor=20), against an
    # exact scan, and pylance's single-process build of the same parameters over the same rows.
    hits = 0
    for q in qs:
        got = tbl.search(q).nprobes(NPROBES).refine_factor(REFINE).limit(10).select(["id"]).to_arrow()
        hits += len(set(got.column("id").to_pylist()) & exact_ids(ds, q))
    ours = hits / (10 * len(qs))
    single_uri = str(tmp_path / "single.lance")
    lance.write_dataset(clustered(4000), single_uri, max_rows_per_file=500)
    theirs = recall(lance.dataset(single_uri).create_index("vec", "IVF_PQ", metric="l2", num_partitions=16,
                                                           num_sub_vectors=8), qs)
    assert ours >= 0.9 and abs(ours - theirs) <= 0.01, (ours, theirs)
    # A prefiltered search returns only matching rows, the limit filled from them.
    filtered = tbl.search(qs[0]).where("label = 'l2'", prefilter=True).nprobes(NPROBES).limit(10) \
        .select(["id", "label"]).to_arrow()
    assert filtered.num_rows == 10 and set(filtered.column("label").to_pylist()) == {"l2"}
    stats = tbl.index_stats("vec_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows, stats.num_partitions) == (4000, 0, 16)


def test_scalar_and_fts_indexes_by_spark_tasks_answer_as_a_scan(db, spark):
    tbl = _facade_table(db)
    for column, kind in (("id", "BTREE"), ("label", "BITMAP"), ("tags", "LABEL_LIST")):
        result = tbl.create_scalar_index(column, kind, spark=spark, target_groups=4)
        assert result.segments_per_task == [1, 1, 1, 1] and result.segments_committed == 1
    fts = tbl.create_fts_index("text", spark=spark, target_groups=4, stem=False)
    assert fts.segments_per_task == [1, 1, 1, 1] and fts.segments_committed == 1
    ds = tbl.dataset()
    ds.validate()
    assert {d.name: d.index_type for d in ds.describe_indices()} == {
        "id_idx": "BTree", "label_idx": "Bitmap", "tags_idx": "LabelList", "text_idx": "Inverted"}
    for where in ("id >= 1234 AND id < 1300", "label = 'l3'", "array_has_any(tags, ['t5'])"):
        scan = ds.to_table(filter=where, columns=["id"], use_scalar_index=False).column("id").to_pylist()
        got = tbl.search().where(where).select(["id"]).to_arrow().column("id").to_pylist()
        assert sorted(got) == sorted(scan) and got, where
    hits = tbl.search("cats", query_type="fts").select(["id"]).limit(2000).to_arrow().column("id").to_pylist()
    assert sorted(hits) == list(range(0, 4000, 4))
