"""The reference's (LanceDB Geneva's) signatures, on real Lance tables and the in-process runner (no JVM).

``connect(Path)``, ``create_table(schema=, mode=)``, the ``@udf`` arguments the reference takes
(backfill sizes, field metadata, ``auto_backfill``, ``num_gpus=0``), its matcher form
``Retry(TimeoutError, ConnectionError, max_attempts=3)``, and the checks of the backfill options
``intra_applier_concurrency``, ``num_frags`` and ``timeout`` (what they compute is tested on Spark, in
``tests/spark/test_reference_options.py``).
"""

from __future__ import annotations

import pathlib
from datetime import timedelta

import pyarrow as pa
import pytest
from pydantic import BaseModel

import geneva_provider as gp
from geneva_provider.stages import InProcessRunner, load_plan, plan_backfill
from tests.helpers import _log_calls, counting_double, events_table, read_calls


# ---------------------------------------------------------------------- connect / create_table
def test_connect_takes_a_path(tmp_path):
    db = gp.connect(tmp_path / "db")
    db.create_table("events", events_table(3))
    assert gp.connect(pathlib.Path(tmp_path / "db")).table_names() == ["events"]
    assert db.uri == str(tmp_path / "db")


def test_create_table_from_a_schema_is_empty_and_takes_rows_later(db):
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    tbl = db.create_table("docs", schema=schema)
    assert tbl.count_rows() == 0 and tbl.schema == schema
    tbl.add([{"id": 1, "text": "a"}])
    assert tbl.to_arrow().to_pylist() == [{"id": 1, "text": "a"}]


def test_create_table_casts_data_to_the_schema_given(db):
    schema = pa.schema([("id", pa.int32()), ("score", pa.float64())])
    tbl = db.create_table("scores", {"id": [1, 2]}, schema=schema)
    assert tbl.schema == schema
    assert tbl.to_arrow().to_pylist() == [{"id": 1, "score": None}, {"id": 2, "score": None}]


def test_create_table_from_a_pydantic_model(db):
    class Doc(BaseModel):
        id: int
        text: str | None
        scores: list[float]

    tbl = db.create_table("docs", schema=Doc)
    assert [(f.name, f.type) for f in tbl.schema] == [("id", pa.int64()), ("text", pa.string()),
                                                      ("scores", pa.list_(pa.float64()))]


def test_create_mode_refuses_an_existing_table_naming_it_and_changes_nothing(db):
    tbl = db.create_table("events", events_table(5))
    version = tbl.version
    with pytest.raises(gp.TableExistsError, match=r"table 'events' already exists .*mode='exist_ok'"):
        db.create_table("events", events_table(2))
    assert issubclass(gp.TableExistsError, gp.InvalidArgumentError)  # what it raised before it had a class
    assert tbl.version == version and tbl.count_rows() == 5


def test_overwrite_replaces_and_exist_ok_opens_the_existing_table(db):
    db.create_table("events", events_table(5))
    assert db.create_table("events", events_table(3, start=10), mode="overwrite").to_arrow()["x"].to_pylist() == [
        10, 11, 12]
    opened = db.create_table("events", events_table(7), mode="exist_ok")  # data is not written to an existing one
    assert opened.to_arrow()["x"].to_pylist() == [10, 11, 12]
    assert db.create_table("events", schema=pa.schema([("x", pa.int64())]), mode="exist_ok").count_rows() == 3
    fresh = db.create_table("other", events_table(2), mode="exist_ok")  # a missing table is created
    assert fresh.count_rows() == 2


def test_exist_ok_with_a_schema_the_table_does_not_fit_names_the_columns(db):
    tbl = db.create_table("events", events_table(2))
    with pytest.raises(gp.InvalidArgumentError, match=r"create_table 'events': .*'x' \(string: the table holds "
                                                      r"int64\), 'label' \(string: missing\)"):
        db.create_table("events", schema=pa.schema([("x", pa.string()), ("label", pa.string())]), mode="exist_ok")
    assert tbl.schema.names == ["id", "x"]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, r"create_table 'events': pass data, a schema, or both"),
    ({"schema": {"id": "int"}}, r"create_table 'events': schema must be a pyarrow Schema"),
    ({"data": events_table(1), "mode": "append"}, r"create_table 'events': mode must be one of"),
    ({"data": events_table(1), "storage_options": "key=1"}, r"create_table 'events': storage_options must be a dict"),
    ({"data": {"x": ["a"]}, "schema": pa.schema([("x", pa.int64())])}, r"create_table 'events': column 'x' holds"),
])
def test_bad_create_table_arguments_name_the_table_and_create_nothing(db, kwargs, match):
    with pytest.raises(gp.InvalidArgumentError, match=match):
        db.create_table("events", **kwargs)
    assert db.table_names() == []


