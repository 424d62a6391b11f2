"""Index builds as jobs through the facade and the CLI, on the in-process runner (no JVM): create / list / stats /
refresh / status, the job record and its progress, cancel, and every bad input refused before Spark, the table
unchanged.  Real Lance tables throughout; tests/spark/test_indexes.py builds the same on Spark."""

from __future__ import annotations

import json
import re
from functools import partial

import numpy as np
import pyarrow as pa
import pytest

from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.models import JobStatus, PlanSummary
from geneva_provider.core.errors import ColumnError, GenevaError, InvalidArgumentError, JobCancelledError
from geneva_provider.stages import InProcessRunner
from tests.index_data import DIM, clustered, queries, recall, vectors

RUNNER = InProcessRunner(parallelism=4)


@pytest.fixture
def tbl(db):
    """4000 rows of clustered 64-d vectors in 8 fragments, a label, a tag list and a text column."""
    data = clustered(4000)
    n = data.num_rows
    ids = np.arange(n)
    data = data.append_column("label", pa.array([f"l{i % 5}" for i in ids])) \
        .append_column("tags", pa.array([[f"t{i % 3}", f"t{i % 7}"] for i in ids], pa.list_(pa.string()))) \
        .append_column("text", pa.array([f"doc {i} about {'cats' if i % 4 == 0 else 'dogs'}" for i in ids]))
    return db.create_table("t", data, max_rows_per_file=500)


def test_create_index_is_a_job_with_a_record_and_its_segments_counted(tbl, db):
    result = tbl.create_index("vec", metric="l2", index_type="IVF_PQ", num_partitions=16, num_sub_vectors=8,
                              spark=RUNNER, target_groups=4)
    assert (result.index_name, result.segments_built, result.segments_committed) == ("vec_idx", 4, 1)
    assert result.segments_per_task == [1, 1, 1, 1] and result.rows_indexed == 4000 and result.job_id
    assert result.fragments_indexed == list(range(8))
    ds = tbl.dataset()
    ds.validate()
    assert recall(ds, queries(ds.to_table())) >= 0.9
    [record] = db.list_jobs("t", kind="index")
    assert (record.job_id, record.kind, record.status, record.column) == (result.job_id, JobKind.INDEX,
                                                                          JobStatus.DONE, "vec")
    assert (record.rows_planned, record.rows_committed, record.segments_planned, record.segments_done) == (
        4000, 4000, 4, 4)
    assert record.version == ds.version


def test_list_indices_index_stats_and_status_say_what_each_index_covers(tbl):
    tbl.create_index(num_partitions=16, num_sub_vectors=8, spark=RUNNER)  # the table's one vector column
    tbl.create_scalar_index("id", spark=RUNNER)
    tbl.add(clustered(300, start=4000).append_column("label", pa.array(["l9"] * 300))
            .append_column("tags", pa.array([["t9"]] * 300, pa.list_(pa.string())))
            .append_column("text", pa.array(["new doc"] * 300)))
    listed = tbl.list_indices()
    assert [i.name for i in listed] == ["id_idx", "vec_idx"]
    stats = tbl.index_stats("vec_idx")
    assert (stats.index_type, stats.columns, stats.num_indexed_rows, stats.num_unindexed_rows) == (
        "IVF_PQ", ["vec"], 4000, 300)
    assert (stats.num_unindexed_fragments, stats.num_partitions, stats.num_segments) == (1, 16, 1)
    report = tbl.status()
    assert [(i.name, i.num_indexed_rows, i.num_unindexed_rows) for i in report.indexes] == [
        ("id_idx", 4000, 300), ("vec_idx", 4000, 300)]
    text = str(report)
    assert "vec_idx" in text and "IVF_PQ" in text and "unindexed" in text
    with pytest.raises(InvalidArgumentError) as err:
        tbl.index_stats("nope")
    assert "'t'" in str(err.value) and "'nope'" in str(err.value) and "id_idx" in str(err.value)


