"""The job-kind protocol: every registered kind implements it, plans are told apart by their kind alone, and a
chunker that kills its Python worker is named with its rows and cause, as a UDF is (the shared apply driver).

The part without a JVM; what needs a Spark session is in tests/spark/test_job_kinds.py.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import re
import typing
from pathlib import Path

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.kinds import JobKind, Stage
from geneva_provider.core.contracts.models import (
    PLAN_FORMAT,
    AnyPlan,
    ColumnPlan,
    CompactionPlan,
    ExpandPlan,
    JobRecord,
    PlanBase,
    PlanSettings,
    plan_from_json,
    plan_model,
    plan_of,
)
from geneva_provider.core.store.layout import BatchKey, batch_prefix, job_prefix
from geneva_provider.pipeline.maintenance.cleanup import cleanup_checkpoints
from geneva_provider.pipeline.maintenance.compaction import held_fragments
from geneva_provider.pipeline.stages import kinds
from geneva_provider.pipeline.stages.kinds import (
    JobKindSpec,
    KindSpec,
    every_kind,
    job_kind,
    kind_of,
    kinds_running,
    registered_kinds,
)
from geneva_provider.pipeline.stages.planning import open_plan
from geneva_provider.pipeline.stages.progress_lines import ProgressLines
from geneva_provider.pipeline.stages.registry import spark_stage
from geneva_provider.stages import load_plan, plan_compaction
from tests.helpers import events_table

REPO = Path(__file__).resolve().parent.parent


def test_every_registered_kind_implements_the_protocol():
    assert set(registered_kinds()) == {JobKind.BACKFILL, JobKind.REFRESH, JobKind.UDTF}
    assert set(every_kind()) == set(JobKind)  # compaction is a kind of the protocol too
    for kind in every_kind():
        spec = kind_of(kind)
        assert isinstance(spec, KindSpec), kind
        assert not getattr(type(spec), "__abstractmethods__", None), (kind, type(spec).__abstractmethods__)
        assert kind in spec.kinds
        assert callable(spec.planner) and inspect.signature(spec.planner).parameters
        assert kind_of(kind.value) is spec  # by its word too (as plans and records store it)
        assert isinstance(spec, JobKindSpec) == (kind in registered_kinds())
    for kind in registered_kinds():
        assert job_kind(kind) is kind_of(kind)
    with pytest.raises(KeyError, match=r"no job kind 'compaction' runs the apply.*backfill, refresh, udtf"):
        job_kind(JobKind.COMPACTION)
    with pytest.raises(KeyError, match=r"no job kind 'nope'"):
        job_kind("nope")
    with pytest.raises(KeyError, match=r"no job kind 'nope' is registered; the kinds are backfill, .*compaction"):
        kind_of("nope")


def test_the_spark_stages_accept_the_plans_of_the_kinds_that_run_them():
    """Which kinds' plans a stage program accepts is read from the kinds' registry, not listed by the stage."""
    assert spark_stage(Stage.APPLY).plan_kinds == spark_stage(Stage.WRITE_COMMIT).plan_kinds == \
        tuple(registered_kinds()) == kinds_running(Stage.APPLY)
    assert spark_stage(Stage.COMPACT).plan_kinds == kinds_running(Stage.COMPACT) == (JobKind.COMPACTION,)


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


def test_a_compaction_is_a_kind_whose_plans_hold_nothing(db, call_dir):
    """A live compaction holds no fragment and reads no checkpoint: its kind says so (no stage asks its type)."""
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=1_000)
    summary = plan_compaction(tbl.ref, {"target_rows_per_fragment": 10_000})
    plan, store = open_plan(summary.plan_uri)
    spec = kind_of(plan)
    assert spec is kind_of(JobKind.COMPACTION) and not isinstance(spec, JobKindSpec)
    assert spec.planner is plan_compaction
    assert spec.held_fragments(plan) == set() and spec.checkpoint_prefix(plan) is None
    assert held_fragments(store) == {}  # the live compaction is no holder
    with pytest.raises(gp.InvalidArgumentError, match=r"is a compaction plan, not a plan of a job that applies"):
        load_plan(summary.plan_uri)


# A kind made up by the test, registered in place of the compaction's: its plans (the compaction's model, the one
# plan model that is no column kind's) hold the fragments they name, and read checkpoints of one job prefix.
PROBE_PREFIX = job_prefix("probe", "1", "x", None, "/probe")


class _HoldingKind(KindSpec[CompactionPlan]):
    kinds = (JobKind.COMPACTION,)

    @property
    def planner(self):
        return plan_compaction

    def held_fragments(self, plan: CompactionPlan) -> set[int]:
        return set(plan.fragments)

    def checkpoint_prefix(self, plan: CompactionPlan) -> str | None:
        return PROBE_PREFIX


HOLDING = _HoldingKind()


@pytest.fixture
def holding_kind(monkeypatch):
    monkeypatch.setitem(kinds._KINDS, JobKind.COMPACTION, kinds.KindEntry(f"{__name__}:HOLDING", (Stage.COMPACT,)))
    monkeypatch.delitem(kinds._LOADED, JobKind.COMPACTION, raising=False)
    yield HOLDING
    kinds._LOADED.pop(JobKind.COMPACTION, None)  # the real spec is loaded again on first use


def test_a_kind_registered_in_one_line_is_what_compaction_and_clean_up_ask(db, holding_kind):
    """The seam: a kind is its registry line.  Its plan round-trips through the store to its spec, and compaction
    and clean-up treat its live plan only by asking the spec -- which fragments it holds, which checkpoints it keeps."""
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=1_000)
    store = tbl.checkpoint_store
    first = plan_compaction(tbl.ref, {"target_rows_per_fragment": 10_000})  # live: planned, never run
    plan, _ = open_plan(first.plan_uri)
    assert kind_of(plan) is holding_kind and plan.fragments == [0, 1]

    assert held_fragments(store) == {first.job_id: [0, 1]}  # what the kind says its live plan holds
    second = plan_compaction(tbl.ref, {"target_rows_per_fragment": 10_000})
    assert second.nothing_to_do and second.fragments_excluded == [0, 1]
    assert second.fragments_held_by == {first.job_id: [0, 1]}

    held = BatchKey(batch_prefix(PROBE_PREFIX, src_key="k"), frag_id=0, start=0, end=10).key()
    free = BatchKey(batch_prefix(PROBE_PREFIX, src_key="k"), frag_id=5, start=0, end=10).key()
    for key in (held, free):
        store[key] = pa.table({"x": [1]})
    result = cleanup_checkpoints(tbl.ref, store, dt.timedelta(0))
    assert result.kept_for_live_jobs == 1 and held in store and free not in store
    assert tbl.dataset().count_rows() == 2_000 and len(tbl.dataset().get_fragments()) == 2


def test_every_kind_has_one_plan_model_which_words_its_summary():
    """The registry of kinds and the plan union agree, and a summary is described by its kind's plan model."""
    assert set(every_kind()) == set(JobKind)
    for kind in every_kind():
        assert issubclass(plan_model(kind), PlanBase) and kind in typing.get_args(
            plan_model(kind).model_fields["kind"].annotation)
    with pytest.raises(KeyError, match=r"no plan model for job kind 'nope'"):
        plan_model("nope")
    compaction = plan_from_json((PLANS_MAIN / "compaction.json").read_text(), "here").summary("uri")
    assert compaction.describe() == "1 rewrite task over 6 fragments at version 4"
    backfill = plan_from_json((PLANS_MAIN / "backfill.json").read_text(), "here").summary("uri")
    assert backfill.describe().startswith("1,200 rows to compute in 5 tasks over 6 fragments at version 4; ")
    udtf = plan_from_json((PLANS_MAIN / "udtf.json").read_text(), "here").summary("uri")
    assert udtf.describe() == "300 source rows to expand in 3 tasks (view version 1)"


def test_a_progress_line_is_worded_by_its_stage_without_loading_a_kind(monkeypatch):
    """The triggerer words a compaction's line from the stage registry (its rows land at its one commit), loading no
    kind's module (which would bring Arrow and Lance into the triggerer)."""
    monkeypatch.setattr(kinds, "_LOADED", {})
    now = "2026-01-01T00:00:00+00:00"
    record = JobRecord(job_id="j", kind=JobKind.COMPACTION, table="t", created_at=now, updated_at=now,
                       rows_planned=1_100, rows_committed=1_100, rows_checkpointed=0)
    line = ProgressLines("j", Stage.COMPACT).line(record)
    assert "1100 of 1100 rows rewritten and committed" in line and "checkpointed" not in line
    applied = ProgressLines("j", Stage.APPLY).line(record.model_copy(update={"kind": JobKind.BACKFILL,
                                                                             "rows_checkpointed": 600}))
    assert "600 of 1100 rows checkpointed" in applied
    assert kinds._LOADED == {}
