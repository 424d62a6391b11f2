"""Index builds as pipeline functions, on the in-process runner (no JVM): checks, groups, builds, refreshes.

Real Lance tables throughout; the same functions run on Spark in tests/spark/test_indexes.py.
"""

from __future__ import annotations

import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest

from geneva_provider.core.contracts.index_models import IndexArtifacts, IndexSpec
from geneva_provider.core.errors import ColumnError, GenevaError, InvalidArgumentError
from geneva_provider.core.refs import TableRef
from geneva_provider.core.store.layout import IndexRecords
from geneva_provider.pipeline.committer import OWN_COMMIT_PREFIX, commit_messages
from geneva_provider.pipeline.indexes import (
    create_index,
    fragment_groups,
    index_stats,
    list_indices,
    refresh_index,
    unindexed_fragments,
)
from geneva_provider.pipeline.indexes.drift import centroid_distance
from geneva_provider.pipeline.indexes.groups import balanced_groups
from geneva_provider.pipeline.indexes.training import lowest_distance
from geneva_provider.stages import InProcessRunner
from tests.index_data import DIM, NPROBES, REFINE, KilledAfter, clustered, queries, recall, write_table


@pytest.fixture
def table(tmp_path) -> TableRef:
    """4000 rows of clustered 64-d vectors in 8 fragments."""
    return write_table(tmp_path, clustered(4000), 500)


def pq_spec(**extra) -> IndexSpec:
    return IndexSpec.of("vec", "IVF_PQ", metric="l2", num_partitions=16, num_sub_vectors=8, **extra)


# ------------------------------------------------------------------ specs and checks
@pytest.mark.parametrize(("args", "words"), [
    ({"index_type": "IVF_NOPE"}, ["IVF_NOPE", "vec"]),
    ({"metric": "manhattan"}, ["manhattan", "metric"]),
    ({"num_bits": 3}, ["num_bits", "3"]),
    ({"num_partitions": 0}, ["num_partitions", "0"]),
])
def test_bad_spec_arguments_name_the_argument_and_value(args, words):
    with pytest.raises(InvalidArgumentError) as err:
        IndexSpec.of("vec", **args)
    for word in words:
        assert word in str(err.value)


def test_spec_round_trips_json_and_reads_lancedb_names():
    spec = IndexSpec.of("vec", "ivf_pq", metric="COSINE", num_partitions=8, num_sub_vectors=4, name="v", replace=False)
    assert IndexSpec.model_validate_json(spec.model_dump_json()) == spec
    assert (spec.metric, spec.index_type.value, spec.index_name) == ("cosine", "IVF_PQ", "v")
    fts = IndexSpec.of("text", "FTS")
    assert fts.index_type.value == "INVERTED" and fts.fts is not None and fts.index_name == "text_idx"


def _bad_table(tmp_path) -> TableRef:
    n = 600
    x = np.random.default_rng(0).normal(size=(n, 6)).astype(np.float32)
    data = pa.table({"id": pa.array(range(n)), "name": pa.array([f"n{i}" for i in range(n)]),
                     "var": pa.array([list(map(float, r)) for r in x], pa.list_(pa.float32())),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 6)})
    uri = str(tmp_path / "bad.lance")
    lance.write_dataset(data, uri, max_rows_per_file=200)
    return TableRef("bad", uri)


