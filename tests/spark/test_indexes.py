"""Index builds by real Spark tasks (classic local[2]): IVF_PQ segments per task, recall against an exact scan and
pylance's single-process build, an add-only refresh, compaction of the refreshed fragments, a killed build resumed."""

from __future__ import annotations

import lance
import pytest

from geneva_provider.core.contracts.index_models import IndexSpec
from geneva_provider.core.store.layout import IndexRecords, IndexSegmentKey, parse_key
from geneva_provider.pipeline.indexes import create_index, index_stats, refresh_index, unindexed_fragments
from geneva_provider.pipeline.spark.task_runner import SparkRunner
from tests.index_data import KilledAfter, clustered, queries, recall, write_table


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
