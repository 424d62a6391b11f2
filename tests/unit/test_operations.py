"""The front door (``geneva_provider.operations``) on real Lance tables, run in process (no JVM): every request
model round-trips its JSON, every operation dispatches, ``submit`` hands out the job id while the job runs and
another process follows it to DONE, and a bad request raises the package's error before anything changes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import JobStatus
from geneva_provider.core.contracts.operations import (
    OPERATION,
    AddColumns,
    AddColumnsEntry,
    AlterColumns,
    BackfillColumn,
    CancelJob,
    ColumnAlteration,
    CreateIndex,
    CreateView,
    DropColumns,
    DropIndex,
    GetJob,
    IndexStats,
    JobAccepted,
    JobInfo,
    JobList,
    ListIndices,
    ListJobs,
    RefreshView,
    SourceQuery,
    UdfColumnRef,
    ViewCreated,
    VirtualColumnEntry,
    parse_operation,
)
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, JobNotFoundError, TableNotFoundError
from geneva_provider.operations import run, submit
from geneva_provider.stages import InProcessRunner
from tests.helpers import counting_double, events_table, read_calls


def values(tbl, name: str) -> dict[int, object]:
    t = tbl.to_arrow(["x", name])
    return dict(zip(t.column("x").to_pylist(), t.column(name).to_pylist(), strict=True))


def wait_done(db, job_id: str, timeout: float = 60) -> JobInfo:
    deadline = time.monotonic() + timeout
    while True:
        info = run(db, GetJob(job_id=job_id))
        if info.job.status in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED) or time.monotonic() > deadline:
            return info
        time.sleep(0.1)


def every_request(udf_b64: str) -> list:
    return [
        BackfillColumn(id=["t"], column="y", where="x > 3", concurrency=2, checkpoint_size=10, min_checkpoint_size=5,
                       max_checkpoint_size=20, task_size=10, num_frags=1, commit_granularity=2, read_version=3),
        CreateView(id=["v"], kind="query", source_query=SourceQuery(
            id=["t"], where="x < 5", columns={"x": "x"},
            udf_columns={"y": UdfColumnRef(udf=udf_b64, input_columns=["x"])}), with_no_data=False),
        RefreshView(id=["v"], src_version=4, max_rows_per_fragment=100),
        AddColumns(id=["t"], new_columns=[
            AddColumnsEntry(name="y", virtual_column=VirtualColumnEntry(udf=udf_b64, udf_name="double",
                                                                         udf_version="1", input_columns=["x"],
                                                                         outputs=["y"])),
            AddColumnsEntry(name="z", expression="x * 3")]),
        AlterColumns(id=["t"], alterations=[ColumnAlteration(path="a", rename="b")]),
        DropColumns(id=["t"], columns=["y"]),
        CreateIndex(id=["t"], column="v", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2),
        ListIndices(id=["t"]),
        IndexStats(id=["t"], index_name="v_idx"),
        DropIndex(id=["t"], index_name="v_idx"),
        GetJob(job_id="j"),
        ListJobs(id=["t"], status="DONE", kind="backfill"),
        CancelJob(job_id="j"),
    ]


def test_every_request_round_trips_its_json(call_dir):
    udf_b64 = counting_double(call_dir).pickled_b64()
    requests = every_request(udf_b64)
    assert len({r.op for r in requests}) == 13  # one of each operation
    for request in requests:
        wire = request.model_dump_json()
        back = parse_operation(wire)
        assert type(back) is type(request) and back == request, request.op
        assert OPERATION.validate_python(json.loads(wire)) == request


def test_an_in_process_udf_travels_as_its_base64_pickle(call_dir):
    fn = counting_double(call_dir)
    entry = VirtualColumnEntry(udf=fn, input_columns=["x"])
    wire = json.loads(entry.model_dump_json())
    assert isinstance(wire["udf"], str)
    assert gp.UDF.load(wire["udf"]).name == "double"


def test_a_bad_request_names_the_field():
    with pytest.raises(InvalidArgumentError, match=r"column: Field required"):
        parse_operation({"op": "backfill_column", "id": ["t"]})
    with pytest.raises(InvalidArgumentError, match=r"'no_such_op'"):
        parse_operation('{"op": "no_such_op", "id": ["t"]}')
    with pytest.raises(InvalidArgumentError, match=r"id: List should have at least 1 item"):
        parse_operation({"op": "list_indices", "id": []})


def test_run_backfills_with_exact_values_on_the_rows_asked(db, call_dir):
    tbl = db.create_table("events", events_table(300), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    result = run(db, BackfillColumn(id=["events"], column="y", where="x >= 100", checkpoint_size=50),
                 spark=InProcessRunner(parallelism=2))
    assert result.rows_computed == 200
    assert sorted(read_calls(call_dir)) == list(range(100, 300))
    assert values(tbl, "y") == {x: (2 * x if x >= 100 else None) for x in range(300)}
    tbl.dataset().validate()
    jobs = run(db.catalog, ListJobs(id=["events"]))
    assert isinstance(jobs, JobList) and [j.job_id for j in jobs.jobs] == [result.job_id]
    assert jobs.jobs[0].status == JobStatus.DONE and jobs.jobs[0].column == "y"


def test_submit_returns_the_id_while_the_job_runs_and_another_process_sees_it_done(db, call_dir, tmp_path):
    gate = tmp_path / "gate"
    gate.touch()
    tbl = db.create_table("events", events_table(200), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.05, slow_while=str(gate))})
    accepted = submit(db, BackfillColumn(id=["events"], column="y", checkpoint_size=20),
                      spark=InProcessRunner(parallelism=1))
    assert isinstance(accepted, JobAccepted)
    running = run(db, GetJob(job_id=accepted.job_id)).job
    assert running.status in (JobStatus.PENDING, JobStatus.RUNNING) and running.table == "events"
    gate.unlink()
    assert wait_done(db, accepted.job_id).job.status == JobStatus.DONE
    probe = ("import sys; from geneva_provider.core.catalog import Catalog; "
             "from geneva_provider.core.contracts.operations import GetJob; "
             "from geneva_provider.operations import run; "
             "print(run(Catalog(sys.argv[1]), GetJob(job_id=sys.argv[2])).model_dump_json())")
    out = subprocess.run([sys.executable, "-c", probe, db.uri, accepted.job_id], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[2])
    seen = JobInfo.model_validate_json(out.stdout.strip().splitlines()[-1]).job
    assert seen.job_id == accepted.job_id and seen.status == JobStatus.DONE and seen.rows_committed == 200
    assert values(tbl, "y") == {x: 2 * x for x in range(200)}
    tbl.dataset().validate()


def test_cancel_job_stops_a_submitted_job_and_nothing_half_lands(db, call_dir, tmp_path):
    gate = tmp_path / "gate"
    gate.touch()
    tbl = db.create_table("events", events_table(200), max_rows_per_file=200)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.05, slow_while=str(gate))})
    version = tbl.version
    accepted = submit(db, BackfillColumn(id=["events"], column="y", checkpoint_size=20),
                      spark=InProcessRunner(parallelism=1))
    cancelled = run(db, CancelJob(job_id=accepted.job_id))
    assert cancelled.job.job_id == accepted.job_id
    info = wait_done(db, accepted.job_id)
    gate.unlink()
    assert info.job.status == JobStatus.CANCELLED
    assert tbl.version == version and set(values(tbl, "y").values()) == {None}
    tbl.dataset().validate()


def test_bad_requests_raise_before_anything_changes(db, call_dir):
    tbl = db.create_table("events", events_table(100))
    tbl.add_columns({"y": counting_double(call_dir)})
    version = tbl.version
    runner = InProcessRunner()
    with pytest.raises(TableNotFoundError, match="nope"):
        submit(db, BackfillColumn(id=["nope"], column="y"), spark=runner)
    with pytest.raises(ColumnError, match="'zz'"):
        submit(db, BackfillColumn(id=["events"], column="zz"), spark=runner)
    with pytest.raises(InvalidArgumentError, match="checkpoint_size"):
        submit(db, BackfillColumn(id=["events"], column="y", checkpoint_size=-5), spark=runner)
    with pytest.raises(InvalidArgumentError, match="no_such_column"):
        run(db, BackfillColumn(id=["events"], column="y", where="no_such_column > 1"), spark=runner)
    with pytest.raises(JobNotFoundError, match="'nope'"):
        run(db, GetJob(job_id="nope"))
    with pytest.raises(InvalidArgumentError, match="status must be one of"):
        run(db, ListJobs(status="SLEEPING"))
    assert tbl.version == version and read_calls(call_dir) == []
    assert run(db, ListJobs()).jobs == []


def test_a_view_created_from_its_wire_form_and_refreshed_by_its_job(db, call_dir):
    src = db.create_table("events", events_table(50))
    udf_b64 = counting_double(call_dir).pickled_b64()
    request = parse_operation(json.dumps({
        "op": "create_materialized_view", "id": ["evens"], "kind": "query", "with_no_data": False,
        "source_query": {"id": ["events"], "where": "x % 2 = 0", "columns": {"x": "x"},
                         "udf_columns": {"y": {"udf": udf_b64, "input_columns": ["x"]}}}}))
    created = run(db, request, spark=InProcessRunner())
    assert isinstance(created, ViewCreated) and created.job_id is not None
    assert wait_done(db, created.job_id).job.status == JobStatus.DONE
    view = db.open_table("evens")
    assert values(view, "y") == {x: 2 * x for x in range(0, 50, 2)}
    src.add(events_table(10, start=50))
    result = run(db, RefreshView(id=["evens"]), spark=InProcessRunner())
    assert result.rows_computed == 5
    assert values(view, "y") == {x: 2 * x for x in range(0, 60, 2)}
    view.dataset().validate()
    kinds = sorted(j.kind for j in run(db, ListJobs(id=["evens"])).jobs)
    assert kinds == ["refresh", "refresh"]


def test_a_view_request_on_a_missing_source_changes_nothing(db):
    with pytest.raises(TableNotFoundError, match="gone"):
        run(db, CreateView(id=["v"], source_query=SourceQuery(id=["gone"])))
    assert db.table_names() == []


def test_columns_added_from_their_wire_form_altered_and_dropped(db, call_dir):
    tbl = db.create_table("events", events_table(40))
    udf_b64 = counting_double(call_dir).pickled_b64()
    changed = run(db, parse_operation({"op": "add_columns", "id": ["events"], "new_columns": [
        {"name": "y", "virtual_column": {"udf": udf_b64, "udf_name": "double", "input_columns": ["x"]}},
        {"name": "z", "expression": "x * 3"}]}))
    assert changed.version == tbl.version
    assert values(tbl, "z") == {x: 3 * x for x in range(40)}
    assert set(values(tbl, "y").values()) == {None}  # declared: NULL until backfilled
    assert run(db, BackfillColumn(id=["events"], column="y"), spark=InProcessRunner()).rows_computed == 40
    assert values(tbl, "y") == {x: 2 * x for x in range(40)}
    run(db, AlterColumns(id=["events"], alterations=[ColumnAlteration(path="z", rename="z3")]))
    assert values(tbl, "z3") == {x: 3 * x for x in range(40)}
    run(db, DropColumns(id=["events"], columns=["y"]))
    assert [n for n in tbl.schema.names if "y" in n] == []
    tbl.dataset().validate()


def test_bad_column_requests_change_nothing(db, call_dir):
    tbl = db.create_table("events", events_table(10))
    version = tbl.version
    udf_b64 = counting_double(call_dir).pickled_b64()
    with pytest.raises(InvalidArgumentError, match=r"udf_backend 'DockerUDFSpecV1' cannot be run"):
        run(db, AddColumns(id=["events"], new_columns=[AddColumnsEntry(name="y", virtual_column=VirtualColumnEntry(
            udf=udf_b64, udf_backend="DockerUDFSpecV1"))]))
    with pytest.raises(InvalidArgumentError, match=r"column 'y' takes exactly one of"):
        run(db, AddColumns(id=["events"], new_columns=[AddColumnsEntry(name="y", expression="x", computed="x")]))
    with pytest.raises(ColumnError, match=r"\['x'\] exist already"):
        run(db, AddColumns(id=["events"], new_columns=[
            AddColumnsEntry(name="y", virtual_column=VirtualColumnEntry(udf=udf_b64)),
            AddColumnsEntry(name="x", expression="id + 1")]))
    with pytest.raises(TableNotFoundError, match="nope"):
        run(db, DropColumns(id=["nope"], columns=["x"]))
    assert tbl.version == version and tbl.schema.names == ["id", "x"]


def test_index_built_listed_described_and_dropped(db):
    from tests.index_data import clustered

    tbl = db.create_table("t", clustered(2000), max_rows_per_file=500)
    built = run(db, CreateIndex(id=["t"], column="vec", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=8),
                spark=InProcessRunner(parallelism=2))
    assert built.rows_indexed == 2000
    listed = run(db, ListIndices(id=["t"])).indexes
    assert [(i.name, i.index_type, i.num_indexed_rows) for i in listed] == [("vec_idx", "IVF_PQ", 2000)]
    stats = run(db, IndexStats(id=["t"], index_name="vec_idx")).stats
    assert stats.num_partitions == 4 and stats.num_unindexed_rows == 0
    with pytest.raises(InvalidArgumentError, match=r"drop_index on table 't': no index 'other'"):
        run(db, DropIndex(id=["t"], index_name="other"))
    assert run(db, DropIndex(id=["t"], index_name="vec_idx")).indexes == []
    assert tbl.list_indices() == []


def test_plan_stores_the_plan_with_every_option_of_the_request_and_changes_no_value(db, call_dir):
    from geneva_provider.operations import plan
    from geneva_provider.pipeline.stages.planning import load_plan

    tbl = db.create_table("events", events_table(300), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    summary = plan(db, BackfillColumn(id=["events"], column="y", where="x >= 50", checkpoint_size=20,
                                      min_checkpoint_size=10, max_checkpoint_size=40, task_size=25,
                                      commit_granularity=1, concurrency=3), airflow_run_id="manual__1")
    assert (summary.rows_to_compute, summary.tasks) == (250, 2 + 4 + 4)  # 50, 100, 100 rows in tasks of 25
    doc, _ = load_plan(summary.plan_uri)
    s = doc.settings
    assert (s.checkpoint_size, s.min_checkpoint_size, s.max_checkpoint_size, s.task_size, s.commit_granularity,
            s.concurrency, doc.where) == (20, 10, 40, 25, 1, 3, "x >= 50")
    [job] = run(db, ListJobs(id=["events"])).jobs
    assert (job.job_id, job.airflow_run_id, job.status, job.rows_planned) == (summary.job_id, "manual__1",
                                                                              JobStatus.PENDING, 250)
    assert read_calls(call_dir) == [] and set(values(tbl, "y").values()) == {None}  # planned, nothing computed


def test_plan_of_an_index_request_and_of_an_operation_that_is_no_job(db):
    from geneva_provider.operations import plan
    from tests.index_data import clustered

    db.create_table("t", clustered(2000), max_rows_per_file=500)
    summary = plan(db, CreateIndex(id=["t"], column="vec", num_partitions=4, num_sub_vectors=8),
                   options={"target_groups": 2})
    assert (summary.kind, summary.index_name, summary.tasks, summary.rows_to_compute) == ("index", "vec_idx", 2, 2000)
    with pytest.raises(InvalidArgumentError, match=r"operation 'drop_columns' is not a job"):
        plan(db, DropColumns(id=["t"], columns=["vec"]))
    with pytest.raises(InvalidArgumentError, match=r"num_sub_vectors=5 does not divide the dimension 64"):
        plan(db, CreateIndex(id=["t"], column="vec", num_sub_vectors=5))


def test_a_full_text_index_request_carries_its_tokenizer_from_the_spec_to_the_plan(db):
    import lance_namespace as ln
    import pyarrow as pa

    from geneva_provider.core.contracts.index_models import FtsConfig
    from geneva_provider.namespace import convert
    from geneva_provider.operations import plan
    from geneva_provider.pipeline.stages.planning import open_plan

    db.create_table("docs", pa.table({"x": pa.array(range(50), pa.int64()),
                                      "s": [f"doc number {x}" for x in range(50)]}))
    request = convert.create_index(ln.CreateTableIndexRequest(
        id=["docs"], column="s", index_type="INVERTED", with_position=True, stem=False, language="French"),
        scalar=True)
    assert parse_operation(request.model_dump_json()) == request  # the tokenizer travels in the request's JSON
    doc, _ = open_plan(plan(db, request).plan_uri)
    assert doc.request.fts == FtsConfig(with_position=True, stem=False, language="French")
    assert doc.request.column == "s"