@pytest.mark.parametrize(("spec", "error", "words"), [
    (lambda: IndexSpec.of("nope"), ColumnError, ["'bad'", "'nope'"]),
    (lambda: IndexSpec.of("name"), InvalidArgumentError, ["'name'", "string", "not vectors"]),
    (lambda: IndexSpec.of("var"), InvalidArgumentError, ["'var'", "variable-length", "pa.list_(pa.float32(), N)"]),
    (lambda: IndexSpec.of("vec", num_partitions=2, num_sub_vectors=4), InvalidArgumentError,
     ["num_sub_vectors=4", "dimension 6", "'vec'"]),
    (lambda: IndexSpec.of("vec", num_partitions=2, num_sub_vectors=3), InvalidArgumentError,
     ["600 rows", "too few to train PQ", "'vec'"]),
    (lambda: IndexSpec.of("vec", "IVF_FLAT", num_partitions=601), InvalidArgumentError, ["601", "600 rows"]),
    (lambda: IndexSpec.of("vec", "BTREE"), InvalidArgumentError, ["BTREE", "'vec'"]),
])
def test_bad_index_is_refused_before_any_task_and_changes_nothing(tmp_path, spec, error, words):
    table = _bad_table(tmp_path)
    before = table.dataset().version
    store = table.checkpoint_store()

    class NoTasks(InProcessRunner):
        def run_tasks(self, *args, **kwargs):
            raise AssertionError("a task ran for a refused index")

    with pytest.raises(error) as err:
        create_index(table, spec(), NoTasks(), store=store)
    assert isinstance(err.value, GenevaError)
    for word in words:
        assert word in str(err.value)
    ds = table.dataset()
    assert ds.version == before and not ds.describe_indices()
    assert store.list_keys("index-") == []


# ------------------------------------------------------------------ groups
def test_fragment_groups_are_contiguous_and_row_balanced(tmp_path):
    sizes = [(0, 100), (1, 100), (2, 800), (3, 100), (4, 100), (5, 100), (6, 100), (7, 600)]
    groups = balanced_groups(sizes, 3)
    assert [f for g in groups for f in g] == list(range(8))  # every fragment once, in order: contiguous runs
    rows = [sum(dict(sizes)[f] for f in g) for g in groups]
    assert len(groups) == 3 and max(rows) <= 1000, rows  # no cut of contiguous runs has a smaller largest group
    assert balanced_groups([(f, 100) for f in range(12)], 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    table = write_table(tmp_path, clustered(4000), 500)
    groups = fragment_groups(table.dataset(), 4)
    assert groups == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert fragment_groups(table.dataset(), 20) == [[f] for f in range(8)]
    assert fragment_groups(table.dataset(), 2, [5, 6, 7]) in ([[5], [6, 7]], [[5, 6], [7]])


# ------------------------------------------------------------------ vector builds
def test_ivf_pq_build_by_tasks_recalls_like_a_single_process_build(table, tmp_path):
    result = create_index(table, pq_spec(), InProcessRunner(parallelism=4))
    assert (result.segments_built, result.segments_reused, result.segments_committed) == (4, 0, 1)
    assert result.segments_per_task == [1, 1, 1, 1] and result.fragments_indexed == list(range(8))
    ds = table.dataset()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows, stats.num_segments, stats.num_partitions) == \
        (4000, 0, 1, 16)
    assert commit_messages(ds, ds.version - 1)[0].startswith(OWN_COMMIT_PREFIX)
    qs = queries(ds.to_table())
    ours = recall(ds, qs)
    single_uri = str(tmp_path / "single.lance")
    shutil.copytree(table.uri, single_uri)
    single = lance.dataset(single_uri)
    for idx in [d.name for d in single.describe_indices()]:
        single.drop_index(idx)
    single = single.create_index("vec", "IVF_PQ", metric="l2", num_partitions=16, num_sub_vectors=8)
    theirs = recall(single, qs)
    assert ours >= 0.9, (ours, NPROBES, REFINE)
    assert ours >= theirs - 0.01, (ours, theirs)
    ds.validate()
    assert [i.name for i in list_indices(ds)] == ["vec_idx"]
    assert IndexRecords(table.checkpoint_store(), "vec_idx").artifacts() is not None


def test_existing_index_is_refused_without_replace_and_replaced_with_it(table):
    runner = InProcessRunner(parallelism=2)
    create_index(table, pq_spec(), runner)
    before = table.dataset().version
    with pytest.raises(InvalidArgumentError, match=r"'vec_idx'.*replace=True"):
        create_index(table, pq_spec(replace=False), runner)
    assert table.dataset().version == before
    old = {s["uuid"] for s in table.dataset().list_indices()}
    create_index(table, pq_spec(), runner)
    ds = table.dataset()
    now = {s["uuid"] for s in ds.list_indices()}
    assert len(now) == 1 and not now & old
    assert index_stats(ds, "vec_idx").num_indexed_rows == 4000


