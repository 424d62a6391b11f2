"""Operators, sensors, triggers and the hook, driven directly (no Airflow DB needed)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta
from importlib import resources

import jsonschema
import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

import geneva_provider as gp
from geneva_provider.get_provider_info import get_provider_info
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.backfill import (
    GenevaAddColumnsOperator,
)
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.sensors.table import GenevaTableChangedSensor
from geneva_provider.triggers.table import GenevaTableChangedTrigger
from tests.conftest import FAKE_SECRET
from tests.helpers import context, double, events_table, first_event


@pytest.fixture
def events(lance_db):
    return lance_db.create_table("events", events_table(6_000), max_rows_per_file=2_000)


def test_provider_info_matches_airflow_schema():
    schema = json.loads((resources.files("airflow") / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["connection-types"][0]["hook-class-name"] == "geneva_provider.hooks.lance.LanceHook"
    for section in ("hooks", "operators", "sensors", "triggers"):
        for module in info[section][0]["python-modules"]:
            __import__(module)


def test_hook_opens_the_database_and_masks_its_secrets(events):
    from airflow.sdk.log import _secrets_masker

    hook = LanceHook()
    assert hook.open_table("events").count_rows() == 6_000
    assert hook.storage_options == {"aws_secret_access_key": FAKE_SECRET}
    assert FAKE_SECRET not in repr(hook.get_conn())
    assert FAKE_SECRET not in str(_secrets_masker().redact(f"key={FAKE_SECRET}"))
    ok, message = hook.test_connection()
    assert ok and message.startswith("1 tables in ")


def test_connection_test_fails_for_a_missing_database(monkeypatch, tmp_path):
    missing = tmp_path / "no-such-lake"
    monkeypatch.setenv("AIRFLOW_CONN_MISSING_LANCE", json.dumps({"conn_type": "lance", "host": str(missing)}))
    assert LanceHook("missing_lance").test_connection() == (False, f"database directory {missing} does not exist")
    assert not missing.exists()  # testing the connection created nothing


def test_hook_without_uri_says_what_to_set(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_EMPTY_LANCE", json.dumps({"conn_type": "lance"}))
    with pytest.raises(ValueError, match="connection 'empty_lance' has no database URI"):
        LanceHook("empty_lance").get_conn()


def _count_opens(monkeypatch) -> list[str]:
    """The URIs of every Lance dataset opened from now on (a call of ``lance.dataset``)."""
    import lance

    opened, real = [], lance.dataset

    def counting(uri, *args, **kwargs):
        opened.append(uri)
        return real(uri, *args, **kwargs)

    monkeypatch.setattr(lance, "dataset", counting)
    return opened


def test_add_columns_operator_is_idempotent_and_refuses_redefinitions(events, monkeypatch):
    columns = {"w": "tests.helpers:flaky_double", "e": ("geneva_provider.examples:embed", ["id"])}
    op = GenevaAddColumnsOperator(task_id="add", table="events", columns=columns)
    first = op.execute(context())
    assert first["added"] == ["e", "w"] and first["existing"] == []
    version = events.version
    opened = _count_opens(monkeypatch)
    again = op.execute(context())
    # A DAG run's add_columns task when its columns are declared: the table opened once to list them and once
    # for Table.add_columns, which judges and changes the version it opened (it opened it three times)
    assert len(opened) == 2 and again["version"] == version
    assert again["added"] == [] and again["existing"] == ["e", "w"] and events.version == version
    assert events.udf_columns()["e"]["input_columns"] == ["id"]
    other = GenevaAddColumnsOperator(task_id="x", table="events", columns={"w": "geneva_provider.examples:embed"})
    # Deterministic errors fail the task for good (AirflowFailException: no retry), as the package's errors.
    with pytest.raises(gp.ColumnError, match=r"column 'w' already exists in table 'events'.* not \w+ \(UDF "
                                             r"'flaky_double'\)") as failed:
        other.execute(context())
    assert isinstance(failed.value, AirflowFailException)
    with pytest.raises(TypeError, match="not a @udf function") as failed:
        GenevaAddColumnsOperator(task_id="y", table="events", columns={"z": "geneva_provider.examples:sample"}
                                 ).execute(context())
    assert isinstance(failed.value, AirflowFailException)
    with pytest.raises(ImportError, match=r"cannot import UDF 'nope\.nope:f'") as failed:
        GenevaAddColumnsOperator(task_id="z", table="events", columns={"z": "nope.nope:f"}).execute(context())
    assert isinstance(failed.value, AirflowFailException)


def test_spark_operators_skip_without_starting_spark_when_nothing_to_do():
    plan = {"job_id": "j", "plan_uri": "/x/plan-j.lance", "table": "t", "column": "c", "tasks": 0,
            "rows_to_compute": 0, "rows_reused": 10, "read_version": 3, "fragments_to_compute": 0,
            "fragments_reused": 0, "fragments_done": 2, "nothing_to_do": True}
    for cls in (GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator):
        with pytest.raises(AirflowSkipException, match="nothing"):
            cls(task_id="s", plan=plan).execute(context())
    # Reused fragments still need the commit stage, but no apply.
    reuse_only = {**plan, "nothing_to_do": False}
    with pytest.raises(AirflowSkipException):
        GenevaSparkApplyOperator(task_id="s", plan=json.dumps(reuse_only)).execute(context())


@pytest.mark.parametrize("conn_id", ["spark_default", "spark_elsewhere"])
def test_a_spark_stage_without_its_spark_connection_fails_once_saying_how_to_define_it(events, monkeypatch, conn_id):
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator

    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT")
    events.add_columns({"y": double})
    plan = GenevaPlanBackfillOperator(task_id="plan", table="events", column="y").execute(context())
    version = events.version
    for cls in (GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator):
        # Not Airflow's AirflowNotFoundException, which is retried: the package's error, failing the task once.
        with pytest.raises(gp.InvalidArgumentError) as failed:
            cls(task_id="s", plan=plan, spark_conn_id=conn_id, retries=2).execute(context())
        assert isinstance(failed.value, AirflowFailException)
        message = str(failed.value)
        for needle in (f"spark_conn_id '{conn_id}': no such Airflow connection", "type 'spark_connect'",
                       "type 'spark'", f"airflow connections add {conn_id}", f"AIRFLOW_CONN_{conn_id.upper()}"):
            assert needle in message, (needle, message)
    assert events.version == version and events.to_arrow(["y"]).column("y").null_count == 6_000  # nothing ran
    # A missing Lance connection fails the same way.
    with pytest.raises(gp.InvalidArgumentError, match=r"lance_conn_id 'no_lake': no such Airflow connection.*"
                       "type 'lance'.*AIRFLOW_CONN_NO_LAKE") as failed:
        GenevaSparkApplyOperator(task_id="s", plan=plan, lance_conn_id="no_lake").execute(context())
    assert isinstance(failed.value, AirflowFailException)


def test_table_changed_sensor_poke_defer_and_complete(events):
    v = events.version
    sensor = GenevaTableChangedSensor(task_id="s", table="events", min_version=v, poke_interval=5, timeout=60)
    assert sensor.deferrable
    assert not sensor.poke(context()).is_done
    with pytest.raises(TaskDeferred) as exc:
        sensor.execute(context())
    assert exc.value.method_name == "execute_complete"
    path, kwargs = exc.value.trigger.serialize()
    deadline = kwargs.pop("deadline")  # absolute: a triggerer restart resumes the wait, not restarts it
    assert path == "geneva_provider.triggers.table.GenevaTableChangedTrigger"
    assert kwargs == {"table": "events", "lance_conn_id": "lance_default", "min_version": v, "min_rows": None,
                      "column": None, "poll_interval": 5.0}
    assert 0 < deadline - time.time() <= 60
    assert not GenevaTableChangedSensor(task_id="p", table="events", min_version=v, deferrable=False).deferrable
    events.add(events_table(10, start=6_000))
    assert sensor.execute(context())["rows"] == 6_010  # condition holds: no deferral at all
    poke_mode = GenevaTableChangedSensor(task_id="p", table="events", min_rows=6_010, deferrable=False,
                                         poke_interval=0.01, timeout=0.05)
    with pytest.raises(AirflowSensorTimeout):
        poke_mode.execute(context())
    assert sensor.execute_complete(context(), {"status": "success", "version": 3})["version"] == 3
    with pytest.raises(AirflowException, match="boom"):
        sensor.execute_complete(context(), {"status": "error", "message": "boom"})
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete(context(), {"status": "timeout", "message": "late"})
    soft = GenevaTableChangedSensor(task_id="soft", table="events", column="x", soft_fail=True)
    with pytest.raises(AirflowSkipException):
        soft.execute_complete(context(), {"status": "timeout", "message": "late"})
    with pytest.raises(gp.InvalidArgumentError, match="set min_version, min_rows or column"):
        GenevaTableChangedSensor(task_id="bad", table="events")


def test_table_changed_trigger_fires_on_new_rows_and_times_out(events):
    v = events.version
    trigger = GenevaTableChangedTrigger(table="events", min_version=v, poll_interval=0.05, deadline=time.time() + 0.3)
    assert asyncio.run(first_event(trigger)).payload["status"] == "timeout"

    async def append_then_wait():
        waiter = asyncio.ensure_future(first_event(
            GenevaTableChangedTrigger(table="events", min_version=v, poll_interval=0.05, deadline=time.time() + 30)))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(events.add, events_table(5, start=6_000))
        return await waiter

    event = asyncio.run(append_then_wait())
    assert event.payload == {"status": "success", "table": "events", "version": v + 1, "rows": 6_005,
                             "fragments": 4}
    missing = asyncio.run(first_event(GenevaTableChangedTrigger(  # a missing table is waited for
        table="nope", min_rows=0, poll_interval=0.05, deadline=time.time() + 0.2)))
    assert missing.payload["status"] == "timeout" and "table 'nope' does not exist" in missing.payload["message"]


def test_create_view_operator_is_idempotent_and_refuses_a_different_definition(events):
    from geneva_provider.operators.views import GenevaCreateMaterializedViewOperator, GenevaPlanRefreshOperator

    kwargs = {"task_id": "create", "view": "evens", "source_table": "events", "where": "x % 2 = 0",
              "columns": {"x": "x", "e": "geneva_provider.examples:embed"}, "shuffle": True, "seed": 3}
    first = GenevaCreateMaterializedViewOperator(**kwargs).execute(context())
    assert first["created"] and first["rows"] == 3_000
    again = GenevaCreateMaterializedViewOperator(**kwargs).execute(context())
    assert not again["created"] and again["version"] == first["version"]
    with pytest.raises(gp.InvalidArgumentError, match="view 'evens' exists with a different definition"):
        GenevaCreateMaterializedViewOperator(**{**kwargs, "seed": 4}).execute(context())
    summary = GenevaPlanRefreshOperator(task_id="plan", view="evens").execute(context())
    assert summary["rows_to_compute"] == 3_000 and summary["table"] == "evens"


@pytest.mark.parametrize("connection", [
    {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}},
    {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client"}},
    {"conn_type": "spark", "host": "k8s://https://k8s-api:6443", "extra": {"deploy-mode": "cluster"}},
], ids=["yarn-cluster", "yarn-client", "k8s"])
def test_storage_options_never_reach_a_yarn_or_kubernetes_command_line(monkeypatch, connection):
    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.spark_apps import app_path

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(connection))
    plan = PlanSummary(job_id="j", plan_uri="/x/plan-j.lance", table="t", column="c", tasks=1, rows_to_compute=5,
                       rows_reused=0, read_version=3, fragments_to_compute=1, fragments_reused=0, fragments_done=0,
                       nothing_to_do=False)
    secrets = LanceHook().storage_options
    assert FAKE_SECRET in secrets.values()
    refused = GenevaSparkApplyOperator(task_id="a", plan=plan, spark_conn_id="spark_cluster")
    with pytest.raises(gp.InvalidArgumentError, match="cluster_credentials=True") as failed:
        refused.make_hook(plan, secrets, "r")
    assert FAKE_SECRET not in str(failed.value)
    if "k8s" in connection["host"]:
        return  # building a Kubernetes submit needs the kubernetes client, not installed here
    allowed = GenevaSparkApplyOperator(task_id="a", plan=plan, spark_conn_id="spark_cluster",
                                       cluster_credentials=True)
    command = " ".join(allowed.make_hook(plan, secrets, "r")._build_spark_submit_command(app_path("apply")))
    assert "--plan-uri /x/plan-j.lance" in command and FAKE_SECRET not in command
    assert "GENEVA_STORAGE_OPTIONS" not in command
    # A local master passes them in the process environment only.
    local = GenevaSparkApplyOperator(task_id="a", plan=plan).make_hook(plan, secrets, "r")
    assert FAKE_SECRET not in " ".join(local._build_spark_submit_command(app_path("apply")))
    assert FAKE_SECRET in local._env["GENEVA_STORAGE_OPTIONS"]


def test_task_groups_pass_any_base_operator_argument_to_every_task():
    from airflow.sdk import DAG

    from geneva_provider.task_groups import backfill_task_group

    with DAG(dag_id="pass_through", schedule=None, start_date=datetime(2026, 1, 1)):
        group = backfill_task_group("g", "events", "w", pool="small_cluster", queue="spark", priority_weight=7,
                                    execution_timeout=timedelta(minutes=30), retries=4, checkpoint_size=500,
                                    conf={"spark.executor.memory": "2g"})
    tasks = {t.task_id.split(".")[-1]: t for t in group.children.values()}
    assert set(tasks) == {"plan", "apply", "write_commit", "verify", "plan_indexes", "index"}
    for task in tasks.values():
        assert (task.pool, task.queue, task.priority_weight, task.retries) == ("small_cluster", "spark", 7, 4)
        assert task.execution_timeout == timedelta(minutes=30)
    assert tasks["plan"].checkpoint_size == 500
    assert tasks["apply"].conf == tasks["write_commit"].conf == {"spark.executor.memory": "2g"}
    assert tasks["index"].partial_kwargs["conf"] == {"spark.executor.memory": "2g"}  # mapped: one task per plan


def test_the_index_stage_follows_verify_and_is_mapped_over_the_plans_emitting_through_the_tables_alias():
    from airflow.sdk import DAG, AssetAlias

    from geneva_provider.core.errors import InvalidArgumentError
    from geneva_provider.task_groups import backfill_task_group, refresh_task_group

    with DAG(dag_id="index_stage", schedule=None, start_date=datetime(2026, 1, 1)):
        group = backfill_task_group("g", "events", "w", lance_conn_id="lake")
        view = refresh_task_group("v", "chunks")
        bare = backfill_task_group("bare", "events", "w", refresh_indexes=False)
    tasks = {t.task_id: t for t in group.children.values()}
    plan = tasks["g.plan_indexes"]
    # After verify, and also when verify was skipped for lack of work; not after a skipped plan or a failure.
    assert plan.upstream_task_ids == {"g.plan", "g.verify"} and plan.trigger_rule == "none_failed_min_one_success"
    assert (plan.table, plan.column, plan.lance_conn_id) == ("events", "w", "lake")
    index = tasks["g.index"]
    assert index.upstream_task_ids == {"g.plan_indexes"} and index.expand_input.value["plan"].operator is plan
    assert index.outlets == [AssetAlias(name="lance.lake.events.indexes")]  # not the table's or column's Asset
    view_plan = view.children["v.plan_indexes"]
    assert (view_plan.table, view_plan.column) == ("chunks", None)  # every index of the view
    assert {t.split(".")[-1] for t in bare.children} == {"plan", "apply", "write_commit", "verify"}
    with DAG(dag_id="bad_flag", schedule=None, start_date=datetime(2026, 1, 1)):
        with pytest.raises(InvalidArgumentError, match=r"backfill_task_group 'g2': refresh_indexes must be True or "
                                                       r"False, got 'yes'"):
            backfill_task_group("g2", "events", "w", refresh_indexes="yes")


def test_the_compaction_group_releases_small_segments_and_ends_with_the_index_stage_over_every_index():
    from airflow.sdk import DAG

    from geneva_provider.core.errors import InvalidArgumentError
    from geneva_provider.task_groups import compaction_task_group

    with DAG(dag_id="compaction_group", schedule=None, start_date=datetime(2026, 1, 1)):
        group = compaction_task_group("c", "events", target_rows_per_fragment=5_000, exclude_live_jobs=False,
                                      conf={"spark.executor.memory": "2g"}, pool="maint", lance_conn_id="lake")
        bare = compaction_task_group("bare", "events", refresh_indexes=False)
    tasks = {t.task_id: t for t in group.children.values()}
    assert set(tasks) == {"c.plan", "c.compact", "c.plan_indexes", "c.index"}
    plan = tasks["c.plan"]
    assert (plan.table, plan.target_rows_per_fragment, plan.exclude_live_jobs, plan.release_index_segments,
            plan.lance_conn_id) == ("events", 5_000, False, True, "lake")
    assert tasks["c.compact"].conf == {"spark.executor.memory": "2g"} and tasks["c.compact"].upstream_task_ids == {
        "c.plan"}
    plan_indexes = tasks["c.plan_indexes"]
    # after the compaction, and also when it was skipped for lack of work; over every index of the table
    assert plan_indexes.upstream_task_ids == {"c.plan", "c.compact"}
    assert plan_indexes.trigger_rule == "none_failed_min_one_success"
    assert (plan_indexes.table, plan_indexes.column, plan_indexes.all_indexes) == ("events", None, True)
    assert {t.pool for t in tasks.values()} == {"maint"}
    bare_tasks = {t.task_id: t for t in bare.children.values()}
    assert set(bare_tasks) == {"bare.plan", "bare.compact"} and not bare_tasks["bare.plan"].release_index_segments
    with DAG(dag_id="bad_compaction_group", schedule=None, start_date=datetime(2026, 1, 1)):
        with pytest.raises(InvalidArgumentError, match=r"compaction_task_group 'c2': refresh_indexes must be True "
                                                       r"or False, got 'yes'"):
            compaction_task_group("c2", "events", refresh_indexes="yes")
        with pytest.raises(InvalidArgumentError, match=r"compaction_task_group 'c3'.*bogus"):
            compaction_task_group("c3", "events", bogus=1)
        with pytest.raises(InvalidArgumentError, match=r"target_rows_per_fragment"):
            compaction_task_group("c4", "events", target_rows_per_fragment=0)


def test_index_assets_name_the_connection_table_and_index_and_refuse_a_bad_name():
    from geneva_provider.assets import index_alias, index_asset, table_asset
    from geneva_provider.core.errors import InvalidArgumentError

    asset = index_asset("chunks", "embedding_idx", "lake")
    assert (asset.name, asset.uri) == ("lance.lake.chunks.index.embedding_idx", "lance://lake/chunks/index/embedding_idx")
    assert asset.uri not in {table_asset("chunks", c, "lake").uri for c in ("index", "embedding_idx")}
    assert index_alias("chunks", "lake").name == "lance.lake.chunks.indexes"
    for bad in ("", "a/b", None):
        with pytest.raises(InvalidArgumentError, match=r"index_asset of table 'chunks': index must be an index name"):
            index_asset("chunks", bad)


def test_create_index_exist_ok_must_be_a_flag():
    from geneva_provider.core.errors import InvalidArgumentError
    from geneva_provider.operators.indexes import GenevaCreateIndexOperator

    with pytest.raises(InvalidArgumentError, match=r"GenevaCreateIndexOperator 'c' of table 'chunks': exist_ok must "
                                                   r"be True or False, got 'no'"):
        GenevaCreateIndexOperator(task_id="c", table="chunks", exist_ok="no")


def test_the_index_stages_plan_task_plans_a_refresh_of_the_columns_indexes_only_when_they_miss_fragments(lance_db):
    from geneva_provider.core.errors import InvalidArgumentError
    from geneva_provider.operators.indexes import GenevaCreateIndexOperator, GenevaPlanIndexRefreshesOperator
    from geneva_provider.pipeline.indexes import run_index
    from geneva_provider.pipeline.indexes.stats import unindexed_fragments
    from geneva_provider.pipeline.spark.in_process import InProcessRunner
    from tests.index_data import clustered

    tbl = lance_db.create_table("emb", clustered(400), max_rows_per_file=200)
    tbl.create_index("vec", index_type="IVF_FLAT", num_partitions=4, spark=InProcessRunner())
    tbl.create_scalar_index("id", spark=InProcessRunner())
    tbl.add(clustered(100, start=400, seed=1))  # a fragment neither index covers
    new = unindexed_fragments(tbl.dataset(), "vec_idx")
    assert len(new) == 1

    def plans(column):
        return GenevaPlanIndexRefreshesOperator(task_id="plan_indexes", table="emb", column=column).execute(context())

    (plan,) = plans("vec")  # the vector column's index only, add-only with its saved training
    assert (plan["kind"], plan["index_name"], plan["table"]) == ("index", "vec_idx", "emb")
    assert unindexed_fragments(tbl.dataset(), "id_idx") == new  # 'id''s index is not this job's
    done = run_index(plan["plan_uri"], InProcessRunner())
    assert (done.refresh, done.trained, done.fragments_indexed, done.rows_indexed) == (True, False, new, 100)
    assert tbl.index_stats("vec_idx").num_unindexed_rows == 0
    assert plans("vec") == []  # nothing left to index: no plan, the mapped Spark task is skipped
    assert [p["index_name"] for p in plans(None)] == ["id_idx"]  # a view's refresh: every index it writes

    # exist_ok: the index of that name on that column is kept, the task skipped, nothing planned or written.
    version = tbl.version
    create = dict(task_id="create_index", table="emb", column="vec", index_type="IVF_FLAT", num_partitions=4)
    with pytest.raises(AirflowSkipException, match=r"index 'vec_idx' of table 'emb' exists on column 'vec' "
                                                   r"\(exist_ok=True\): kept as it is, nothing planned"):
        GenevaCreateIndexOperator(**create, exist_ok=True).execute(context())
    with pytest.raises(InvalidArgumentError, match=r"an index named 'vec_idx' exists on column\(s\) \['vec'\], not "
                                                   r"'id'; give this one another name="):
        GenevaCreateIndexOperator(task_id="c", table="emb", column="id", index_type="BTREE", name="vec_idx",
                                  exist_ok=True).execute(context())
    with pytest.raises(InvalidArgumentError, match=r"an index named 'vec_idx' exists on column 'vec'; pass "
                                                   r"replace=True"):
        GenevaCreateIndexOperator(**create, replace=False).execute(context())
    assert tbl.version == version
    tbl.dataset().validate()


def test_an_index_refresh_group_plans_then_builds_emitting_its_index_asset_and_refuses_an_unknown_argument():
    from airflow.sdk import DAG

    from geneva_provider.core.errors import InvalidArgumentError
    from geneva_provider.task_groups import index_refresh_task_group, table_change_dag

    with DAG(dag_id="index_group", schedule=None, start_date=datetime(2026, 1, 1)):
        group = index_refresh_task_group("ix", "docs", "embedding_idx", retrain=True, target_groups=4, pool="p",
                                         conf={"spark.executor.memory": "2g"})
    plan, index = group.children["ix.plan"], group.children["ix.index"]
    assert (plan.table, plan.index_name, plan.retrain, plan.target_groups, plan.pool) == (
        "docs", "embedding_idx", True, 4, "p")
    assert index.upstream_task_ids == {"ix.plan"} and index.conf == {"spark.executor.memory": "2g"}
    assert [o.uri for o in index.outlets] == ["lance://lance_default/docs/index/embedding_idx"]
    with DAG(dag_id="index_group_bad", schedule=None, start_date=datetime(2026, 1, 1)):
        with pytest.raises(InvalidArgumentError, match=r"index_refresh_task_group 'ix' \(task 'ix.plan'\): unknown "
                                                       r"argument\(s\) \['retrian'\]"):
            index_refresh_task_group("ix", "docs", "embedding_idx", retrian=True)
    # Steps named (no database read at parse): no index steps, so each group runs its own index stage.
    dag = table_change_dag("events", columns=["words"], views=[("events_short", "events")], retries=2)
    assert {"backfill_words.plan_indexes", "backfill_words.index", "refresh_events_short.plan_indexes"} <= set(
        dag.task_ids)
