"""GenevaNamespace with ``job_runner=airflow`` under a real scheduler (test_scheduler.py's deployment, one for the
module): each job request triggers a run of ``geneva_namespace_jobs`` through the REST API (user + password, a token
got from ``/auth/token``), the job id the namespace returns is the DAG run's id, ``describe_job`` follows it to DONE,
and the run's tasks are the job's usual stages:

* a backfill with its tuning options (checkpoint sizes, task size, commit granularity): the plan holds them
  exactly, the values are exact;
* a chunker view made with ``with_no_data=False``: created in the namespace, its first refresh the DAG run whose
  id ``create_materialized_view`` returns; its rows exact;
* ``create_table_index`` with ``num_partitions`` / ``num_sub_vectors``: the index plan and the Spark build, and
  the index Lance reads back has those parameters;
* a table in a child namespace (``["team_a", "docs"]``): its backfill and a query view's first refresh in that
  namespace run as DAG runs on those tables, their values exact."""

from __future__ import annotations

import shutil
import time

import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import AddColumnsEntry, AddVirtualColumnEntry, MaterializedViewUdtfEntry

from geneva_provider.core.contracts.operations import GetJob, SourceQuery
from tests.system import test_scheduler
from tests.system.test_scheduler import ROOT, AirflowStack, with_logs

deployment = test_scheduler.stack  # the deployment fixture ("stack"), started once for this module

pytestmark = pytest.mark.slow
DAG_ID = "geneva_namespace_jobs"
STAGES = ("plan", "apply", "write_commit", "verify")


@pytest.fixture(scope="module")
def ns(deployment: AirflowStack) -> ln.LanceNamespace:
    """The namespace over the deployment's lake, its jobs DAG runs (the DAG file parsed and unpaused first)."""
    shutil.copy(ROOT / "dags_examples" / f"{DAG_ID}.py", deployment.dags / f"{DAG_ID}.py")

    def parsed() -> bool | None:
        dags = {d["dag_id"]: d for d in deployment.get("/dags", params={"limit": 100})["dags"]}
        return True if DAG_ID in dags and not dags[DAG_ID]["is_paused"] else None

    with_logs(lambda stack: stack.wait_for("the namespace DAG to be parsed", parsed, timeout=120))(deployment)
    namespace = ln.connect("geneva", {"root": str(deployment.lake), "job_runner": "airflow",
                                      "airflow.url": deployment.url, "airflow.username": "admin",
                                      "airflow.password": deployment.password})
    assert deployment.password not in repr(namespace)
    return namespace


def done(ns: ln.LanceNamespace, run_id: str) -> object:
    """The job's record once the namespace says DONE (the run ended: its record follows)."""
    for _ in range(100):
        job = ns.describe_job(GetJob(job_id=run_id)).job
        if job.status == "DONE":
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {run_id}: {job}")


def test_a_backfill_request_with_its_options_runs_as_a_dag_run_whose_id_is_the_job_id(
        deployment: AirflowStack, ns: ln.LanceNamespace) -> None:
    with_logs(namespace_backfill)(deployment, ns)  # any failure carries the tail of every component's log


def namespace_backfill(stack: AirflowStack, ns: ln.LanceNamespace) -> None:
    import geneva_provider as gp
    from geneva_provider.core.store.layout import JobStore
    from geneva_provider.pipeline.stages.planning import load_plan

    tbl = gp.connect(str(stack.lake)).create_table("nsjobs", pa.table({"x": pa.array(range(300), pa.int64())}),
                                                   max_rows_per_file=100)

    @gp.udf(data_type=pa.int64(), name="plus_five", version="1")
    def plus_five(x: int) -> int:
        return x + 5

    column = AddVirtualColumnEntry(udf=plus_five.pickled_b64(), udf_name="plus_five", udf_version="1", image="",
                                   input_columns=["x"], outputs=[])
    ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=["nsjobs"], new_columns=[AddColumnsEntry(name="p", virtual_column=column)]))
    run_id = ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(
        id=["nsjobs"], column="p", where="x >= 50", checkpoint_size=20, min_checkpoint_size=10,
        max_checkpoint_size=40, task_size=50, commit_granularity=1)).job_id
    states = stack.wait_for_run(DAG_ID, run_id, timeout=400)
    assert {f"backfill_{s}": states.get(f"backfill_{s}") for s in STAGES} == {
        f"backfill_{s}": "success" for s in STAGES}, states
    assert (states["route"], states["refresh_plan"], states["index_plan"]) == ("success", "skipped", "skipped"), states
    job = done(ns, run_id)
    assert (job.airflow_run_id, job.column, job.rows_committed) == (run_id, "p", 250)
    plan, _ = load_plan(JobStore(tbl.checkpoint_store).plan_uri(job.job_id))
    settings = plan.settings
    assert (settings.checkpoint_size, settings.min_checkpoint_size, settings.max_checkpoint_size,
            settings.task_size, settings.commit_granularity) == (20, 10, 40, 50, 1)
    assert len(plan.tasks) == 1 + 2 + 2  # 50 rows of the first fragment, 100 of the others: tasks of 50 rows
    rows = tbl.to_arrow(["x", "p"]).to_pylist()
    assert {r["x"]: r["p"] for r in rows} == {x: (x + 5 if x >= 50 else None) for x in range(300)}
    tbl.dataset().validate()


def test_a_chunker_views_first_refresh_is_the_dag_run_create_materialized_view_returns(
        deployment: AirflowStack, ns: ln.LanceNamespace) -> None:
    with_logs(namespace_chunker_view)(deployment, ns)


