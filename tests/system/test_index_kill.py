"""An index build whose process is SIGKILLed while its Spark tasks build segments resumes from the segments it
finished: the rerun builds only the others, commits one index, and nothing was committed by the killed run."""

from __future__ import annotations

import textwrap

import lance

from geneva_provider.core.store.layout import IndexRecords, IndexSegmentKey, parse_key
from tests.helpers import run_and_kill_when
from tests.index_data import clustered, queries, recall, vectors

GROUPS = 8
PARAMS = {"column": "vec", "index_type": "IVF_PQ", "metric": "l2", "num_partitions": 16, "num_sub_vectors": 8,
          "target_groups": GROUPS}


def _finished(store) -> list[IndexSegmentKey]:
    return [k for key in store.list_keys("index-") if isinstance(k := parse_key(key), IndexSegmentKey)]


def test_a_build_killed_by_sigkill_resumes_without_rebuilding_its_finished_segments(db, spark, tmp_path):
    # 16 fragments of 5,000 rows: one Spark task (local[1]: one at a time) per group of two fragments.
    tbl = db.create_table("t", clustered(80_000), max_rows_per_file=5_000)
    version = tbl.version
    script = textwrap.dedent(f"""
        import geneva_provider as gp
        from geneva_provider.stages import local_session
        spark = local_session("local[1]", conf={{"spark.ui.showConsoleProgress": "false"}})
        gp.connect({db.uri!r}).open_table("t").create_index(spark=spark, **{PARAMS!r})
        print("FINISHED")
    """)
    store = tbl.checkpoint_store
    run_and_kill_when(script, lambda: len(_finished(store)) >= 2)

    # Killed before its commit: the table is as it was, and some (not all) segments are in the store.
    assert tbl.version == version and not tbl.to_lance().describe_indices()
    finished = _finished(store)
    assert 2 <= len(finished) < GROUPS
    kept = {r.lance_index().uuid for r in IndexRecords(store, "vec_idx").segments(finished[0].build_id)}
    assert len(kept) == len(finished)

    result = tbl.create_index(spark=spark, **PARAMS)
    assert (result.segments_reused, result.segments_built) == (len(finished), GROUPS - len(finished))
    assert result.build_id == finished[0].build_id and result.fragments_indexed == list(range(16))
    assert result.segments_committed == 1  # PQ segments merged once before the commit
    ds = tbl.to_lance()
    stats = tbl.index_stats("vec_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows, stats.num_partitions) == (80_000, 0, 16)
    # As good as pylance's single-process build of the same table with the same parameters.
    qs = queries(ds.to_table(columns=["id", "vec"]))
    single = lance.write_dataset(clustered(80_000), str(tmp_path / "single.lance"), max_rows_per_file=5_000)
    single = single.create_index("vec", "IVF_PQ", metric="l2", num_partitions=16, num_sub_vectors=8)
    # Both builds start k-means from random rows and land in local minima whose recall spreads by several points
    # (docs/benchmarks.md "Index builds"; 0.748 against 0.804 and 0.708 against 0.792 seen under load, 0.02 apart
    # in most runs): a resumed build that lost or mixed up segments answers far worse than that.
    assert recall(ds, qs) >= recall(single, qs) - 0.12
    # And every segment answers for its own rows: a row's own vector finds that row, in every fragment.
    data = ds.to_table(columns=["id", "vec"])
    own = vectors(data)
    sample = range(0, 80_000, 400)  # 200 rows, 12 or 13 from each of the 16 fragments
    found = sum(ds.to_table(nearest={"column": "vec", "q": own[i], "k": 1, "nprobes": 4, "refine_factor": 50},
                            columns=["id"]).column("id")[0].as_py() == data.column("id")[i].as_py() for i in sample)
    assert found >= 0.98 * len(sample)
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == list(range(80_000))
    ds.validate()
