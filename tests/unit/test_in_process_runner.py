"""Whole jobs on real Lance tables through the in-process task runner: no JVM (the unit tier's tripwire).

The runner is the seam the Spark stages run their tasks through, not a mock of Spark: the stages are
the ones the operators run, and every partition function, task and result is pickled and loaded as on
the way to a Spark Python worker -- so what could not cross to a worker fails here too.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import (
    CheckpointMissingError,
    InvalidArgumentError,
    JobCancelledError,
    ResourceUnavailableError,
)
from geneva_provider.core.views.meta import IS_SET
from geneva_provider.pipeline.spark.runner import job_tag
from geneva_provider.pipeline.spark.task_runner import TaskRunner, is_compute, task_runner
from geneva_provider.stages import (
    BackfillOptions,
    InProcessRunner,
    load_plan,
    plan_backfill,
    run_apply,
    run_write_commit,
    verify,
)
from tests.helpers import clear_calls, counting_double, counting_split, events_table, read_calls
from tests.unit.test_udtf_views import doc_text, docs_table


def values(tbl, name: str) -> dict[int, object]:
    t = tbl.to_arrow(["x", name])
    return dict(zip(t.column("x").to_pylist(), t.column(name).to_pylist(), strict=True))


def no_spark_context() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None


def test_a_backfill_stage_by_stage_then_an_incremental_rerun(db, call_dir):
    runner = InProcessRunner(parallelism=3)
    assert isinstance(runner, TaskRunner) and task_runner(runner) is runner and is_compute(runner)
    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=1_000)
    tbl.delete("x >= 1000 AND x < 1100")
    live = [x for x in range(4_000) if not 1000 <= x < 1100]
    tbl.add_columns({"y": counting_double(call_dir)})

    summary = plan_backfill(tbl.ref, "y", BackfillOptions(checkpoint_size=500), parallelism=runner.parallelism())
    plan, _ = load_plan(summary.plan_uri)
    assert summary.rows_to_compute == len(live) and len(plan.tasks) > 1
    with pytest.raises(CheckpointMissingError, match="apply stage has not finished"):
        run_write_commit(summary.plan_uri, runner)  # refused before anything is written
    applied = run_apply(summary.plan_uri, runner)
    assert (applied.tasks_run, applied.rows_computed, applied.errors) == (len(plan.tasks), len(live), 0)
    assert applied.checkpoints_written >= len(live) // 500
    written = run_write_commit(summary.plan_uri, runner)
    assert written.fragments_committed == 4 and written.rows_committed == len(live)
    assert written.version == tbl.dataset().version
    verify(summary)

    ds = tbl.dataset()
    ds.validate()
    assert ds.count_rows() == len(live)
    assert values(tbl, "y") == {x: 2 * x for x in live}
    assert sorted(read_calls(call_dir)) == live  # live rows only, each once

    # Changed inputs and appended rows: only those are computed again.
    clear_calls(call_dir)
    tbl.dataset().update({"x": "x + 100000"}, where="id % 50 = 7")
    tbl.add(events_table(500, start=4_000))
    changed = sorted([x + 100_000 for x in live if x % 50 == 7] + list(range(4_000, 4_500)))
    rerun = tbl.backfill("y", spark=runner)
    assert rerun.rows_computed == len(changed) and rerun.rows_reused == len(live) + 500 - len(changed)
    assert sorted(read_calls(call_dir)) == changed
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert len(got["x"]) == len(live) + 500 and got["y"] == [2 * x for x in got["x"]]
    tbl.dataset().validate()

    clear_calls(call_dir)
    assert tbl.backfill("y", spark=runner).rows_computed == 0 and read_calls(call_dir) == []
    assert no_spark_context()


def test_a_view_refresh_then_an_incremental_one(db, call_dir):
    runner = InProcessRunner()
    src = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    view = db.create_materialized_view("evens", src.search(None).where("x % 2 = 0").select(
        {"x": "x", "y": counting_double(call_dir)}), max_rows_per_fragment=500)

    first = view.refresh(spark=runner)
    assert first.rows_computed == 1_500
    got = view.to_arrow(["x", "y", IS_SET]).to_pydict()
    assert sorted(got["x"]) == list(range(0, 3_000, 2)) and all(got[IS_SET])
    assert got["y"] == [2 * x for x in got["x"]]
    assert sorted(read_calls(call_dir)) == list(range(0, 3_000, 2))

    clear_calls(call_dir)
    src.add(events_table(1_000, start=3_000))
    second = view.refresh(spark=runner)
    assert second.rows_computed == 500 and second.rows_reused == 1_500
    assert sorted(read_calls(call_dir)) == list(range(3_000, 4_000, 2))
    got = view.to_arrow(["x", "y"]).to_pydict()
    assert sorted(got["x"]) == list(range(0, 4_000, 2)) and got["y"] == [2 * x for x in got["x"]]
    view.dataset().validate()
    assert no_spark_context()


def test_a_chunker_view_refresh_expands_only_new_documents(db, tmp_path):
    runner = InProcessRunner()
    calls = tmp_path / "split"
    calls.mkdir()
    docs = db.create_table("docs", docs_table(range(300)), stable_row_ids=True, max_rows_per_file=100)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(calls)))
    assert view.refresh(spark=runner).rows_computed == 300
    assert sorted(read_calls(calls)) == list(range(300))
    rows = view.count_rows()
    assert rows > 0

    clear_calls(calls)
    docs.add(docs_table(range(300, 330)))
    assert view.refresh(spark=runner).rows_computed == 30
    assert sorted(read_calls(calls)) == list(range(300, 330))
    assert set(view.to_arrow(["doc_id"]).column("doc_id").to_pylist()) == {i for i in range(330) if doc_text(i)}
    assert view.count_rows() > rows
    view.check()  # no pair twice, no orphan


def test_a_compaction_keeps_every_computed_value_valid(db, call_dir):
    runner = InProcessRunner()
    tbl = db.create_table("events", events_table(100), max_rows_per_file=100)
    for start in range(100, 1_000, 100):
        tbl.add(events_table(100, start=start))
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=runner)
    assert len(tbl.dataset().get_fragments()) == 10

    result = tbl.compact(spark=runner)
    assert (result.fragments_removed, result.fragments_added) == (10, 1)
    assert result.version == tbl.dataset().version
    tbl.dataset().validate()
    assert len(tbl.dataset().get_fragments()) == 1
    assert values(tbl, "y") == {x: 2 * x for x in range(1_000)}

    clear_calls(call_dir)  # the values follow the rows: nothing to compute after the rewrite
    assert tbl.backfill("y", spark=runner).rows_computed == 0 and read_calls(call_dir) == []
    assert no_spark_context()


def test_declaring_an_identical_udf_again_changes_nothing_and_keeps_its_values(db, call_dir, caplog):
    runner = InProcessRunner()
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    assert tbl.backfill("y", spark=runner).rows_computed == 2_000
    clear_calls(call_dir)
    version, declared = tbl.version, tbl.udf_columns()["y"]

    # A notebook cell run again: the UDF is made anew, but it computes the same thing.
    with caplog.at_level(logging.INFO, logger="geneva_provider.pipeline.schema_changes"):
        assert tbl.add_columns({"y": counting_double(call_dir)}) == version
    assert tbl.version == version and tbl.udf_columns()["y"] == declared  # same incarnation: no new table version
    assert "column 'y' of table 'events' already holds UDF 'double'" in caplog.text
    assert tbl.backfill("y", spark=runner).rows_computed == 0 and read_calls(call_dir) == []
    assert values(tbl, "y") == {x: 2 * x for x in range(2_000)}

    # With a new column in the same call, only the new one is added, in one commit.
    assert tbl.add_columns({"y": counting_double(call_dir), "z": (counting_double(call_dir), ["y"])}) == version + 1
    assert tbl.udf_columns()["y"] == declared and tbl.udf_columns()["z"]["input_columns"] == ["y"]
    assert tbl.backfill("y", spark=runner).rows_computed == 0 and read_calls(call_dir) == []


def test_a_different_udf_or_a_plain_column_under_the_name_is_refused_saying_what_differs(db, call_dir):
    tbl = db.create_table("events", events_table(100))
    tbl.add_columns({"y": counting_double(call_dir)})
    version, declared = tbl.version, tbl.udf_columns()["y"]

    @gp.udf(data_type=pa.int64(), name="double")
    def other_double(x: int) -> int:
        return x + x

    @gp.udf(data_type=pa.float64(), name="double", version=declared["version"])
    def float_double(x: int) -> float:
        return 2.0 * x

    refused = [
        ({"y": other_double}, ["column 'y'", "table 'events'", f"version {other_double.version}",
                               declared["version"]]),
        ({"y": float_double}, ["column 'y'", "table 'events'", "double", "int64"]),
        ({"y": (counting_double(call_dir), ["id"])}, ["column 'y'", "table 'events'", "['id']", "['x']"]),
        ({"x": counting_double(call_dir)}, ["column 'x'", "table 'events'", "not a UDF column"]),
        # atomic: the new column of the same call is not added either
        ({"w": (counting_double(call_dir), ["id"]), "y": other_double}, ["column 'y'"]),
    ]
    for columns, needles in refused:
        with pytest.raises(gp.ColumnError) as exc:
            tbl.add_columns(columns)
        assert all(n in str(exc.value) for n in needles), (needles, str(exc.value))
        assert tbl.version == version and tbl.udf_columns() == {"y": declared}


def test_dropping_a_udf_column_drops_its_values_so_adding_it_again_rewrites_every_row(db, call_dir):
    runner = InProcessRunner()
    tbl = db.create_table("events", events_table(500))
    tbl.add_columns({"y": counting_double(call_dir)})
    # Every chunk checkpointed: a cheap UDF's chunks are not when the worker measures recomputing them as
    # cheaper (timing-dependent), unless the checkpoint size is the user's.
    tbl.backfill("y", spark=runner, checkpoint_size=100)
    clear_calls(call_dir)

    # While the store still holds the batch checkpoints, every row is written again from them.
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": counting_double(call_dir)})  # the identical UDF: the values and fingerprints are gone
    again = tbl.backfill("y", spark=runner)
    assert (again.rows_computed, again.rows_reused, read_calls(call_dir)) == (0, 500, [])
    assert values(tbl, "y") == {x: 2 * x for x in range(500)}

    # Once the clean-up has removed them (the column they were for is gone), every row is computed again.
    tbl.drop_columns(["y"])
    tbl.cleanup_checkpoints()
    tbl.add_columns({"y": counting_double(call_dir)})
    assert tbl.backfill("y", spark=runner).rows_computed == 500
    assert sorted(read_calls(call_dir)) == list(range(500))


def test_a_udf_asking_for_gpus_is_refused_naming_it(db, call_dir):
    @gp.udf(data_type=pa.int64(), num_gpus=1)
    def on_gpu(x: int) -> int:
        Path(call_dir, "called").touch()
        return x

    tbl = db.create_table("events", events_table(100))
    tbl.add_columns({"g": on_gpu})
    with pytest.raises(ResourceUnavailableError, match=r"UDF 'on_gpu' \(column 'g'\) asks for num_gpus=1.*in-process"):
        tbl.backfill("g", spark=InProcessRunner())
    assert not list(Path(call_dir).iterdir())
    assert tbl.to_arrow(["g"]).column("g").null_count == 100


# ---------------------------------------------------------------------- the executor contract, directly
def _times_ten(tasks):
    for t in tasks:
        yield t * 10


def _returns_a_lock(tasks):
    for _ in tasks:
        yield threading.Lock()


def _raises_a_package_error(tasks):
    for t in tasks:
        if t == 3:
            raise CheckpointMissingError(f"task {t}: no checkpoint")
        yield t


def _raises_a_bug(tasks):
    for t in tasks:
        yield 1 // (t - 2)


def test_tasks_and_results_cross_as_pickles():
    runner = InProcessRunner()
    assert runner.run_tasks([1, 2, 3, 4], _times_ten, description="t", concurrency=2) == [10, 30, 20, 40]
    assert runner.run_tasks([], _times_ten, description="t") == []

    seen: list[int] = []

    def remembers(tasks):  # a closure over a driver-side list: the worker gets a copy
        for t in tasks:
            seen.append(t)
            yield list(seen)

    assert runner.run_tasks([1, 2], remembers, description="t", concurrency=1) == [[1], [1, 2]]
    assert seen == []  # as on Spark: the driver's list never changes


def test_what_cannot_be_pickled_fails_as_on_spark(tmp_path):
    runner = InProcessRunner()
    ran = tmp_path / "ran"

    def logs(tasks):
        for t in tasks:
            ran.touch()
            yield t

    with pytest.raises(pickle.PicklingError, match=r"geneva apply t\.y: the tasks of partition 1 cannot be pickled"):
        runner.run_tasks([1, threading.Lock()], logs, description="geneva apply t.y")
    assert not ran.exists()  # refused before any task ran

    lock = threading.Lock()

    def holds_a_lock(tasks):
        with lock:
            yield from tasks

    with pytest.raises(pickle.PicklingError, match=r"geneva write t\.y: the partition function cannot be pickled"):
        runner.run_tasks([1], holds_a_lock, description="geneva write t.y")
    with pytest.raises(pickle.PicklingError, match="geneva compact t: partition 0: a lock it returned cannot be "
                                                   "pickled"):
        runner.run_tasks([1], _returns_a_lock, description="geneva compact t")


def test_a_package_error_comes_back_as_itself_and_a_bug_names_its_partition():
    runner = InProcessRunner()
    with pytest.raises(CheckpointMissingError, match="task 3: no checkpoint") as raised:
        runner.run_tasks([1, 3, 3], _raises_a_package_error, description="t")
    assert "(2 Spark tasks failed the same way)" in raised.value.__notes__
    with pytest.raises(ZeroDivisionError) as bug:
        runner.run_tasks([1, 2, 3], _raises_a_bug, description="geneva apply t.y")
    assert any("geneva apply t.y: partition 1" in note for note in bug.value.__notes__)


def test_cancel_stops_a_jobs_running_tasks_before_their_next_one(tmp_path):
    runner = InProcessRunner()
    log, release = tmp_path / "log", tmp_path / "release"

    def waits(tasks):
        for t in tasks:
            with open(log, "a") as f:
                f.write(f"{t}\n")
            deadline = time.monotonic() + 30
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            yield t

    raised: list[BaseException] = []

    def run() -> None:
        try:
            runner.run_tasks([0, 1, 2, 3], waits, description="t", concurrency=1, tag=job_tag("j1"))
        except BaseException as exc:  # noqa: BLE001 - checked below
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.cancel("another-job")  # another job's tag: nothing stops
    runner.cancel("j1")
    release.touch()
    thread.join(30)
    assert log.read_text().split() == ["0"]
    assert len(raised) == 1 and isinstance(raised[0], JobCancelledError)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_parallelism_is_refused(bad):
    with pytest.raises(InvalidArgumentError, match=f"InProcessRunner: parallelism must be a positive whole number, "
                                                   f"got {bad!r}"):
        InProcessRunner(parallelism=bad)


def test_a_view_made_before_fingerprint_schemes_were_recorded_keeps_its_blake2b_fingerprints(db, tmp_path):
    """A chunker view whose metadata names no fingerprint scheme (an earlier release made it) stores and compares
    BLAKE2b fingerprints, so a refresh that compares it with its whole source (after a refresh killed between its
    commit and its metadata) expands only the parents whose inputs changed; a view made now records XXH3."""
    from geneva_provider.core.contracts.kinds import DigestScheme
    from geneva_provider.core.fingerprints import digest_fingerprints
    from geneva_provider.core.views.meta import SOURCE_ROW_ID
    from geneva_provider.core.views.udtf_meta import (
        META_UDTF_FINGERPRINTS,
        META_UDTF_VIEW_VERSION,
        SOURCE_FP,
        udtf_view_state,
    )

    runner = InProcessRunner()
    calls = tmp_path / "split"
    calls.mkdir()
    docs = db.create_table("docs", docs_table(range(60)), stable_row_ids=True, max_rows_per_file=20)
    source = docs.search(None).select(["doc_id", "text"])
    new = db.create_udtf_view("new_chunks", source=source, udtf=counting_split(str(calls)))
    old = db.create_udtf_view("old_chunks", source=source, udtf=counting_split(str(calls)))
    old.dataset().update_schema_metadata({META_UDTF_FINGERPRINTS: None})  # as an earlier release made it
    for view, scheme in ((new, DigestScheme.XXH3), (old, DigestScheme.BLAKE2B)):
        state = udtf_view_state(view.dataset().schema.metadata, view.name)
        assert state.fingerprints is scheme
        view.refresh(spark=runner)
        held = view.dataset().to_table(columns=[SOURCE_ROW_ID, SOURCE_FP])
        ids = held.column(SOURCE_ROW_ID)
        parents = docs.dataset()._take_rows(ids.cast(pa.uint64()), columns=state.spec.read_columns())
        assert held.column(SOURCE_FP).to_pylist() == digest_fingerprints(
            [parents.column(c) for c in state.spec.read_columns()], state.seed(), len(ids), scheme=scheme).to_pylist()
        assert view.check(fingerprints=True).exact

    # What a kill between a refresh's commit and its metadata leaves: the next refresh compares the view with its
    # whole source, keeping each parent whose stored fingerprint is its inputs' now.
    old.dataset().update_schema_metadata({META_UDTF_VIEW_VERSION: "-1"})
    docs.dataset().update({"text": "concat(text, 'x')"}, where="doc_id < 5")
    clear_calls(calls)
    old.refresh(spark=runner)
    without_rows = {i for i in range(60) if not doc_text(i)}  # a parent without rows has no fingerprint to keep
    assert set(read_calls(calls)) == set(range(5)) | without_rows
    assert old.check(fingerprints=True).exact
    assert udtf_view_state(old.dataset().schema.metadata, old.name).fingerprints is DigestScheme.BLAKE2B