def test_add_only_refresh_keeps_old_segments_and_partitions_and_compaction_coalesces(table):
    runner = InProcessRunner(parallelism=2)
    create_index(table, pq_spec(), runner)
    saved = IndexRecords(table.checkpoint_store(), "vec_idx").artifacts()
    old = table.dataset().list_indices()
    for i in range(4):  # 4 small fragments
        lance.write_dataset(clustered(100, start=4000 + 100 * i, seed=10 + i), table.uri, mode="append")
    ds = table.dataset()
    assert unindexed_fragments(ds, "vec_idx") == [8, 9, 10, 11]
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 400
    result = refresh_index(table, "vec_idx", runner)
    assert result.refresh and not result.trained and result.fragments_indexed == [8, 9, 10, 11]
    ds = table.dataset()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_indexed_rows, stats.num_partitions) == (0, 4400, 16)
    segments = ds.list_indices()
    assert [s for s in segments if s["uuid"] == old[0]["uuid"]] == old  # the old segment untouched
    assert len(segments) == 2
    assert IndexRecords(table.checkpoint_store(), "vec_idx").artifacts().centroids == saved.centroids  # no retrain
    assert refresh_index(table, "vec_idx", runner).nothing_to_do
    qs = queries(ds.to_table())
    before = recall(ds, qs)
    metrics = ds.optimize.compact_files(target_rows_per_fragment=500)
    assert metrics.fragments_removed >= 3
    ds = table.dataset()
    assert ds.count_rows() == 4400 and sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == \
        list(range(4400))
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0
    assert recall(ds, qs) == pytest.approx(before, abs=0.01)
    ds.validate()


def test_a_killed_build_resumes_without_rebuilding_finished_segments(table):
    spec = IndexSpec.of("vec", "IVF_SQ", num_partitions=8)
    with pytest.raises(Exception, match="killed before segment 2"):
        create_index(table, spec, KilledAfter(InProcessRunner(parallelism=4), 2))
    ds = table.dataset()
    assert not ds.describe_indices() and ds.version == 1
    finished = {k for k in table.checkpoint_store().list_keys("index-") if "-seg-" in k}
    assert len(finished) == 2
    result = create_index(table, spec, InProcessRunner(parallelism=4))
    assert (result.segments_built, result.segments_reused) == (2, 2)
    assert result.segments_per_task == [0, 0, 1, 1]
    ds = table.dataset()
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0 and index_stats(ds, "vec_idx").num_segments == 4
    assert not [k for k in table.checkpoint_store().list_keys("index-") if "-seg-" in k]  # forgotten once committed


def test_sq_refresh_of_small_fragments_is_one_segment_that_compaction_coalesces(table):
    runner = InProcessRunner(parallelism=4)
    assert create_index(table, IndexSpec.of("vec", "IVF_SQ", num_partitions=8), runner).segments_committed == 4
    for i in range(4):
        lance.write_dataset(clustered(100, start=4000 + 100 * i, seed=30 + i), table.uri, mode="append")
    result = refresh_index(table, "vec_idx", runner)
    assert (result.segments_committed, result.fragments_indexed) == (1, [8, 9, 10, 11])
    ds = table.dataset()
    qs = queries(ds.to_table())
    before = recall(ds, qs)
    assert ds.optimize.compact_files(target_rows_per_fragment=500).fragments_removed >= 3
    ds = table.dataset()
    assert ds.count_rows() == 4400 and index_stats(ds, "vec_idx").num_unindexed_rows == 0
    assert recall(ds, qs) == pytest.approx(before, abs=0.01)
    ds.validate()


def test_an_index_name_taken_by_another_column_is_refused(tmp_path):
    table = _bad_table(tmp_path)
    create_index(table, IndexSpec.of("id", "BTREE", name="shared"), InProcessRunner())
    before = table.dataset().version
    with pytest.raises(InvalidArgumentError, match=r"'shared' exists on column\(s\) \['id'\], not 'name'"):
        create_index(table, IndexSpec.of("name", "BITMAP", name="shared"), InProcessRunner())
    assert table.dataset().version == before


