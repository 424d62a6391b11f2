"""A backfill's ``partition_where``: the run's partition key as a SQL string literal, checked at parse time, and
a run without a key refused before anything is planned (real Lance table, the plan operator run in-process)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowFailException

import geneva_provider as gp
from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
from geneva_provider.operators.partitions import check_partition_where, render_partition_where
from geneva_provider.task_groups import backfill_task_group, table_change_dag
from tests.helpers import plain_double

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
ODD = ["O'Brien", "x' OR '1'='1", "a\\'b"]  # keys a naive '{{ partition_key }}' would break or inject through
MAPPING = "date = {{ partition_key }}"


def context(partition_key: str | None = None, events: dict | None = None) -> dict:
    return {"outlet_events": defaultdict(lambda: SimpleNamespace(extra=None)), "run_id": "manual__p",
            "partition_key": partition_key, "triggering_asset_events": events or {}}


@pytest.fixture
def days(lance_db):
    """100 rows a day for three days, 5 rows under each odd key; UDF column ``s = 2x`` (nothing computed)."""
    dates = [d for d in DAYS for _ in range(100)] + [k for k in ODD for _ in range(5)]
    xs = pa.array(range(len(dates)), pa.int64())
    tbl = lance_db.create_table("days", pa.table({"id": xs, "x": xs, "date": dates}))
    tbl.add_columns({"s": plain_double})
    return tbl


def test_the_key_renders_as_a_string_literal_and_selects_only_its_rows(days):
    assert render_partition_where(MAPPING, "2024-01-02") == "date = '2024-01-02'"
    assert render_partition_where(MAPPING, "O'Brien") == "date = 'O''Brien'"
    # the mapping as it is often written, the key between quotes: the same literal, the key still escaped
    quoted = "date = '{{ partition_key }}'"
    assert check_partition_where(quoted, "x") == quoted
    assert render_partition_where(quoted, "O'Brien") == "date = 'O''Brien'"
    assert render_partition_where("date = '{{partition_key}}' OR x < 0", "a") == "date = 'a' OR x < 0"
    for key in [*DAYS, *ODD]:
        where = render_partition_where(MAPPING, key)
        dates = days.dataset().to_table(columns=["date"], filter=where).column("date").to_pylist()
        assert dates and set(dates) == {key}, (key, where)
    # a key no row has selects nothing (not every row, as "date = 'x' OR '1'='1'" would)
    where = render_partition_where(MAPPING, "zz' OR '1'='1")
    assert days.dataset().to_table(filter=where).num_rows == 0


@pytest.mark.parametrize(("template", "said"), [
    ('date = "{{partition_key}}"', "puts quotes or text around"),
    ("date = '{{ partition_key }}T00'", "puts quotes or text around"),
    ("date = ' {{ partition_key }}'", "puts quotes or text around"),
    ("date = {{ ds }}", "may use only"),
    ("date = '2024-01-01'", "must use it"),
    ("date = {{ partition_key ", "not a valid template"),
    ("", "must be a SQL filter"),
    (3, "must be a SQL filter"),
])
def test_a_bad_mapping_fails_when_the_dag_is_parsed(template, said):
    with pytest.raises(gp.InvalidArgumentError, match=said) as failed:
        GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", partition_where=template)
    assert "partition_where" in str(failed.value) and "task_id 'plan'" in str(failed.value)
    assert check_partition_where("day = {{ partition_key | lower }}", "x")  # filters are fine


@pytest.mark.parametrize(("template", "said"), [
    ("""date = {{ partition_key | replace("'", "") }}""", "the filter 'replace'"),
    ("""date = {{ partition_key | trim("'") }}""", "the filter 'trim'"),
    ("""date = {{ partition_key | lower | replace("''", "'") }}""", "the filter 'replace'"),
    ("""date = {{ partition_key[1:-1] }}""", "an index"),
    ("""date = {{ partition_key.strip("'") }}""", "a call"),
    ("""date = {{ "'" ~ partition_key ~ "'" }}""", "an expression"),
    ("""date = {{ "'" }}{{ partition_key }}""", "an expression"),
    ("""{% set k = partition_key | replace("'", "") %}date = '{{ k }}'""", "a {% set %} statement"),
    ("""date = {% if partition_key %}{{ partition_key | trim("'") }}{% endif %}""", "a {% if %} statement"),
])
def test_a_mapping_whose_jinja_can_take_the_key_out_of_its_quotes_fails_when_the_dag_is_parsed(template, said):
    """Jinja filters, indexes, calls, expressions and statements can strip the quotes the key is rendered in, and a
    key such as ``x' OR '1'='1`` then selects every row: refused when the DAG is parsed, naming the argument, the
    template and what in it is refused."""
    with pytest.raises(gp.InvalidArgumentError, match=said) as failed:
        GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", partition_where=template)
    message = str(failed.value)
    assert "partition_where" in message and repr(template) in message and "task_id 'plan'" in message, message
    from airflow.sdk import DAG

    with DAG("partitioned_group", schedule=None), pytest.raises(gp.InvalidArgumentError, match=said):
        backfill_task_group("by_day", "days", "s", partition_where=template)


@pytest.mark.parametrize("template", [
    "path LIKE 'logs/{{ partition_key }}/%'",
    "note = 'a {{ partition_key }} b'",
    "note = 'it''s {{ partition_key }} b' AND x > 0",
    "n = 'a {{ partition_key | lower }} z'",
    "x > 0 AND (n = \"a {{ partition_key }} x\")",
    "date = {{ partition_key }} OR note = 'day {{ partition_key }} end'",
])
def test_a_key_inside_a_quoted_string_of_the_mapping_is_refused_when_the_dag_is_parsed(days, template):
    """The key renders as its own quoted literal: inside a string of the mapping its first quote ends that string and
    the key's text becomes SQL (``x' OR 1=1 OR n = '`` would select every row).  Refused, naming the argument."""
    rendered = render_partition_where(template, " OR 1=1 OR n = ")  # what the check stops: the key out of any literal
    assert " or 1=1 or n = " in rendered.lower()
    with pytest.raises(gp.InvalidArgumentError, match="inside a quoted") as failed:
        GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", partition_where=template)
    message = str(failed.value)
    assert "partition_where" in message and repr(template) in message and "task_id 'plan'" in message, message


