"""One declaration of the job options, parsed in one place, taken alike by every entry point."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import datetime, timedelta

import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.options import BackfillOptions, JobOptions, RefreshOptions


def test_templated_strings_are_parsed_in_one_place():
    opts = BackfillOptions.parse({"where": "None", "read_version": "", "checkpoint_size": "12",
                                  "task_size": " 40 ", "concurrency": None}, job="backfill of table 't'")
    assert opts == BackfillOptions(checkpoint_size=12, task_size=40)
    assert BackfillOptions.parse(where="x > 1").where == "x > 1"
    refresh = RefreshOptions.parse({"src_version": "7", "max_rows_per_fragment": "null"})
    assert refresh == RefreshOptions(src_version=7)


@pytest.mark.parametrize(("values", "message"), [
    ({"task_size": "abc"}, "backfill of table 't': task_size must be an integer, got 'abc'"),
    ({"concurrency": 0}, "concurrency must be a positive integer, got 0"),
    ({"read_version": -1}, "read_version must be a positive integer, got -1"),
    ({"where": 5}, "where must be a string, got 5"),
    ({"checkpiont_size": 5}, "unknown option(s) ['checkpiont_size']"),
    ({"src_version": 3}, "unknown option(s) ['src_version']"),
    ({"min_checkpoint_size": "10", "max_checkpoint_size": "5"}, "min_checkpoint_size 10 > max_checkpoint_size 5"),
])
def test_bad_options_name_the_argument(values, message):
    with pytest.raises(gp.InvalidArgumentError) as exc:
        BackfillOptions.parse(values, job="backfill of table 't'")
    assert message in str(exc.value)


def test_refresh_and_backfill_share_the_tuning_options():
    tuning = {f.name for f in dataclasses.fields(JobOptions)}
    assert tuning <= set(BackfillOptions.names()) and tuning <= set(RefreshOptions.names())
    assert set(BackfillOptions.names()) - tuning == {"where", "read_version", "intra_applier_concurrency",
                                                     "num_frags", "timeout"}
    assert set(RefreshOptions.names()) - tuning == {"src_version", "max_rows_per_fragment"}


def test_table_backfill_rejects_unknown_options_before_anything_runs(db):
    from tests.helpers import events_table

    tbl = db.create_table("t", events_table(10))
    with pytest.raises(gp.InvalidArgumentError, match=r"backfill of table 't': unknown option\(s\) \['nope'\]"):
        tbl.backfill("x", nope=1)
    assert "where" in inspect.signature(tbl.backfill).parameters


def _plan_task(group):
    return next(t for t in group.children.values() if t.task_id.endswith(".plan"))


@pytest.mark.parametrize("factory", ["backfill", "refresh"])
def test_both_task_groups_take_every_tuning_option_and_operator_argument(factory):
    from airflow.sdk import DAG

    from geneva_provider.task_groups import backfill_task_group, refresh_task_group

    tuning = {"checkpoint_size": 500, "min_checkpoint_size": "100", "max_checkpoint_size": 900, "task_size": 50,
              "commit_granularity": 2, "concurrency": 3}
    extra = {"where": "x > 1"} if factory == "backfill" else {"src_version": "{{ params.v }}"}
    with DAG(dag_id=f"opts_{factory}", schedule=None, start_date=datetime(2026, 1, 1)):
        if factory == "backfill":
            group = backfill_task_group("g", "events", "y", **tuning, **extra, parallelism=4, pool="spark",
                                        priority_weight=7, execution_timeout=timedelta(minutes=5), retries=1)
        else:
            group = refresh_task_group("g", "v", **tuning, **extra, parallelism=4, pool="spark",
                                       priority_weight=7, execution_timeout=timedelta(minutes=5), retries=1)
    plan = _plan_task(group)
    for name, value in {**tuning, **extra}.items():
        assert getattr(plan, name) == value
        assert name in plan.template_fields
    assert plan.parallelism == 4
    for task in group.children.values():
        assert task.pool == "spark" and task.priority_weight == 7 and task.retries == 1
        assert task.execution_timeout == timedelta(minutes=5)
    cls = BackfillOptions if factory == "backfill" else RefreshOptions
    parsed = cls.parse({n: getattr(plan, n) for n in cls.names() if n != "src_version"})
    assert parsed.min_checkpoint_size == 100 and parsed.concurrency == 3