def test_sq_segments_on_skewed_fragments_are_never_merged_and_recall(tmp_path):
    parts = [clustered(600, start=600 * i, seed=i, shift=(0.0 if i < 4 else 25.0) * (i % 3 + 1)) for i in range(8)]
    data = pa.concat_tables(parts)
    table = write_table(tmp_path, data, 600)
    result = create_index(table, IndexSpec.of("vec", "IVF_SQ", num_partitions=16), InProcessRunner(parallelism=4))
    assert result.segments_committed == 4
    ds = table.dataset()
    assert index_stats(ds, "vec_idx").num_segments == 4
    assert recall(ds, queries(data), nprobes=NPROBES, refine_factor=REFINE) >= 0.95


def test_artifacts_round_trip_json(table):
    create_index(table, pq_spec(), InProcessRunner(parallelism=2))
    art = IndexRecords(table.checkpoint_store(), "vec_idx").artifacts()
    again = IndexArtifacts.model_validate_json(art.model_dump_json())
    args = again.lance_args()
    assert (len(args["ivf_centroids"]), args["ivf_centroids"].type.list_size) == (16, DIM)
    assert args["num_sub_vectors"] == 8
    assert again.matches(pq_spec()) and not again.matches(IndexSpec.of("vec", "IVF_PQ", num_partitions=32))


def test_of_several_ivf_trainings_the_one_nearest_to_the_rows_is_kept():
    """The IVF restarts keep the centroids a k-means local minimum did not spoil: here the 16 true centres beat
    the same centres with two clusters sharing one centroid (the 16th doubled up on another cluster's)."""
    data = clustered(4000)
    col = data.column("vec").combine_chunks()
    rows = col.values.to_numpy().reshape(len(col), DIM)
    centres = np.random.default_rng(12345).normal(size=(16, DIM)).astype(np.float32) * 4.0  # clustered()'s
    merged = centres.copy()
    merged[0] = (centres[0] + centres[1]) / 2  # one centroid between two clusters ...
    merged[1] = centres[2] + 0.5  # ... and two in one
    kept, distance = lowest_distance(["merged", "true", "merged again"], {"merged": merged, "true": centres,
                                     "merged again": merged}.get, rows, "l2")
    assert kept == "true" and distance == pytest.approx(np.sqrt(DIM), rel=0.05)  # unit noise in 64-d
    assert centroid_distance(rows, merged, "l2") > 1.05 * distance
    assert lowest_distance(["first", "second"], {"first": merged, "second": centres}.get,
                           np.zeros((0, DIM), np.float32), "l2") == ("first", None)  # nothing to judge by


# ------------------------------------------------------------------ scalar and full-text
def test_scalar_and_fts_indexes_answer_as_a_scan(tmp_path):
    n = 2000
    words = ["apple", "banana", "cherry", "delta", "echo"]
    data = pa.table({"id": pa.array(range(n), pa.int64()), "cat": pa.array([f"c{i % 7}" for i in range(n)]),
                     "tags": pa.array([[f"t{i % 3}", f"t{i % 5}"] for i in range(n)]),
                     "text": pa.array([f"{words[i % 5]} {words[(i * 3) % 5]} doc{i}" for i in range(n)])})
    uri = str(tmp_path / "s.lance")
    lance.write_dataset(data, uri, max_rows_per_file=250)
    table = TableRef("s", uri)
    checks = [("id BETWEEN 100 AND 140 OR id = 1999", "id"), ("cat = 'c3'", "cat"),
              ("array_has_any(tags, ['t4'])", "tags")]
    plain = {f: sorted(table.dataset().to_table(filter=f, columns=["id"]).column("id").to_pylist()) for f, _ in checks}
    plain_fts = sorted(i for i, t in enumerate(data.column("text").to_pylist()) if "banana" in t.split())
    runner = InProcessRunner(parallelism=3)
    for column, kind in [("id", "BTREE"), ("cat", "BITMAP"), ("tags", "LABEL_LIST"), ("text", "FTS")]:
        result = create_index(table, IndexSpec.of(column, kind), runner, target_groups=3)
        assert (result.segments_built, result.segments_committed) == (3, 1)
    ds = table.dataset()
    assert sorted(i.name for i in list_indices(ds)) == ["cat_idx", "id_idx", "tags_idx", "text_idx"]
    for f, column in checks:  # answered by the index, the very rows of a scan without one
        assert f"@{column}_idx" in ds.scanner(filter=f, columns=["id"]).explain_plan()
        assert sorted(ds.to_table(filter=f, columns=["id"]).column("id").to_pylist()) == plain[f]
    assert sorted(ds.to_table(full_text_query="banana", columns=["id"]).column("id").to_pylist()) == plain_fts
    params = [seg["params"] for seg in ds.stats.index_stats("text_idx")["segments"]]
    assert params and all(p["base_tokenizer"] == "simple" and p["with_position"] is False for p in params)
    lance.write_dataset(data.slice(0, 250).set_column(0, "id", pa.array(range(n, n + 250), pa.int64())), uri,
                        mode="append")
    result = refresh_index(table, "text_idx", runner)
    assert result.fragments_indexed == [8]
    ds = table.dataset()
    assert index_stats(ds, "text_idx").num_unindexed_rows == 0
    expect = plain_fts + [n + i for i in plain_fts if i < 250]
    assert sorted(ds.to_table(full_text_query="banana", columns=["id"]).column("id").to_pylist()) == sorted(expect)


