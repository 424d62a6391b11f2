"""Indexes kept fresh on real Spark (classic local[2]) through the facade (issue 43): an append's backfill indexes
its rows in the same job, add-only; a re-embed re-indexes the rewritten fragments and no search returns an old
vector; a compaction coalesces small indexed fragments with recall and rows unchanged."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from geneva_provider.core.contracts.index_models import IndexSpec
from geneva_provider.pipeline.indexes import create_index, index_stats, unindexed_fragments
from tests.index_data import NPROBES, REFINE, clustered, embedding, make_embed, queries, recall


def embedded(db, spark, n: int = 4000):
    """``docs``: ``id`` and ``vec`` = ``embedding(id, 0)`` (a UDF column) in 500-row fragments, IVF_PQ-indexed."""
    embed = make_embed()
    tbl = db.create_table("docs", pa.table({"id": pa.array(range(n), pa.int64())}), max_rows_per_file=500)
    tbl.add_columns({"vec": embed(model=0)})
    tbl.backfill("vec", spark=spark, progress=False)
    create_index(tbl.ref, IndexSpec.of("vec", "IVF_PQ", num_partitions=16, num_sub_vectors=8), spark)
    return tbl, embed


def test_an_append_and_its_backfill_leave_no_row_unindexed_at_the_end_of_the_same_job(db, spark):
    tbl, _ = embedded(db, spark)
    old = {s["uuid"]: s["fragment_ids"] for s in tbl.to_lance().list_indices()}
    tbl.add(pa.table({"id": pa.array(range(4000, 5000), pa.int64())}))
    result = tbl.backfill("vec", spark=spark, progress=False)
    assert result.rows_computed == 1000 and "index" in result.seconds
    [refreshed] = result.indexes
    assert refreshed.refresh and not refreshed.trained and refreshed.rows_indexed == 1000
    ds = tbl.to_lance()
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_indexed_rows, stats.num_partitions) == (0, 5000, 16)
    segments = {s["uuid"]: s["fragment_ids"] for s in ds.list_indices()}
    assert all(segments[uuid] == fragments for uuid, fragments in old.items())  # old segments untouched
    for row in (4002, 4999):
        got = tbl.search(embedding(row, 0)).nprobes(NPROBES).refine_factor(REFINE).limit(1).to_arrow()
        assert got.column("id").to_pylist() == [row]
    ds.validate()


def test_a_re_embed_re_indexes_the_rewritten_fragments_and_never_returns_an_old_vector(db, spark):
    tbl, embed = embedded(db, spark)
    tbl.alter_columns({"path": "vec", "udf": embed(model=1)})
    result = tbl.backfill("vec", where="id < 1500", spark=spark, progress=False)  # fragments 0, 1, 2 rewritten
    [refreshed] = result.indexes
    assert refreshed.fragments_indexed == [0, 1, 2] and not refreshed.trained
    ds = tbl.to_lance()
    assert unindexed_fragments(ds, "vec_idx") == []
    assert index_stats(ds, "vec_idx").num_partitions == 16
    values = ds.to_table(columns=["id", "vec"])
    current = dict(zip(values.column("id").to_pylist(), values.column("vec").to_pylist(), strict=True))
    for row in (3, 777, 1499):
        for model in (0, 1):  # the old vector's neighbourhood and the new one's
            got = tbl.search(embedding(row, model)).nprobes(16).refine_factor(REFINE).limit(10) \
                .select(["id", "vec"]).to_arrow()
            for i, v in zip(got.column("id").to_pylist(), got.column("vec").to_pylist(), strict=True):
                assert np.allclose(v, current[i])  # every vector returned is the table's current value
            assert (row in got.column("id").to_pylist()) == (model == 1)
    ds.validate()


def test_four_small_indexed_fragments_are_compacted_with_recall_and_rows_unchanged(db, spark):
    tbl, _ = embedded(db, spark)
    for i in range(4):  # each append backfilled and indexed in its own job: 4 small segments
        tbl.add(pa.table({"id": pa.array(range(4000 + 100 * i, 4100 + 100 * i), pa.int64())}))
        assert [r.fragments_indexed for r in tbl.backfill("vec", spark=spark, progress=False).indexes] == [[8 + i]]
    ds = tbl.to_lance()
    fragments, qs = len(ds.get_fragments()), queries(clustered(4400), 30)
    before = recall(ds, qs)
    result = tbl.compact(500, spark=spark)
    assert result.fragments_removed >= 3 and [r.rows_indexed for r in result.indexes] == [400]
    ds = tbl.to_lance()
    assert len(ds.get_fragments()) <= fragments - 3
    assert ds.count_rows() == 4400
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == list(range(4400))
    stats = index_stats(ds, "vec_idx")
    assert (stats.num_unindexed_rows, stats.num_partitions) == (0, 16)
    assert recall(ds, qs) == pytest.approx(before, abs=0.01)
    ds.validate()
