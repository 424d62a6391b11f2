"""``GenevaAlterColumnsOperator`` before a backfill task group, run with ``dag.test()``: the revised UDF's values
replace the old ones, and a second run of the DAG computes nothing."""

from __future__ import annotations

import pytest

from tests.helpers import dag_bag, events_table, plain_double

ALTER_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.operators.backfill import GenevaAlterColumnsOperator
from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_test_alter_columns", schedule=None, start_date=datetime(2026, 1, 1)):
    alter = GenevaAlterColumnsOperator(task_id="alter", table="{{ params.table }}", params={"table": "revised"},
                                       alterations=[{"path": "s", "udf": "tests.helpers:plain_triple"}])
    alter >> backfill_task_group("backfill_s", "revised", "s", retries=0)

with DAG(dag_id="geneva_test_alter_columns_bad", schedule=None, start_date=datetime(2026, 1, 1)):
    GenevaAlterColumnsOperator(task_id="alter", table="revised", retries=2,
                               alterations=[{"path": "nope", "udf": "tests.helpers:plain_triple"}])
"""


@pytest.fixture
def alter_dags(airflow_db):
    with dag_bag("geneva_test_alter_columns.py", ALTER_DAG) as bag:
        yield bag


def _run(dag):
    dr = dag.test()
    return dr, {ti.task_id: ti.state for ti in dr.get_task_instances()}


def test_altering_a_udf_before_its_backfill_task_group_recomputes_the_stale_rows(alter_dags, lance_db, spark):
    tbl = lance_db.create_table("revised", events_table(2_000), max_rows_per_file=500)
    tbl.add_columns({"s": plain_double})
    tbl.backfill("s", spark=spark, progress=False)

    dr, states = _run(alter_dags.get_dag("geneva_test_alter_columns"))
    assert states.pop("backfill_s.index") == "skipped", states  # the column has no index
    assert dr.state == "success" and set(states.values()) == {"success"}, states
    got = tbl.to_arrow(["x", "s"]).to_pydict()
    assert got["s"] == [3 * x for x in got["x"]] and len(got["x"]) == 2_000
    assert tbl.udf_columns()["s"]["name"] == "plain_triple" and tbl.udf_columns()["s"]["rows_stale"] == 0
    tbl.dataset().validate()

    version = tbl.version
    dr, states = _run(alter_dags.get_dag("geneva_test_alter_columns"))  # again: the column already holds the UDF
    assert dr.state == "success" and states["alter"] == "success", states
    assert states["backfill_s.plan"] == "success" and states["backfill_s.verify"] == "skipped", states
    assert tbl.version == version


def test_a_bad_alteration_fails_its_task_once_and_changes_nothing(alter_dags, lance_db, capfd):
    tbl = lance_db.create_table("revised", events_table(10))
    tbl.add_columns({"s": plain_double})
    version = tbl.version
    dr, states = _run(alter_dags.get_dag("geneva_test_alter_columns_bad"))
    assert dr.state == "failed" and states == {"alter": "failed"}, states
    assert next(ti for ti in dr.get_task_instances()).try_number == 1  # bad input: not retried
    assert "column 'nope' not found in table 'revised'" in "".join(capfd.readouterr())
    assert tbl.version == version