def test_refresh_index_indexes_only_new_fragments_with_the_saved_artifacts(tbl):
    tbl.create_index("vec", index_type="IVF_SQ", num_partitions=8, spark=RUNNER)
    version = tbl.version
    nothing = tbl.refresh_index("vec_idx", spark=RUNNER)
    assert nothing.nothing_to_do and nothing.job_id is None and tbl.version == version  # no job, no commit
    tbl.add(clustered(1200, start=4000).append_column("label", pa.array(["l9"] * 1200))
            .append_column("tags", pa.array([["t9"]] * 1200, pa.list_(pa.string())))
            .append_column("text", pa.array(["new doc"] * 1200)))
    result = tbl.refresh_index(column="vec", spark=RUNNER)
    assert result.refresh and not result.trained and result.fragments_indexed == [8] and result.rows_indexed == 1200
    assert tbl.index_stats("vec_idx").num_unindexed_rows == 0
    retrained = tbl.refresh_index("vec_idx", retrain=True, spark=RUNNER)
    assert retrained.trained and not retrained.refresh and retrained.rows_indexed == 5200
    tbl.dataset().validate()


def test_scalar_and_fts_indexes_through_the_facade_answer_as_a_scan(tbl):
    for column, kind in (("label", "BITMAP"), ("id", "BTREE"), ("tags", "LABEL_LIST")):
        assert tbl.create_scalar_index(column, kind, spark=RUNNER).segments_committed == 1
    tbl.create_fts_index("text", spark=RUNNER, stem=False)
    ds = tbl.dataset()
    assert {d.name: d.index_type for d in ds.describe_indices()}.keys() == {"label_idx", "id_idx", "tags_idx",
                                                                            "text_idx"}
    scan = ds.to_table(filter="label = 'l3' AND id < 900", columns=["id"], use_scalar_index=False)
    assert sorted(tbl.search().where("label = 'l3' AND id < 900").select(["id"]).limit(None)
                  .to_arrow().column("id").to_pylist()) == sorted(scan.column("id").to_pylist())
    hits = tbl.search("cats", query_type="fts").select(["id"]).limit(2000).to_arrow().column("id").to_pylist()
    assert sorted(hits) == list(range(0, 4000, 4))


_CANCEL: list = []  # what a segment task calls once it built its segment (module level: its function pickles by name)


def _then_cancel(partition_fn, part):
    yield from partition_fn(part)
    for cancel in _CANCEL:
        cancel()


class CancelsAfterEachTask(InProcessRunner):
    """Runs the segment tasks here, calling what ``_CANCEL`` holds after each task."""

    def run_tasks(self, tasks, partition_fn, **kwargs):
        return super().run_tasks(tasks, partial(_then_cancel, partition_fn), **kwargs)


def test_a_cancelled_build_commits_nothing_and_is_recorded_cancelled(tbl, db):
    handle = tbl.create_index_async("vec", index_type="IVF_FLAT", num_partitions=8, spark=CancelsAfterEachTask(4),
                                    target_groups=4)
    _CANCEL[:] = [handle.cancel]
    try:
        with pytest.raises(JobCancelledError):
            handle.result(timeout=120)
    finally:
        _CANCEL.clear()
    ds = tbl.dataset()
    assert not ds.describe_indices() and ds.version == 1
    [record] = db.list_jobs("t", kind="index")
    assert record.status is JobStatus.CANCELLED and record.segments_done == 1


def test_a_cancel_request_from_another_process_stops_a_running_build(tbl, db):
    """``db.cancel_job`` (what ``geneva-provider jobs cancel`` calls) while the segment tasks run: the job sees the
    request within a second, stops its tasks, commits nothing and records itself CANCELLED."""
    import time

    def request_then_wait():
        [running] = db.list_jobs("t", kind="index", status="RUNNING")
        db.cancel_job(running.job_id)
        time.sleep(1.5)  # longer than the job's look for a request

    _CANCEL[:] = [request_then_wait]
    try:
        with pytest.raises(JobCancelledError):
            tbl.create_index("vec", index_type="IVF_FLAT", num_partitions=8, spark=CancelsAfterEachTask(4),
                             target_groups=4)
    finally:
        _CANCEL.clear()
    ds = tbl.dataset()
    assert not ds.describe_indices() and ds.version == 1
    [record] = db.list_jobs("t", kind="index")
    assert record.status is JobStatus.CANCELLED and 1 <= record.segments_done < 4


