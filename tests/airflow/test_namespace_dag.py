"""The example DAG ``geneva_namespace_jobs`` (what a GenevaNamespace with ``job_runner=airflow`` triggers), run with
``dag.test()`` and the conf the namespace sends -- the spec's request converted as the namespace converts it:

* a backfill request with its tuning options (checkpoint and task sizes, commit granularity) runs the backfill
  stages (and not the others), the plan holds those options exactly, the values are exact, and the namespace's
  ``describe_job`` finds the job by the DAG run's id;
* a chunker view's refresh runs the refresh stages (without the index stage: ``refresh_indexes`` false), its rows
  exact;
* a ``create_index`` with ``num_partitions`` / ``num_sub_vectors`` runs the index plan + Spark build, and Lance's
  index has those parameters;
* a backfill of a table in a child namespace (id ``["team_a", "docs"]``) runs the same stages on that table --
  its index stage too -- and only on it, not on the root's table of the same name; the tasks' job link names the
  namespace;
* a request the DAG cannot carry (another op, database or database connection, a child namespace that does not
  exist) fails ``route``, naming it, before anything runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import lance
import lance_namespace as ln
import pyarrow as pa
from lance_namespace_urllib3_client.models import MaterializedViewUdtfEntry

import geneva_provider as gp
from geneva_provider.core.contracts.operations import GetJob, RemoteJob, SourceQuery
from geneva_provider.namespace import convert
from geneva_provider.operators.links import JOB_LINK_KEY
from geneva_provider.pipeline.stages.planning import load_plan
from geneva_provider.plugin import job_record
from tests.airflow.test_example_dags import run
from tests.conftest import FAKE_SECRET
from tests.helpers import events_table, plain_double
from tests.index_data import clustered
from tests.namespace_data import create_child_docs, docs, times_ten_column

DAG_ID = "geneva_namespace_jobs"
JOBS = ("backfill", "refresh")


class Piece(NamedTuple):
    chunk: str
    start: int


def stage_states(states: dict[str, str | None], job: str) -> dict[str, str | None]:
    return {k: v for k, v in states.items() if k.startswith(f"{job}_")}


def describe(root: str, run_id: str) -> gp.JobRecord:
    return ln.connect("geneva", {"root": root}).describe_job(GetJob(job_id=run_id)).job


def test_a_backfill_request_with_its_tuning_options_runs_the_backfill_stages_with_them(dagbag, lance_db, capfd):
    tbl = lance_db.create_table("events", events_table(1_000), max_rows_per_file=250)
    tbl.add_columns({"s": plain_double})
    request = convert.backfill(ln.AlterTableBackfillColumnsRequest(
        id=["events"], column="s", where="x >= 100", checkpoint_size=40, min_checkpoint_size=20,
        max_checkpoint_size=80, task_size=50, commit_granularity=2))
    dr, states, tis, _ = run(dagbag.get_dag(DAG_ID),
                             run_conf={"request": request.model_dump(mode="json"), "db": lance_db.uri,
                                       "db_conn_id": None})
    assert dr.state == "success", states
    assert stage_states(states, "backfill") == {
        "backfill_plan": "success", "backfill_apply": "success", "backfill_write_commit": "success",
        "backfill_verify": "success", "backfill_indexes_wanted": "success", "backfill_plan_indexes": "success",
        "backfill_index": "skipped"}
    assert set(stage_states(states, "refresh").values()) | {states["index_plan"], states["index_build"]} == {
        "skipped"}, states
    summary = tis["backfill_plan"].xcom_pull(task_ids="backfill_plan")
    plan, _ = load_plan(summary["plan_uri"])
    settings = plan.settings
    assert (settings.checkpoint_size, settings.min_checkpoint_size, settings.max_checkpoint_size,
            settings.task_size, settings.commit_granularity) == (40, 20, 80, 50, 2)
    assert plan.where == "x >= 100"
    # 150 rows of the first fragment and 250 of each other: tasks of 50 rows
    assert (summary["rows_to_compute"], summary["tasks"]) == (900, 3 + 3 * 5)
    got = tbl.to_arrow(["x", "s"]).to_pylist()
    assert {r["x"]: r["s"] for r in got} == {x: (2 * x if x >= 100 else None) for x in range(1_000)}
    tbl.dataset().validate()

    job = describe(lance_db.uri, dr.run_id)
    assert (job.status, job.airflow_run_id, job.table, job.column, job.rows_committed) == (
        "DONE", dr.run_id, "events", "s", 900)
    assert FAKE_SECRET not in capfd.readouterr().out


def test_a_chunker_views_refresh_request_runs_the_refresh_stages(dagbag, lance_db):
    lance_db.create_table("docs", pa.table({"x": pa.array(range(6), pa.int64()),
                                            "s": [f"doc{x}" * (x + 1) for x in range(6)]}))

    @gp.chunker
    def letters(s: str) -> Iterator[Piece]:
        for i, c in enumerate(s):
            yield Piece(c, i)

    ns = ln.connect("geneva", {"root": lance_db.uri})  # created in the namespace, refreshed by the DAG run
    ns.create_materialized_view(ln.CreateMaterializedViewRequest(
        id=["chunks"], kind="chunker", output_schema="", with_no_data=True,
        source_query=SourceQuery(id=["docs"], where="x < 4", columns={"x": "x", "s": "s"}).model_dump_json(),
        udtf_spec=MaterializedViewUdtfEntry(kind="chunker", udtf=letters.pickled_b64(), udtf_sha="",
                                            udtf_name="letters", udtf_version="1")))
    request = convert.refresh(ln.RefreshMaterializedViewRequest(id=["chunks"], max_rows_per_fragment=10))
    request = request.model_copy(update={"refresh_indexes": False})  # the index stage skipped
    dr, states, _, _ = run(dagbag.get_dag(DAG_ID), run_conf={"request": request.model_dump(mode="json")})
    assert dr.state == "success", states
    assert stage_states(states, "refresh") == {
        "refresh_plan": "success", "refresh_apply": "success", "refresh_write_commit": "success",
        "refresh_verify": "success", "refresh_indexes_wanted": "success", "refresh_plan_indexes": "skipped",
        "refresh_index": "skipped"}
    assert set(stage_states(states, "backfill").values()) == {"skipped"}, states
    view = lance_db.open_table("chunks")
    rows = view.to_arrow(["x", "chunk", "start"]).to_pylist()
    assert sorted((r["x"], r["chunk"], r["start"]) for r in rows) == sorted(
        (x, c, i) for x in range(4) for i, c in enumerate(f"doc{x}" * (x + 1)))
    view.dataset().validate()
    assert max(f.count_rows() for f in view.dataset().get_fragments()) <= 10  # max_rows_per_fragment carried
    job = describe(lance_db.uri, dr.run_id)
    assert (job.status, job.airflow_run_id, job.table, job.rows_committed) == ("DONE", dr.run_id, "chunks", 4)


def test_a_create_index_request_runs_the_index_plan_and_build_with_its_parameters(dagbag, lance_db):
    tbl = lance_db.create_table("vecs", clustered(2_000), max_rows_per_file=500)
    request = convert.create_index(ln.CreateTableIndexRequest(
        id=["vecs"], column="vec", index_type="IVF_PQ", distance_type="l2", num_partitions=4, num_sub_vectors=8))
    dr, states, tis, _ = run(dagbag.get_dag(DAG_ID), run_conf={"request": request.model_dump(mode="json")})
    assert dr.state == "success", states
    assert (states["route"], states["index_plan"], states["index_build"]) == ("success", "success", "success")
    assert {v for k, v in states.items() if k.startswith(JOBS)} == {"skipped"}, states
    built = tis["index_build"].xcom_pull(task_ids="index_build")
    assert (built["index_name"], built["rows_indexed"]) == ("vec_idx", 2_000)
    ds = tbl.dataset()
    ds.validate()
    details = ds.stats.index_stats("vec_idx")
    assert details["indices"][0]["num_partitions"] == 4
    assert details["indices"][0]["sub_index"]["num_sub_vectors"] == 8
    job = describe(lance_db.uri, dr.run_id)
    assert (job.status, job.kind, job.airflow_run_id, job.column) == ("DONE", "index", dr.run_id, "vec")


def test_a_backfill_of_a_table_in_a_child_namespace_runs_on_that_table_only(dagbag, lance_db, capfd):
    """The conf the namespace sends for ["team_a", "docs"] (RemoteJob: the request's id names the namespace): every
    stage -- plan, Spark apply and write+commit, verify, the index stage -- finds the child namespace's table, whose
    values are exact; the root's table ``docs`` is left as it was."""
    ns = ln.connect("geneva", {"root": lance_db.uri})
    table_id = create_child_docs(ns, "team_a")
    times_ten_column(ns, table_id)
    root_docs = lance_db.create_table("docs", docs())  # the same name at the root: never touched
    request = convert.backfill(ln.AlterTableBackfillColumnsRequest(id=table_id, column="y", where="x >= 5",
                                                                   task_size=5))
    conf = RemoteJob(request=request, db=lance_db.uri, db_conn_id="lance_default")
    dr, states, tis, _ = run(dagbag.get_dag(DAG_ID), run_conf=conf.model_dump(mode="json"))
    assert dr.state == "success", states
    assert stage_states(states, "backfill") == {
        "backfill_plan": "success", "backfill_apply": "success", "backfill_write_commit": "success",
        "backfill_verify": "success", "backfill_indexes_wanted": "success", "backfill_plan_indexes": "success",
        "backfill_index": "skipped"}
    summary = tis["backfill_plan"].xcom_pull(task_ids="backfill_plan")
    assert (summary["table"], summary["namespace"], summary["rows_to_compute"], summary["tasks"]) == (
        "docs", ["team_a"], 15, 3)
    child = lance.dataset(ns.describe_table(ln.DescribeTableRequest(id=table_id)).location)
    child.validate()
    assert {r["x"]: r["y"] for r in child.to_table(columns=["x", "y"]).to_pylist()} == {
        x: (x * 10 if x >= 5 else None) for x in range(20)}
    assert (root_docs.version, root_docs.dataset().schema.names) == (1, ["x", "s"])
    assert ns.list_tables(ln.ListTablesRequest(id=["team_a"])).tables == ["docs"]
    job = describe(lance_db.uri, dr.run_id)
    assert (job.status, job.airflow_run_id, job.table, job.column, job.rows_committed) == (
        "DONE", dr.run_id, "docs", "y", 15)
    # the tasks' "Geneva job" link names the namespace, and the plugin's page finds the record there
    link = tis["backfill_verify"].xcom_pull(task_ids="backfill_verify", key=JOB_LINK_KEY)
    assert link.endswith(f"/geneva/jobs/{job.job_id}?table=docs&conn=lance_default&namespace=team_a"), link
    assert job_record(job.job_id, "docs", "lance_default", "team_a")["rows_committed"] == 15
    assert FAKE_SECRET not in "".join(capfd.readouterr())

    missing = request.model_copy(update={"id": ["team_x", "docs"]})
    dr, states, _, _ = run(dagbag.get_dag(DAG_ID), run_conf=RemoteJob(request=missing).model_dump(mode="json"))
    assert dr.state == "failed" and states["route"] == "failed" and states["backfill_plan"] != "success", states
    assert "namespace team_x does not exist" in "".join(capfd.readouterr())


def test_a_request_the_dag_cannot_carry_fails_route_naming_it_and_changes_nothing(dagbag, lance_db, capfd):
    tbl = lance_db.create_table("events", events_table(1_000), max_rows_per_file=250)
    tbl.add_columns({"s": plain_double})
    version = tbl.version
    dag = dagbag.get_dag(DAG_ID)
    backfill = convert.backfill(ln.AlterTableBackfillColumnsRequest(id=["events"], column="s", task_size=10))
    dr, states, _, _ = run(dag, run_conf={"request": backfill.model_dump(mode="json"), "db_conn_id": "other_lake"})
    assert dr.state == "failed" and states["route"] == "failed", states
    assert "db_conn_id 'other_lake' is not carried" in "".join(capfd.readouterr())
    dr, states, _, _ = run(dag, run_conf={"request": backfill.model_dump(mode="json"), "db": "/elsewhere/lake"})
    assert dr.state == "failed" and states["route"] == "failed", states
    assert "db '/elsewhere/lake' is not carried" in "".join(capfd.readouterr())
    drop = convert.drop_columns(ln.AlterTableDropColumnsRequest(id=["events"], columns=["s"]))
    dr, states, _, _ = run(dag, run_conf={"request": drop.model_dump(mode="json")})
    assert dr.state == "failed" and states["route"] == "failed", states
    assert "the request's op must be one of" in "".join(capfd.readouterr())
    assert states["backfill_plan"] != "success" and tbl.version == version
