"""A column plan names its outputs in groups -- value columns with the fingerprint column that says while they are
valid -- and the flat column list (the layout of the job's column files) is derived from them.

The groups come from the real planners on real Lance tables (planning needs no Spark): a backfill writes one
group (its UDF column and the UDF's fingerprint); a view refresh writes its copied columns (no fingerprint of
their own), each UDF column with its fingerprint, and ``__is_set`` with the row's fingerprint.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pydantic import ValidationError

import geneva_provider as gp
from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.models import (
    PLAN_FORMAT,
    ColumnPlan,
    OutputGroup,
    PlanSettings,
    plan_from_json,
    plan_of,
)
from geneva_provider.core.errors import PlanFormatError
from geneva_provider.core.fingerprints import fingerprint_column
from geneva_provider.core.fragments import column_leaf_ids
from geneva_provider.core.views.meta import IS_SET, ROW_FINGERPRINT
from geneva_provider.stages import load_plan, plan_backfill, plan_refresh
from tests.helpers import events_table


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return x * 2


@gp.udf(data_type=pa.int64())
def triple(x: int) -> int:
    return x * 3


def _leaves(table, columns):
    ds = table.ref.dataset()
    return [i for c in columns for i in column_leaf_ids(ds, c)]


def test_a_backfill_plan_writes_one_group_its_column_and_its_fingerprint(db):
    t = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    t.add_columns({"y": double})
    plan, _ = load_plan(plan_backfill(t.ref, "y").plan_uri)
    fp = fingerprint_column("y")
    assert plan.outputs == [OutputGroup(columns=["y"], fingerprint=fp)]
    assert plan.row_fingerprint == fp and plan.row_fingerprint_column == fp
    assert plan.row_group.columns == ["y"] and plan.value_columns == ["y"]
    assert plan.output_columns == ["y", fp]
    # The staged files' fields are the flat columns' leaves, in that order.
    assert plan.output_field_ids == _leaves(t, ["y", fp])


def test_a_view_refresh_plan_groups_copied_columns_udf_columns_and_the_row_fingerprint(db):
    source = db.create_table("events", events_table(4_000), max_rows_per_file=1_000)
    q = source.search(None).where("x % 2 = 0").select({"id": "id", "x": "x", "a": double, "b": triple})
    view = db.create_materialized_view("evens", q)
    summary = plan_refresh(view.ref)
    plan, _ = load_plan(summary.plan_uri)
    assert summary.rows_to_compute == 2_000
    fa, fb = fingerprint_column("a"), fingerprint_column("b")
    assert plan.outputs == [
        OutputGroup(columns=["id", "x"]),  # copied again whenever the row's fingerprint says the row is stale
        OutputGroup(columns=["a"], fingerprint=fa),  # each UDF column runs only when its own inputs changed
        OutputGroup(columns=["b"], fingerprint=fb),
        OutputGroup(columns=[IS_SET], fingerprint=ROW_FINGERPRINT),  # which rows need a refresh at all
    ]
    assert plan.row_fingerprint == ROW_FINGERPRINT and plan.row_group.columns == [IS_SET]
    assert plan.value_columns == ["id", "x", "a", "b", IS_SET]
    # The layout of the view's column files: values, the UDF columns' fingerprints, then __is_set and the row's.
    layout = ["id", "x", "a", "b", fa, fb, IS_SET, ROW_FINGERPRINT]
    assert plan.output_columns == layout
    reopened = db.open_table("evens")
    assert set(layout) <= set(reopened.schema.names)  # the planner declared the fingerprint columns
    assert plan.output_field_ids == _leaves(reopened, layout)


def test_a_view_without_copied_columns_has_no_copied_group(db):
    source = db.create_table("events", events_table(100))
    view = db.create_materialized_view("v", source.search(None).select({"a": double}))
    plan, _ = load_plan(plan_refresh(view.ref).plan_uri)
    assert [g.columns for g in plan.outputs] == [["a"], [IS_SET]]
    assert plan.output_columns == ["a", fingerprint_column("a"), IS_SET, ROW_FINGERPRINT]


def test_a_stored_plan_keeps_its_groups_and_an_old_format_is_refused(db):
    t = db.create_table("events", events_table(500))
    t.add_columns({"y": double})
    summary = plan_backfill(t.ref, "y")
    plan, _ = load_plan(summary.plan_uri)
    text = plan.model_dump_json()
    again = plan_from_json(text, "here")
    assert again == plan and again.outputs == plan.outputs and again.output_columns == plan.output_columns
    assert "output_columns" not in json.loads(text)  # derived, not stored
    old = {**json.loads(text), "format": PLAN_FORMAT - 1}
    old["output_columns"] = old.pop("outputs")  # the flat list of a plan written before the groups
    with pytest.raises(PlanFormatError, match=f"plan format {PLAN_FORMAT - 1}, expected {PLAN_FORMAT}"):
        plan_from_json(json.dumps(old), "an old plan")


def _fields(**extra):
    settings = PlanSettings(checkpoint_size=10, min_checkpoint_size=1, max_checkpoint_size=100, parallelism=2)
    return {"kind": JobKind.BACKFILL, "table": "t", "table_uri": "/tmp/t.lance", "read_version": 1,
            "output_field_ids": [], "column_uid": "u", "data_storage_version": "2.0", "job_prefix": "p",
            "job_id": "j", "created_at": "2026-01-01T00:00:00+00:00", "store_uri": "/tmp/s", "settings": settings,
            "fragments": [], "tasks": [], "rows_to_compute": 0, "rows_reused": 0, **extra}


def test_a_multi_output_udf_is_one_group_of_n_columns():
    plan = plan_of(_fields(outputs=[{"columns": ["lo", "hi", "mid"], "fingerprint": "__geneva_fp__lo"}],
                           row_fingerprint="__geneva_fp__lo"))
    assert type(plan) is ColumnPlan
    assert plan.row_group.columns == ["lo", "hi", "mid"]
    assert plan.output_columns == ["lo", "hi", "mid", "__geneva_fp__lo"]
    assert plan_from_json(plan.model_dump_json(), "here") == plan


@pytest.mark.parametrize(("outputs", "row", "match"), [
    ([{"columns": ["y"], "fingerprint": "fp"}], "other", "row fingerprint 'other' is no output group's"),
    ([{"columns": ["y"], "fingerprint": "fp"}, {"columns": ["y"], "fingerprint": "fp2"}], "fp", "twice"),
    ([{"columns": ["y"], "fingerprint": "fp"}, {"columns": ["z"], "fingerprint": "fp"}], "fp", "twice"),
    ([{"columns": ["y"], "fingerprint": "y"}], "y", "twice"),
    ([{"columns": [], "fingerprint": "fp"}], "fp", "at least 1 item"),
    ([], None, "at least 1 item"),
])
def test_groups_that_contradict_each_other_are_refused(outputs, row, match):
    with pytest.raises(ValidationError, match=match):
        plan_of(_fields(outputs=outputs, row_fingerprint=row))


def test_a_udtf_plan_is_one_group_without_a_fingerprint():
    fields = {k: v for k, v in _fields().items() if k != "fragments"}
    plan = plan_of({**fields, "kind": JobKind.UDTF, "table": "chunks", "outputs": [{"columns": ["chunk", "n"]}],
                    "udtf": {"source_uri": "/tmp/s.lance", "source_version": 3, "base_version": -1,
                             "read_columns": ["text"]}})
    assert plan.output_columns == plan.value_columns == ["chunk", "n"]
    with pytest.raises(gp.InvalidArgumentError, match="refresh of view 'chunks' has no row fingerprint"):
        _ = plan.row_fingerprint_column