# ---------------------------------------------------------------------- @udf arguments
def test_udf_records_field_metadata_auto_backfill_and_backfill_sizes(db):
    @gp.udf(data_type=pa.int64(), field_metadata={"unit": "cm"}, auto_backfill=True, checkpoint_size=25,
            task_size=100, num_gpus=0)
    def double(x: int) -> int:
        return x * 2

    plain = counting_double("/nonexistent")
    assert double.resources is None and double.version == gp.udf(data_type=pa.int64())(
        double.func).version  # none of them changes the version
    tbl = db.create_table("events", events_table(10))
    tbl.add_columns({"y": double, "z": plain})
    assert tbl.schema.field("y").metadata[b"unit"] == b"cm"
    listed = tbl.udf_columns()
    assert listed["y"]["auto_backfill"] is True and listed["y"]["job_defaults"] == {"checkpoint_size": 25,
                                                                                    "task_size": 100}
    assert listed["z"]["auto_backfill"] is False and listed["z"]["job_defaults"] == {}
    tbl.add_columns({"y": double})  # the same declaration again changes nothing
    with pytest.raises(gp.ColumnError, match=r"column 'y' already exists .*auto_backfill False, not True"):
        tbl.add_columns({"y": gp.udf(data_type=pa.int64(), name="double")(double.func)})


def test_the_udf_sizes_are_the_backfill_defaults_and_the_backfill_own_win(db):
    @gp.udf(data_type=pa.int64(), checkpoint_size=7, task_size=40)
    def double(x: int) -> int:
        return x * 2

    tbl = db.create_table("events", events_table(200))
    tbl.add_columns({"y": double})
    plan, _ = load_plan(plan_backfill(tbl.ref, "y", parallelism=2).plan_uri)
    assert (plan.settings.min_checkpoint_size, plan.settings.max_checkpoint_size) == (7, 7)
    assert max(t.rows for t in plan.tasks) <= 40 and sum(t.rows for t in plan.tasks) == 200
    mine, _ = load_plan(plan_backfill(tbl.ref, "y", gp.BackfillOptions(checkpoint_size=20, task_size=100),
                                      parallelism=2).plan_uri)
    assert mine.settings.max_checkpoint_size == 20 and max(t.rows for t in mine.tasks) > 40
    capped = gp.udf(data_type=pa.int64(), name="capped", max_checkpoint_size=30)(double.func)
    tbl.add_columns({"c": capped})
    version = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=r"backfill of table 'events' \(with UDF 'capped' sizes "
                                                      r"\{'max_checkpoint_size': 30\}\): min_checkpoint_size 50 > "
                                                      r"max_checkpoint_size 30"):
        tbl.backfill("c", spark=InProcessRunner(), min_checkpoint_size=50, progress=False)
    assert tbl.version == version


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"checkpoint_size": 0}, r"UDF 'double': checkpoint_size must be a positive integer, got 0"),
    ({"task_size": "10"}, r"UDF 'double': task_size must be a positive integer, got '10'"),
    ({"min_checkpoint_size": 10, "max_checkpoint_size": 5}, r"UDF 'double': min_checkpoint_size 10 > max"),
    ({"field_metadata": {"unit": 1}}, r"UDF 'double': field_metadata must be a dict of str -> str"),
    ({"field_metadata": {"geneva::udf::name": "x"}}, r"UDF 'double': field_metadata keys \['geneva::udf::name'\]"),
    ({"auto_backfill": "yes"}, r"UDF 'double': auto_backfill must be True or False"),
    ({"num_gpus": -1}, r"UDF 'double': num_gpus must be a positive number"),
])
def test_bad_udf_arguments_are_refused_naming_the_udf_and_the_argument(kwargs, match):
    def double(x: int) -> int:
        return x * 2

    with pytest.raises(gp.UDFDefinitionError, match=match):
        gp.udf(data_type=pa.int64(), **kwargs)(double)


