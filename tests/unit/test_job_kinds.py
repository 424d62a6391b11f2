"""The job-kind protocol: every registered kind implements it, plans are told apart by their kind alone, and a
chunker that kills its Python worker is named with its rows and cause, as a UDF is (the shared apply driver).

The part without a JVM; what needs a Spark session is in tests/spark/test_job_kinds.py.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from pathlib import Path

import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.models import (
    PLAN_FORMAT,
    AnyPlan,
    ColumnPlan,
    CompactionPlan,
    ExpandPlan,
    PlanBase,
    PlanSettings,
    plan_from_json,
    plan_of,
)
from geneva_provider.pipeline.stages.kinds import JobKindSpec, job_kind, registered_kinds

REPO = Path(__file__).resolve().parent.parent


def test_every_registered_kind_implements_the_protocol():
    assert set(registered_kinds()) == {JobKind.BACKFILL, JobKind.REFRESH, JobKind.UDTF}
    for kind in registered_kinds():
        spec = job_kind(kind)
        assert isinstance(spec, JobKindSpec), kind
        assert not getattr(type(spec), "__abstractmethods__", None), (kind, type(spec).__abstractmethods__)
        assert kind in spec.kinds
        assert callable(spec.planner) and inspect.signature(spec.planner).parameters
        assert job_kind(kind.value) is spec  # by its word too (as plans and records store it)
    with pytest.raises(KeyError, match=r"no job kind 'compaction' runs the apply.*backfill, refresh, udtf"):
        job_kind(JobKind.COMPACTION)
    with pytest.raises(KeyError, match=r"no job kind 'nope'"):
        job_kind("nope")


def test_no_stage_or_clean_up_compares_job_kinds_outside_the_registry():
    """The one place that tells kinds apart is the registry (and the core's plain data)."""
    offenders = []
    for path in (REPO / "geneva_provider").rglob("*.py"):
        rel = path.relative_to(REPO / "geneva_provider").as_posix()
        if rel.startswith("core/") or rel == "pipeline/stages/kinds.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(==|!=|\bis\b|\bin\b)\s*\(?JobKind\.|JobKind\.\w+\s*(==|!=)|is_udtf_view\(", line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, offenders


def _fields(kind: JobKind, **extra):
    settings = PlanSettings(checkpoint_size=10, min_checkpoint_size=1, max_checkpoint_size=100, parallelism=2)
    return {"kind": kind, "table": "t", "table_uri": "/tmp/t.lance", "outputs": [{"columns": ["y"]}], "read_version": 1,
            "output_field_ids": [], "column_uid": "u", "data_storage_version": "2.0", "job_prefix": "p",
            "job_id": "j", "created_at": "2026-01-01T00:00:00+00:00", "store_uri": "/tmp/s", "settings": settings,
            "tasks": [], "rows_to_compute": 0, "rows_reused": 0, **extra}


def test_a_plan_is_the_model_its_kind_names_and_an_old_format_is_refused():
    column = plan_of(_fields(JobKind.BACKFILL, fragments=[]))
    expand = plan_of(_fields(JobKind.UDTF, udtf={"source_uri": "/tmp/s.lance", "source_version": 3,
                                                  "base_version": -1, "read_columns": ["text"]}))
    assert type(column) is ColumnPlan and type(expand) is ExpandPlan
    assert type(plan_from_json(column.model_dump_json(), "here")) is ColumnPlan
    assert type(plan_from_json(expand.model_dump_json(), "here")) is ExpandPlan
    with pytest.raises(ValueError, match="fragments"):  # a UDTF plan has no fragment plans: refused, not misread
        plan_of(_fields(JobKind.UDTF, fragments=[], udtf=expand.udtf))
    old = expand.model_copy(update={"format": PLAN_FORMAT - 1}).model_dump_json()
    with pytest.raises(gp.PlanFormatError, match=rf"plan format {PLAN_FORMAT - 1}, expected {PLAN_FORMAT}"):
        plan_from_json(old, "an old plan")
    compaction = CompactionPlan(job_id="c", created_at="2026-01-01T00:00:00+00:00", table="t", table_uri="/t",
                                read_version=1, store_uri="/s", options={}, tasks=[], fragments=[], rows=0,
                                excluded=[])
    assert type(plan_from_json(compaction.model_dump_json(), "here")) is CompactionPlan




PLANS_MAIN = REPO / "fixtures" / "plans_main"


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


@pytest.mark.parametrize(("name", "model"), [("backfill", ColumnPlan), ("refresh", ColumnPlan), ("udtf", ExpandPlan),
                                             ("compaction", CompactionPlan)])
def test_a_plan_stored_before_the_kind_neutral_base_parses_to_the_same_json(name, model):
    """Plans stored by the release before (tests/fixtures/plans_main) parse, to their kind's model, and encode back to
    the same fields: moving fields between the base and the kinds changed no plan's JSON."""
    text = (PLANS_MAIN / f"{name}.json").read_text()
    plan = plan_from_json(text, name)
    assert type(plan) is model and isinstance(plan, PlanBase) and plan.kind == name
    assert json.loads(plan.model_dump_json(exclude_none=True)) == _without_none(json.loads(text))
    assert plan_from_json(plan.model_dump_json(), name) == plan


def test_the_plan_base_holds_only_what_every_kind_has():
    """Column fields live in the column kinds' plans; a compaction's plan has none of them."""
    assert set(PlanBase.model_fields) == {"format", "kind", "job_id", "created_at", "table", "table_uri",
                                          "read_version", "store_uri"}
    for column_field in ("outputs", "output_field_ids", "column_uid", "incarnations", "input_columns", "where", "udf",
                         "job_prefix", "settings"):
        assert column_field in ColumnPlan.model_fields and column_field in ExpandPlan.model_fields, column_field
        assert column_field not in CompactionPlan.model_fields, column_field
    for model in typing.get_args(AnyPlan):
        assert issubclass(model, PlanBase), model