def test_the_summary_and_the_plan_are_those_of_an_index_job(tbl):
    from geneva_provider.core.contracts.index_models import IndexSpec
    from geneva_provider.pipeline.indexes.kind import plan_index, run_index

    summary = plan_index(tbl.ref, IndexSpec.of("id", "BTREE"), target_groups=2)
    again = PlanSummary.from_xcom(json.loads(json.dumps(summary.to_xcom())))
    assert (again.kind, again.index_name, again.tasks, again.rows_to_compute) == (JobKind.INDEX, "id_idx", 2, 4000)
    assert again.describe() == ("index 'id_idx' on column 'id': 2 segment tasks over 8 fragments (4,000 rows) at "
                                "version 1")
    result = run_index(summary.plan_uri, RUNNER)
    assert result.job_id == summary.job_id and result.segments_per_task == [1, 1]
    assert tbl.index_stats("id_idx").num_indexed_rows == 4000


def _variable(db):
    x = np.random.default_rng(0).normal(size=(600, 6)).astype(np.float32)
    return db.create_table("bad", pa.table({
        "id": pa.array(range(600)), "name": pa.array([f"n{i}" for i in range(600)]),
        "var": pa.array([list(map(float, r)) for r in x], pa.list_(pa.float32())),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 6),
        "vec2": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 6)}), max_rows_per_file=200)


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda t: t.create_index("nope"), ColumnError, ["'bad'", "'nope'"]),
    (lambda t: t.create_index("name"), InvalidArgumentError, ["'name'", "not vectors"]),
    (lambda t: t.create_index("var"), InvalidArgumentError, ["'var'", "variable-length", "pa.list_(pa.float32(), N)"]),
    (lambda t: t.create_index("vec", num_partitions=2, num_sub_vectors=4), InvalidArgumentError,
     ["num_sub_vectors=4", "dimension 6", "'vec'"]),
    (lambda t: t.create_index("vec", num_partitions=2, num_bits=8, num_sub_vectors=2), InvalidArgumentError,
     ["600 rows", "too few to train PQ"]),
    (lambda t: t.create_index("vec", index_type="IVF_NOPE"), InvalidArgumentError, ["IVF_NOPE", "'vec'"]),
    (lambda t: t.create_index("vec", metric="manhattan"), InvalidArgumentError, ["manhattan", "metric"]),
    (lambda t: t.create_index("vec", num_partitions=601), InvalidArgumentError, ["601", "600 rows"]),
    (lambda t: t.create_index("vec", column="vec2"), InvalidArgumentError, ["vector_column_name='vec'",
                                                                            "column='vec2'"]),
    (lambda t: t.create_index(), InvalidArgumentError, ["several vector columns", "vec", "vec2"]),
    (lambda t: t.create_scalar_index("vec", "BTREE"), InvalidArgumentError, ["BTREE", "'vec'"]),
    (lambda t: t.create_scalar_index("id", "IVF_PQ"), InvalidArgumentError, ["create_scalar_index", "IVF_PQ"]),
    (lambda t: t.create_fts_index("id"), InvalidArgumentError, ["INVERTED", "'id'"]),
    (lambda t: t.create_fts_index("name", stemmer=True), InvalidArgumentError, ["stemmer", "'name'"]),
    (lambda t: t.refresh_index("nope"), InvalidArgumentError, ["'nope'", "'bad'"]),
    (lambda t: t.refresh_index(), InvalidArgumentError, ["name=", "column="]),
    (lambda t: t.create_index("vec", num_partitions=2, index_type="IVF_FLAT", chunks=3), InvalidArgumentError,
     ["chunks", "target_groups"]),
])
def test_bad_input_is_refused_before_spark_and_changes_nothing(db, call, error, words):
    t = _variable(db)
    with pytest.raises(error) as err:
        call(t)  # no spark= given: a JVM started here would fail the unit tier
    assert isinstance(err.value, GenevaError)
    for word in words:
        assert word in str(err.value)
    ds = t.dataset()
    assert ds.version == 1 and not ds.describe_indices() and not db.list_jobs("bad")


def test_the_default_vector_column_is_the_tables_only_one(db):
    data = clustered(1200)
    t = db.create_table("one", data, max_rows_per_file=600)
    assert t.create_index(index_type="IVF_FLAT", num_partitions=4, spark=RUNNER).index_name == "vec_idx"
    assert vectors(t.to_arrow()).shape == (1200, DIM)