# ---------------------------------------------------------------------- matchers given exception classes
def test_matchers_take_exception_classes_as_the_reference_writes_them():
    retry = gp.Retry(TimeoutError, ConnectionError, max_attempts=3)
    assert retry.exceptions == (TimeoutError, ConnectionError) and retry.max_attempts == 3
    assert gp.Skip(ValueError).exceptions == (ValueError,) and gp.Fail(KeyError, match="x").match == "x"
    # The earlier forms: a tuple, then the fields in order; no class at all: every exception.
    assert gp.Retry((TimeoutError, ConnectionError), None, 3) == retry
    assert gp.Retry().exceptions == (Exception,) and gp.Skip(max_rows=2).max_rows == 2
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'attempts'"):
        gp.Retry(TimeoutError, attempts=3)
    with pytest.raises(gp.UDFDefinitionError, match=r"UDF 'f': exceptions must be exception classes, got \('x',\)"):
        gp.udf(data_type=pa.int64(), name="f", on_error=gp.Skip("x"))(lambda x: x)


def test_retry_and_skip_matchers_given_classes_decide_each_row(db, tmp_path):
    flaky = tmp_path / "flaky"
    flaky.mkdir()

    @gp.udf(data_type=pa.int64(), on_error=[gp.Retry(TimeoutError, ConnectionError, max_attempts=3,
                                                      initial_seconds=0), gp.Skip(ValueError)])
    def half(x: int) -> int:
        mark = flaky / str(x)
        if x % 5 == 0 and not mark.exists():  # every fifth row times out once, then succeeds
            mark.touch()
            raise TimeoutError(f"slow at {x}")
        if x == 7:
            raise ValueError("seven")
        return x // 2

    tbl = db.create_table("events", events_table(20))
    tbl.add_columns({"h": half})
    result = tbl.backfill("h", spark=InProcessRunner(), progress=False)
    assert result.rows_retried == 4 and result.rows_failed == 1
    assert tbl.to_arrow(["h"])["h"].to_pylist() == [None if x == 7 else x // 2 for x in range(20)]

    @gp.udf(data_type=pa.int64(), on_error=gp.Skip(ValueError))
    def broken(x: int) -> int:
        raise KeyError(x)  # not a ValueError: no matcher takes it, so the job fails

    tbl.add_columns({"b": broken})
    with pytest.raises(gp.UDFExecutionError, match="KeyError"):
        tbl.backfill("b", spark=InProcessRunner(), progress=False)


# ---------------------------------------------------------------------- backfill options: the checks
@pytest.mark.parametrize(("option", "value", "match"), [
    ("intra_applier_concurrency", 0, r"intra_applier_concurrency must be a positive integer, got 0"),
    ("intra_applier_concurrency", 2.5, r"intra_applier_concurrency must be a positive integer, got 2.5"),
    ("num_frags", -1, r"num_frags must be a positive integer, got -1"),
    ("num_frags", True, r"num_frags must be a positive integer, got True"),
    ("timeout", -5, r"timeout must be a positive number of seconds or a datetime.timedelta, got -5"),
    ("timeout", "soon", r"timeout must be a number of seconds, got 'soon'"),
    ("timeout", timedelta(seconds=-1), r"timeout must be a positive number of seconds"),
])
def test_bad_backfill_options_are_refused_naming_the_argument_before_anything_runs(db, call_dir, option, value,
                                                                                  match):
    tbl = db.create_table("events", events_table(50))
    tbl.add_columns({"y": counting_double(call_dir)})
    version = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=rf"backfill of table 'events': {match}"):
        tbl.backfill("y", **{option: value})  # no runner given: a Spark session would start past the checks
    with pytest.raises(gp.InvalidArgumentError, match=match):
        tbl.backfill_async("y", **{option: value})
    assert tbl.version == version and read_calls(call_dir) == [] and db.list_jobs("events") == []


def test_backfill_options_take_templated_and_duration_values():
    parsed = gp.BackfillOptions.parse({"timeout": "90", "num_frags": "2", "intra_applier_concurrency": "None"})
    assert (parsed.timeout, parsed.num_frags, parsed.intra_applier_concurrency) == (90.0, 2, None)
    assert gp.BackfillOptions(timeout=timedelta(minutes=2)).timeout == 120.0