def test_a_key_after_quoted_strings_and_sql_comments_that_close_is_accepted(days):
    for template in ["note = 'it''s' AND date = {{ partition_key }}", "date = {{ partition_key }} -- it's",
                     "date = /* it's */ {{ partition_key }}", "\"date\" = '{{ partition_key }}' AND note <> 'x'",
                     "date = {{ partition_key }}{{ partition_key }}"]:
        assert check_partition_where(template, "x") == template
    where = render_partition_where("date = 'it''s' OR date = '{{ partition_key }}' AND x >= 0", "2024-01-02")
    assert days.dataset().to_table(filter=where).num_rows == 100


def test_the_case_filters_keep_the_key_quoted():
    """``| lower`` and ``| upper`` change only letters: the key stays one SQL string literal, its quotes doubled."""
    for template, rendered in [("day = {{ partition_key | lower }}", "day = 'o''brien'"),
                               ("day = {{ partition_key|upper }} AND x > 0", "day = 'O''BRIEN' AND x > 0")]:
        assert check_partition_where(template, "x") == template
        assert render_partition_where(template, "O'Brien") == rendered


def test_the_plan_computes_only_the_runs_partition_anded_with_where(days):
    plan = GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", partition_where=MAPPING)
    assert plan.execute(context("2024-01-02"))["rows_to_compute"] == 100
    odd = GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", partition_where=MAPPING)
    assert odd.execute(context("O'Brien"))["rows_to_compute"] == 5
    both = GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", where="x % 2 = 0",
                                      partition_where=MAPPING)
    assert both.execute(context("2024-01-03"))["rows_to_compute"] == 50
    assert both.where == "x % 2 = 0"  # the operator's own where is left as written


def test_the_triggering_events_key_serves_a_run_without_one(days):
    event = SimpleNamespace(partition_key="2024-01-01")
    plan = GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", partition_where=MAPPING)
    assert plan.execute(context(None, {"asset": [event, event]}))["rows_to_compute"] == 100
    two = {"asset": [event, SimpleNamespace(partition_key="2024-01-02")]}
    with pytest.raises(gp.InvalidArgumentError, match=r"carry several: \['2024-01-01', '2024-01-02'\]"):
        plan.execute(context(None, two))


def test_a_run_without_a_partition_key_fails_before_planning(days):
    version = days.version
    plan = GenevaPlanBackfillOperator(task_id="plan", table="days", column="s", partition_where=MAPPING)
    with pytest.raises(gp.InvalidArgumentError) as failed:
        plan.execute(context(None))
    assert isinstance(failed.value, AirflowFailException)  # not retried: the run will never have a key
    for needle in ("partition_where", "DAG run 'manual__p'", "no partition key", "table 'days'"):
        assert needle in str(failed.value)
    assert days.version == version


def test_the_task_group_takes_the_mapping_and_the_change_dag_refuses_it():
    from airflow.sdk import DAG

    with DAG("partitioned_group", schedule=None):
        group = backfill_task_group("bf", "days", "s", partition_where=MAPPING)
    assert group.children["bf.plan"].partition_where == MAPPING
    with pytest.raises(gp.InvalidArgumentError, match="watcher's asset events carry none"):
        table_change_dag("days", columns=["s"], views=[], partition_where=MAPPING)