def test_the_cli_builds_lists_and_refreshes_an_index_and_refuses_a_bad_one(tbl, db, capsys):
    from geneva_provider.cli import main

    where = ["--db", db.uri]
    assert main([*where, "table", "create-index", "t", "--column", "vec", "--index-type", "IVF_FLAT",
                 "--num-partitions", "8", "--target-groups", "2", "--in-process"]) == 0
    out = capsys.readouterr().out
    assert "index 'vec_idx': built over 8 fragments (4,000 rows) in 1 segment (2 built" in out
    assert main([*where, "--json", "table", "indices", "t"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["name"], listed["index_type"], listed["num_indexed_rows"], listed["num_partitions"]) == (
        "vec_idx", "IVF_FLAT", 4000, 8)
    assert main([*where, "table", "refresh-index", "t", "vec_idx", "--in-process"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main([*where, "table", "indices", "t"]) == 0
    assert re.search(r"vec_idx\s+IVF_FLAT\s+vec\s+4,000\s+0\s+1\s+8", capsys.readouterr().out)
    version = tbl.version
    assert main([*where, "table", "create-index", "t", "--column", "vec", "--num-sub-vectors", "5",
                 "--in-process"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "InvalidArgumentError" in err and "num_sub_vectors=5" in err and "'vec'" in err
    assert tbl.version == version
    [job] = db.list_jobs("t", kind="index")
    assert job.status is JobStatus.DONE


def test_a_foreground_build_shows_its_progress_and_outcome_where_it_runs(tbl, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="geneva_provider"):
        result = tbl.create_scalar_index("id", spark=RUNNER, progress=True, target_groups=2)
    assert result.seconds["total"] > 0 and result.rows_reused == 0
    assert f"index t: done: {result.describe()}" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="geneva_provider"):
        tbl.create_scalar_index("label", "BITMAP", spark=RUNNER, progress=False)
    assert "index t: done" not in caplog.text


def test_the_index_stages_progress_line_counts_segments_from_the_job_record(tbl, db):
    """What an operator's task log (and a deferred stage's triggerer) says while the index stage runs."""
    from geneva_provider.pipeline.stages.progress_lines import ProgressLines

    result = tbl.create_index("vec", index_type="IVF_FLAT", num_partitions=8, spark=RUNNER, target_groups=4)
    record = db.get_job(result.job_id)
    line = ProgressLines(result.job_id, "index").look(record, final=True)
    assert line.startswith(f"index {result.job_id}: DONE; 4 of 4 segments built (4000 of 4000 rows;")
    halfway = record.model_copy(update={"status": JobStatus.RUNNING, "segments_done": 2, "rows_checkpointed": 2000})
    assert "2 of 4 segments built (2000 of 4000 rows;" in ProgressLines(result.job_id, "index").line(halfway)


def test_a_planned_index_job_holds_no_fragment_and_builds_again_after_a_compaction(tbl, db):
    """A compaction planned while an index job is live rewrites its fragments anyway (the kind holds none); the
    index stage then finds them rewritten, plans the build again at the latest version, and indexes every row."""
    from geneva_provider.core.contracts.index_models import IndexSpec
    from geneva_provider.pipeline.indexes.kind import plan_index, run_index

    summary = plan_index(tbl.ref, IndexSpec.of("vec", "IVF_FLAT", num_partitions=8), target_groups=4)
    assert db.get_job(summary.job_id).status is JobStatus.PENDING
    compacted = tbl.compact(2000, spark=RUNNER)
    assert compacted.fragments_removed == 8 and not compacted.held_by and not compacted.excluded
    result = run_index(summary.plan_uri, RUNNER)
    ds = tbl.dataset()
    assert result.fragments_indexed == sorted(f.fragment_id for f in ds.get_fragments())
    assert tbl.index_stats("vec_idx").num_unindexed_rows == 0 and result.rows_indexed == 4000
    assert db.get_job(summary.job_id).status is JobStatus.DONE
    ds.validate()
    assert tbl.cleanup_checkpoints().kept_for_live_jobs == 0
