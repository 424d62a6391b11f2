"""A computed column (``gp.computed("x * 3 + 1")``) backfilled by the usual backfill task group under ``dag.test()``:
its plan, apply, write and verify tasks fill it, and a run after an append computes the appended rows alone."""

from __future__ import annotations

import pytest

import geneva_provider as gp
from tests.helpers import dag_bag, events_table

COMPUTED_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_test_computed_column", schedule=None, start_date=datetime(2026, 1, 1)):
    backfill_task_group("backfill_c", "sums", "c", retries=0)
"""


@pytest.fixture
def computed_dags(airflow_db):
    with dag_bag("geneva_test_computed_column.py", COMPUTED_DAG) as bag:
        yield bag


def _run(dag):
    dr = dag.test()
    tis = {ti.task_id: ti for ti in dr.get_task_instances()}
    return dr, {k: ti.state for k, ti in tis.items()}, tis


def _applied(tis) -> int:
    return tis["backfill_c.apply"].xcom_pull(task_ids="backfill_c.apply")["rows_computed"]


def test_the_backfill_task_group_computes_a_computed_column(computed_dags, lance_db, spark):
    tbl = lance_db.create_table("sums", events_table(1_000), max_rows_per_file=250)
    tbl.add_columns({"c": gp.computed("x * 3 + 1")})
    dag = computed_dags.get_dag("geneva_test_computed_column")

    dr, states, tis = _run(dag)
    assert dr.state == "success" and states["backfill_c.verify"] == "success", states
    assert _applied(tis) == 1_000
    got = tbl.to_arrow(["x", "c"]).to_pydict()
    assert got["c"] == [3 * x + 1 for x in got["x"]] and len(got["x"]) == 1_000

    tbl.add(events_table(300, start=1_000))
    dr, states, tis = _run(dag)
    assert dr.state == "success" and _applied(tis) == 300, states  # the appended rows alone
    assert tbl.udf_columns()["c"]["rows_valid"] == 1_300
    got = tbl.to_arrow(["x", "c"]).to_pydict()
    assert got["c"] == [3 * x + 1 for x in got["x"]] and len(got["x"]) == 1_300
    tbl.dataset().validate()