def test_a_re_embed_unindexes_the_rewritten_fragments_and_a_refresh_reindexes_them(db):
    """A backfill's DataReplacement of the indexed column un-indexes exactly the fragments it rewrote; the
    refresh indexes them with the saved artifacts, and a search never returns an old vector."""
    from tests.index_data import embedding, make_embed

    runner = InProcessRunner(parallelism=2)
    embed = make_embed()
    tbl = db.create_table("docs", pa.table({"id": pa.array(range(4000), pa.int64())}), max_rows_per_file=500)
    tbl.add_columns({"vec": embed(model=0)})
    tbl.backfill("vec", spark=runner)
    create_index(tbl.ref, pq_spec(), runner)
    tbl.alter_columns({"path": "vec", "udf": embed(model=1)})
    tbl.backfill("vec", where="id < 1000", spark=runner, refresh_indexes=False)  # fragments 0 and 1 rewritten
    ds = tbl.dataset()
    assert unindexed_fragments(ds, "vec_idx") == [0, 1]
    result = refresh_index(tbl.ref, "vec_idx", runner)
    assert result.fragments_indexed == [0, 1] and not result.trained
    ds = tbl.dataset()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_partitions) == (0, 16)
    for row in (5, 777):
        old, new = embedding(row, 0), embedding(row, 1)
        stale = ds.to_table(nearest={"column": "vec", "q": old, "k": 10, "nprobes": 16}, columns=["id", "vec"])
        assert row not in stale.column("id").to_pylist()  # the old vector is gone from the index
        got = ds.to_table(nearest={"column": "vec", "q": new, "k": 1, "nprobes": NPROBES, "refine_factor": REFINE},
                          columns=["id", "vec"])
        assert got.column("id").to_pylist() == [row]
        assert np.allclose(got.column("vec")[0].as_py(), new)
    ds.validate()


def test_a_compaction_landing_while_segments_are_built_makes_the_build_run_again(tmp_path):
    """The build's segments index fragments the compaction rewrote: committing them would index rows that are
    gone, so the build is planned and run again at the latest version (once here), and nothing is lost."""
    table = write_table(tmp_path, clustered(2000), 250)

    class CompactsOnce(InProcessRunner):
        compacted = 0

        def run_tasks(self, tasks, partition_fn, **kwargs):
            out = super().run_tasks(tasks, partition_fn, **kwargs)
            if not CompactsOnce.compacted:
                CompactsOnce.compacted = table.dataset().optimize.compact_files(
                    target_rows_per_fragment=1000).fragments_removed
            return out

    result = create_index(table, IndexSpec.of("vec", "IVF_FLAT", num_partitions=8), CompactsOnce(parallelism=2))
    assert CompactsOnce.compacted == 8
    ds = table.dataset()
    assert result.fragments_indexed == sorted(f.fragment_id for f in ds.get_fragments())
    assert result.version == ds.version
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows, stats.num_segments) == (2000, 0, 1)
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == list(range(2000))
    assert table.checkpoint_store().list_keys("index-") != []  # the artifacts stay
    assert not [k for k in table.checkpoint_store().list_keys("index-") if "-seg-" in k]
    ds.validate()