# ---------------------------------------------------------------------- more @udf arguments, SQL columns
def test_cuda_batch_size_and_error_handling_are_the_references_names(db):
    @gp.udf(cuda=True, batch_size=64, error_handling=gp.Retry(TimeoutError, max_attempts=2))
    def embed(x: int) -> float:
        return float(x)

    assert embed.resources.num_gpus == 1
    assert embed.job_defaults == {"checkpoint_size": 64}
    assert embed.on_error == gp.udf(lambda x: 0.0, data_type=pa.float64(),
                                    on_error=gp.Retry(TimeoutError, max_attempts=2)).on_error
    with pytest.raises(gp.UDFDefinitionError, match="on_error and error_handling"):
        gp.udf(lambda x: 0, data_type=pa.int64(), on_error=gp.fail_fast(), error_handling=gp.fail_fast())
    with pytest.raises(gp.UDFDefinitionError, match="batch_size must be a positive integer, got 0"):
        gp.udf(lambda x: 0, data_type=pa.int64(), batch_size=0)
    with pytest.raises(gp.UDFDefinitionError, match="cuda=True asks for one GPU"):
        gp.udf(lambda x: 0, data_type=pa.int64(), cuda=True, num_gpus=2)
    with pytest.raises(gp.UDFDefinitionError, match="manifest must be a GenevaManifest"):
        gp.udf(lambda x: 0, data_type=pa.int64(), manifest={"pip": []})


def test_batch_size_is_the_rows_of_every_call(db, call_dir):
    log = str(call_dir)

    @gp.udf(data_type=pa.int64(), input_columns=["x"], batch_size=7)
    def double(x: pa.Array) -> pa.Array:
        _log_calls(log, [len(x)])  # one line a call: its rows
        return pa.compute.multiply(x, 2)

    tbl = db.create_table("events", events_table(30))
    tbl.add_columns({"y": double})
    tbl.backfill("y", spark=InProcessRunner())
    calls = read_calls(call_dir)  # 7 rows a call; a task's last call holds what is left of its rows
    assert sum(calls) == 30 and max(calls) == 7 and calls.count(7) == 4
    assert tbl.count_rows("y = x * 2") == 30


def test_add_columns_takes_sql_expressions_beside_udfs(db, call_dir):
    tbl = db.create_table("events", events_table(10))
    version = tbl.version
    tbl.add_columns({"z": "x * 10", "note": "cast(NULL as string)", "y": counting_double(call_dir)})
    got = tbl.to_arrow(["x", "z", "note", "y"]).to_pydict()
    assert got["z"] == [10 * x for x in got["x"]] and got["note"] == [None] * 10 and got["y"] == [None] * 10
    assert tbl.backfill("y", spark=InProcessRunner()).rows_computed == 10
    # Bad input changes nothing: a bad expression, a name that exists, a bad UDF spec beside an expression.
    before = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=r"'bad'.*could not be computed"):
        tbl.add_columns({"bad": "no_such_column + 1"})
    with pytest.raises(gp.ColumnError, match=r"columns \['z'\] exist already"):
        tbl.add_columns({"z": "x + 1"})
    with pytest.raises(gp.InvalidArgumentError,
                       match=r"column 'w' needs a @udf function, computed\(<SQL>\) or a SQL expression"):
        tbl.add_columns({"v": "x + 1", "w": 42})
    assert tbl.version == before and "v" not in tbl.schema.names and version < before


def test_the_references_module_paths_name_the_same_objects():
    from geneva_provider.db import Connection, connect
    from geneva_provider.manifest import GenevaManifest
    from geneva_provider.query import GenevaQueryBuilder
    from geneva_provider.table import Table
    from geneva_provider.transformer import UDF, Columns, UnpackedUDF, udf

    assert (connect, Connection, Table, udf, UDF, Columns, UnpackedUDF, GenevaManifest, GenevaQueryBuilder) == (
        gp.connect, gp.Connection, gp.Table, gp.udf, gp.UDF, gp.Columns, gp.UnpackedUDF, gp.GenevaManifest,
        gp.GenevaQueryBuilder)
