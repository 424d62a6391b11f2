"""Bad arguments to the stages, operators, sensors, assets and task groups: the package's own error, naming the
argument and its value, raised before anything runs (DAG-parse time where the value is known then), changing nothing.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime
from types import SimpleNamespace

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider import stages
from geneva_provider.core.contracts.options import BackfillOptions, RefreshOptions
from tests.helpers import events_table

IAE = gp.InvalidArgumentError


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return x * 2


def context():
    return {"outlet_events": defaultdict(lambda: SimpleNamespace(extra=None))}


@pytest.fixture
def events(lance_db):
    """``events`` (id, x) with the UDF column ``y``, in the database behind the ``lance_default`` connection."""
    tbl = lance_db.create_table("events", events_table(100))
    tbl.add_columns({"y": double})
    return tbl


async def _first_event(trigger):
    async for event in trigger.run():
        return event
    return None


def _fails(call, error, *names):
    """Runs ``call``; it must raise ``error`` whose message holds every one of ``names``."""
    with pytest.raises(error) as exc:
        call()
    for name in names:
        assert name in str(exc.value), (name, str(exc.value))
    return exc.value


# ---------------------------------------------------------------------------------------------------- stages
@pytest.mark.parametrize("table", ["events", None])
def test_plan_stages_want_a_table_ref_and_say_how_to_get_one(events, table):
    v = events.version
    _fails(lambda: stages.plan_backfill(table, "y"), IAE, "table must be a TableRef", "tbl.ref", repr(table))
    _fails(lambda: stages.plan_refresh(table), IAE, "view must be a TableRef", "tbl.ref", repr(table))
    assert events.version == v and events.checkpoint_store.list_keys("") == []


@pytest.mark.parametrize("parallelism", ["4", True, 0, 1.5])
def test_parallelism_is_a_positive_int_not_a_string_or_bool(events, parallelism):
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
    from geneva_provider.operators.views import GenevaPlanRefreshOperator

    v = events.version
    _fails(lambda: stages.plan_backfill(events.ref, "y", parallelism=parallelism), IAE, "parallelism",
           repr(parallelism), "'events'")
    _fails(lambda: GenevaPlanBackfillOperator(task_id="p", table="events", column="y", parallelism=parallelism
                                              ).execute(context()), IAE, "parallelism", repr(parallelism))
    _fails(lambda: GenevaPlanRefreshOperator(task_id="p", view="evens", parallelism=parallelism), IAE,
           "parallelism", repr(parallelism), "'evens'")
    assert events.version == v and events.checkpoint_store.list_keys("") == []


@pytest.mark.parametrize("uri", [None, "", 5])
def test_load_plan_wants_a_plan_uri(uri):
    _fails(lambda: stages.load_plan(uri), IAE, "plan_uri", repr(uri))


@pytest.mark.parametrize(("kwargs", "name"), [({"master": 5}, "master"), ({"master": ""}, "master"),
                                              ({"app_name": None}, "app_name"), ({"conf": ["a=b"]}, "conf")])
def test_local_session_checks_its_arguments_before_starting_a_jvm(kwargs, name):
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    _fails(lambda: stages.local_session(**kwargs), IAE, name, repr(next(iter(kwargs.values()))))
    assert SparkContext._active_spark_context is running  # no session was started (or stopped)


@pytest.mark.parametrize(("cls", "kwargs", "message"), [
    (BackfillOptions, {"where": 5}, "where must be a string, got 5"),
    (BackfillOptions, {"checkpoint_size": 0}, "checkpoint_size must be a positive integer, got 0"),
    (BackfillOptions, {"task_size": True}, "task_size must be a positive integer, got True"),
    (BackfillOptions, {"read_version": "3"}, "read_version must be a positive integer, got '3'"),
    (BackfillOptions, {"commit_retries": -1}, "commit_retries must be a non-negative integer, got -1"),
    (BackfillOptions, {"min_checkpoint_size": 10, "max_checkpoint_size": 5},
     "min_checkpoint_size 10 > max_checkpoint_size 5"),
    (RefreshOptions, {"max_rows_per_fragment": 0}, "max_rows_per_fragment must be a positive integer, got 0"),
])
def test_options_built_directly_are_validated(cls, kwargs, message):
    _fails(lambda: cls(**kwargs), IAE, message, cls.__name__)


def test_bad_options_object_fails_the_stage_before_it_changes_anything(events):
    v = events.version
    _fails(lambda: stages.plan_backfill(events.ref, "y", {"where": 5}), IAE, "backfill of table 'events'",
           "where must be a string, got 5")
    assert events.version == v and events.checkpoint_store.list_keys("") == []
    assert BackfillOptions(commit_retries=0, where="x > 1").where == "x > 1"  # good values still pass


# ---------------------------------------------------------------------------------------------------- sensors
def test_table_changed_sensor_without_watermark_is_an_invalid_argument(events):
    from geneva_provider.sensors.table import GenevaTableChangedSensor

    error = _fails(lambda: GenevaTableChangedSensor(task_id="s", table="events"), IAE,
                   "set min_version, min_rows or column", "'events'")
    assert isinstance(error, ValueError)  # as it was


@pytest.mark.parametrize(("name", "value"), [("min_version", "abc"), ("min_rows", -1), ("min_version", True)])
def test_table_changed_sensor_checks_watermarks_when_the_dag_is_parsed(events, name, value):
    from geneva_provider.sensors.table import GenevaTableChangedSensor

    _fails(lambda: GenevaTableChangedSensor(task_id="s", table="events", **{name: value}), IAE, name, repr(value),
           "'events'")


def test_table_changed_sensor_checks_templated_watermarks_once_rendered(events):
    from geneva_provider.sensors.table import GenevaTableChangedSensor

    sensor = GenevaTableChangedSensor(task_id="s", table="events", min_version="{{ params.v }}", deferrable=False)
    sensor.min_version = "abc"  # what the template rendered to
    _fails(lambda: sensor.poke(context()), IAE, "min_version", "'abc'")
    sensor.min_version = str(events.version - 1)
    assert sensor.poke(context()).is_done


def test_sensors_and_triggers_refuse_a_column_no_job_computes(events):
    from geneva_provider.sensors.table import GenevaColumnBackfilledSensor, GenevaTableChangedSensor
    from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger, GenevaTableChangedTrigger

    v = events.version
    for sensor in (GenevaColumnBackfilledSensor(task_id="s", table="events", column="x"),
                   GenevaTableChangedSensor(task_id="s", table="events", column="x")):
        error = _fails(lambda sensor=sensor: sensor.poke(context()), gp.ColumnError, "column 'x'", "'events'",
                       "is not a UDF column")
        assert not isinstance(error, IAE)
    for trigger in (GenevaColumnBackfilledTrigger(table="events", column="x", poll_interval=0.01),
                    GenevaTableChangedTrigger(table="events", column="x", poll_interval=0.01)):
        event = asyncio.run(_first_event(trigger))
        assert event.payload["status"] == "error" and "column 'x' of table 'events' is not a UDF column" in \
            event.payload["message"]
    assert events.version == v
    # A UDF column, and a column a view's refresh copies, are waited on as before.
    assert not GenevaColumnBackfilledSensor(task_id="s", table="events", column="y").poke(context()).is_done
    events.search(None).select({"x": "x"}).create_materialized_view(events.connection, "copies")
    assert not GenevaColumnBackfilledSensor(task_id="s", table="copies", column="x").poke(context()).is_done


# ---------------------------------------------------------------------------------------------------- operators
@pytest.mark.parametrize("columns", [["z"], {}, "z", {"z": ("tests.helpers:flaky_double",)},
                                     {"z": ("tests.helpers:flaky_double", "x")}])
def test_add_columns_operator_wants_a_dict_of_udf_references(events, columns):
    from geneva_provider.operators.backfill import GenevaAddColumnsOperator

    v = events.version
    op = GenevaAddColumnsOperator(task_id="a", table="events", columns=columns)
    error = _fails(lambda: op.execute(context()), IAE, "'events'", repr(columns) if not isinstance(columns, dict)
                   or not columns else "column 'z'")
    if not isinstance(columns, dict) or not columns:
        assert "columns must be a non-empty dict" in str(error) and '"my_pkg.udfs:double"' in str(error)
    assert events.version == v and "z" not in events.schema.names


@pytest.mark.parametrize(("kwargs", "names"), [
    ({"columns": ["id"]}, ["columns must be a non-empty dict", "['id']", '"source_column"']),
    ({"columns": {"id": 5}}, ["column 'id'", "5"]),
    ({"columns": {"id": "id"}, "shuffle": "no"}, ["shuffle", "'no'"]),
    ({"columns": {"id": "id"}, "shuffle": 3}, ["shuffle", "3", "seed="]),
])
def test_create_view_operator_checks_columns_and_shuffle(events, kwargs, names):
    from geneva_provider.operators.views import GenevaCreateMaterializedViewOperator

    tables = events.connection.table_names()
    _fails(lambda: GenevaCreateMaterializedViewOperator(task_id="m", view="v", source_table="events", **kwargs
                                                        ).execute(context()), IAE, "'v'", *names)
    assert events.connection.table_names() == tables


def test_plan_compaction_operator_refuses_unknown_arguments_like_the_plan_operators():
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
    from geneva_provider.operators.maintenance import GenevaPlanCompactionOperator

    _fails(lambda: GenevaPlanCompactionOperator(task_id="c", table="events", bogus=1), IAE,
           "unknown argument(s) ['bogus']", "target_rows_per_fragment", "'c'")
    _fails(lambda: GenevaPlanBackfillOperator(task_id="c", table="events", column="y", bogus=1), IAE,
           "unknown argument(s) ['bogus']")
    _fails(lambda: GenevaPlanCompactionOperator(task_id="c", table="events", target_rows_per_fragment=0), IAE,
           "target_rows_per_fragment", "0", "'events'")
    op = GenevaPlanCompactionOperator(task_id="c", table="events", target_rows_per_fragment="{{ params.n }}")
    assert op.target_rows_per_fragment == "{{ params.n }}"  # checked once rendered


# ---------------------------------------------------------------------------------------------------- assets
@pytest.mark.parametrize(("table", "column"), [("a/b", None), ("", None), (None, None), ("events", "a/b"),
                                               ("events", "")])
def test_table_asset_refuses_names_no_table_or_column_has(table, column):
    from geneva_provider.assets import table_asset

    _fails(lambda: table_asset(table, column), IAE, repr(column) if table == "events" else repr(table))


def test_table_asset_of_good_names():
    from geneva_provider.assets import table_asset

    assert table_asset("events", "y").uri == "lance://lance_default/events/y"


# ---------------------------------------------------------------------------------------------------- task groups
@pytest.mark.parametrize(("factory", "kwargs", "names"), [
    ("backfill", {"checkpoint_size": 0}, ["checkpoint_size", "0", "'events'"]),
    ("backfill", {"where": 5}, ["where", "5"]),
    ("backfill", {"min_checkpoint_size": 10, "max_checkpoint_size": "5"}, ["min_checkpoint_size 10 > "]),
    ("backfill", {"parallelism": "4"}, ["parallelism", "'4'"]),
    ("refresh", {"max_rows_per_fragment": -1}, ["max_rows_per_fragment", "-1", "'v'"]),
    ("refresh", {"src_version": "abc"}, ["src_version", "'abc'"]),
])
def test_task_groups_check_option_values_when_the_dag_is_parsed(factory, kwargs, names):
    from airflow.sdk import DAG

    from geneva_provider.task_groups import backfill_task_group, refresh_task_group

    with DAG(dag_id=f"bad_{factory}", schedule=None, start_date=datetime(2026, 1, 1)):
        build = (lambda: backfill_task_group("g", "events", "y", **kwargs)) if factory == "backfill" else (
            lambda: refresh_task_group("g", "v", **kwargs))
        _fails(build, IAE, *names)


def test_task_groups_leave_templated_and_xcom_option_values_to_run_time():
    from airflow.sdk import DAG

    from geneva_provider.operators.backfill import GenevaAddColumnsOperator
    from geneva_provider.task_groups import backfill_task_group

    with DAG(dag_id="templated", schedule=None, start_date=datetime(2026, 1, 1)):
        add = GenevaAddColumnsOperator(task_id="add", table="events", columns={"y": "tests.helpers:flaky_double"})
        group = backfill_task_group("g", "events", "y", checkpoint_size="{{ params.size }}", read_version=add.output,
                                    task_size="100")
    plan = next(t for t in group.children.values() if t.task_id.endswith(".plan"))
    assert plan.checkpoint_size == "{{ params.size }}" and plan.task_size == "100"