def test_a_refresh_past_max_segments_re_encodes_with_the_saved_artifacts_and_retrain_trains_anew(table):
    runner = InProcessRunner(parallelism=2)
    spec = IndexSpec.of("vec", "IVF_SQ", num_partitions=8)
    assert create_index(table, spec, runner, max_segments=3).segments_committed == 2
    saved = IndexRecords(table.checkpoint_store(), "vec_idx").artifacts()
    lance.write_dataset(clustered(300, start=4000, seed=50), table.uri, mode="append")
    assert refresh_index(table, "vec_idx", runner, max_segments=3).refresh  # 2 + 1 segments: within the cap
    old = {s["uuid"] for s in table.dataset().list_indices()}
    assert len(old) == 3
    lance.write_dataset(clustered(300, start=4300, seed=51), table.uri, mode="append")
    result = refresh_index(table, "vec_idx", runner, max_segments=3)  # 4 would pass the cap: all re-encoded
    assert not result.refresh and not result.trained and result.fragments_indexed == list(range(10))
    ds = table.dataset()
    now = {s["uuid"] for s in ds.list_indices()}
    assert len(now) <= 3 and not now & old
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0 and index_stats(ds, "vec_idx").num_indexed_rows == 4600
    assert IndexRecords(table.checkpoint_store(), "vec_idx").artifacts().centroids == saved.centroids
    retrained = refresh_index(table, "vec_idx", runner, retrain=True)
    assert retrained.trained and index_stats(table.dataset(), "vec_idx").num_indexed_rows == 4600
    assert IndexRecords(table.checkpoint_store(), "vec_idx").artifacts().centroids != saved.centroids
    table.dataset().validate()


def test_index_keys_parse_back_and_checkpoint_clean_up_keeps_the_artifacts(table):
    import datetime as dt

    from geneva_provider.core.store.layout import IndexArtifactsKey, IndexPlanKey, IndexSegmentKey, parse_key
    from geneva_provider.pipeline.maintenance.cleanup import cleanup_checkpoints

    for key in (IndexArtifactsKey.of("vec_idx"), IndexPlanKey("0" * 16, "a" * 16),
                IndexSegmentKey("0" * 16, "b" * 16, 12)):
        assert parse_key(key.key()) == key
    create_index(table, pq_spec(), InProcessRunner(parallelism=2))
    store = table.checkpoint_store()
    cleanup_checkpoints(table, store, dt.timedelta(0))
    assert IndexRecords(store, "vec_idx").artifacts() is not None
    lance.write_dataset(clustered(100, start=4000, seed=60), table.uri, mode="append")
    assert refresh_index(table, "vec_idx", InProcessRunner()).fragments_indexed == [8]


@pytest.mark.parametrize(("kind", "segments"), [("IVF_FLAT", 1), ("IVF_SQ", 4), ("IVF_HNSW_SQ", 4), ("IVF_HNSW_PQ", 1)])
def test_every_vector_index_type_by_tasks_recalls_like_a_single_process_build(tmp_path, kind, segments):
    table = write_table(tmp_path, clustered(4000), 500)
    extra = {"num_sub_vectors": 8} if kind.endswith("PQ") else {}
    result = create_index(table, IndexSpec.of("vec", kind, metric="l2", num_partitions=16, **extra),
                          InProcessRunner(parallelism=4))
    assert (result.segments_built, result.segments_committed) == (4, segments)  # SQ segments never merged
    ds = table.dataset()
    assert index_stats(ds, "vec_idx").num_unindexed_rows == 0
    single_uri = str(tmp_path / "single.lance")
    lance.write_dataset(clustered(4000), single_uri, max_rows_per_file=500)
    single = lance.dataset(single_uri).create_index("vec", kind, metric="l2", num_partitions=16, **extra)
    qs = queries(ds.to_table())
    ours, theirs = recall(ds, qs), recall(single, qs)
    assert ours >= 0.9 and ours >= theirs - 0.01, (ours, theirs)