def namespace_chunker_view(stack: AirflowStack, ns: ln.LanceNamespace) -> None:
    import geneva_provider as gp
    from geneva_provider.examples import chunk_text, documents, split_text

    docs = documents(12)
    gp.connect(str(stack.lake)).create_table("nsdocs", docs, max_rows_per_file=4)
    made = ns.create_materialized_view(ln.CreateMaterializedViewRequest(
        id=["nschunks"], kind="chunker", output_schema="", with_no_data=False,
        source_query=SourceQuery(id=["nsdocs"], where="doc_id < 10",
                                 columns={"doc_id": "doc_id", "text": "text"}).model_dump_json(),
        udtf_spec=MaterializedViewUdtfEntry(kind="chunker", udtf=chunk_text.pickled_b64(), udtf_sha="",
                                            udtf_name="chunk_text", udtf_version="1")))
    assert made.job_id is not None
    states = stack.wait_for_run(DAG_ID, made.job_id, timeout=400)
    assert {f"refresh_{s}": states.get(f"refresh_{s}") for s in STAGES} == {
        f"refresh_{s}": "success" for s in STAGES}, states
    assert states["backfill_plan"] == "skipped", states
    job = done(ns, made.job_id)
    assert (job.airflow_run_id, job.table, job.rows_committed) == (made.job_id, "nschunks", 10)
    view = gp.connect(str(stack.lake)).open_table("nschunks")
    got = view.to_arrow(["doc_id", "chunk", "start"]).to_pylist()
    texts = dict(zip(docs.column("doc_id").to_pylist(), docs.column("text").to_pylist(), strict=True))
    assert sorted((r["doc_id"], r["chunk"], r["start"]) for r in got) == sorted(
        (d, c.chunk, c.start) for d in range(10) for c in split_text(texts[d]))
    view.dataset().validate()


def test_a_create_index_request_runs_the_index_plan_and_build_as_a_dag_run(
        deployment: AirflowStack, ns: ln.LanceNamespace) -> None:
    with_logs(namespace_index)(deployment, ns)


def namespace_index(stack: AirflowStack, ns: ln.LanceNamespace) -> None:
    import geneva_provider as gp
    from tests.index_data import clustered

    tbl = gp.connect(str(stack.lake)).create_table("nsvecs", clustered(2_000), max_rows_per_file=500)
    made = ns.create_table_index(ln.CreateTableIndexRequest(id=["nsvecs"], column="vec", index_type="IVF_PQ",
                                                            distance_type="l2", num_partitions=4, num_sub_vectors=8))
    run_id = made.context["job_id"]
    states = stack.wait_for_run(DAG_ID, run_id, timeout=400)
    assert (states["route"], states["index_plan"], states["index_build"], states["backfill_plan"],
            states["refresh_plan"]) == ("success", "success", "success", "skipped", "skipped"), states
    job = done(ns, run_id)
    assert (job.kind, job.airflow_run_id, job.column, job.segments_done) == ("index", run_id, "vec",
                                                                             job.segments_planned)
    ds = tbl.dataset()
    ds.validate()
    details = ds.stats.index_stats("vec_idx")
    assert details["indices"][0]["num_partitions"] == 4
    assert details["indices"][0]["sub_index"]["num_sub_vectors"] == 8
    assert tbl.index_stats("vec_idx").num_unindexed_rows == 0


def test_jobs_on_a_child_namespace_s_tables_run_as_dag_runs_on_them(
        deployment: AirflowStack, ns: ln.LanceNamespace) -> None:
    with_logs(namespace_child)(deployment, ns)


def namespace_child(stack: AirflowStack, ns: ln.LanceNamespace) -> None:
    import lance

    from tests.namespace_data import ROWS, create_child_docs, times_ten_column

    table_id = create_child_docs(ns, "team_a")
    times_ten_column(ns, table_id)
    run_id = ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=table_id, column="y")).job_id
    states = stack.wait_for_run(DAG_ID, run_id, timeout=400)
    assert {f"backfill_{s}": states.get(f"backfill_{s}") for s in STAGES} == {
        f"backfill_{s}": "success" for s in STAGES}, states
    job = done(ns, run_id)
    assert (job.airflow_run_id, job.table, job.column, job.rows_committed) == (run_id, "docs", "y", ROWS)
    source = SourceQuery(id=table_id, where="x < 8", columns={"x": "x", "y": "y"})
    made = ns.create_materialized_view(ln.CreateMaterializedViewRequest(
        id=["team_a", "v"], kind="query", source_query=source.model_dump_json(), output_schema="", with_no_data=False))
    assert made.job_id is not None
    states = stack.wait_for_run(DAG_ID, made.job_id, timeout=400)
    assert {f"refresh_{s}": states.get(f"refresh_{s}") for s in STAGES} == {
        f"refresh_{s}": "success" for s in STAGES}, states
    assert (done(ns, made.job_id).table, ns.list_tables(ln.ListTablesRequest(id=["team_a"])).tables) == (
        "v", ["docs", "v"])
    for name, rows in (("docs", range(ROWS)), ("v", range(8))):
        ds = lance.dataset(ns.describe_table(ln.DescribeTableRequest(id=["team_a", name])).location)
        ds.validate()
        assert sorted((r["x"], r["y"]) for r in ds.to_table(columns=["x", "y"]).to_pylist()) == [
            (x, x * 10) for x in rows]
