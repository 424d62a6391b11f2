"""An Airflow DAG whose backfill column is dropped and added again as float64 between its apply and write tasks.

The write+commit task fails once (no retry can help: every retry meets the same new column) with the
package's error naming the column and both incarnations, nothing lands, and a rerun computes the new column.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.helpers import dag_bag, events_table, plain_double

DAGS = """
from datetime import datetime

from airflow.sdk import DAG, task

from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator

PULLED = "{{ ti.xcom_pull(task_ids='plan') }}"


@task
def recreate():
    from geneva_provider.hooks.lance import LanceHook
    from tests.unit.test_column_incarnations import quartered

    tbl = LanceHook().get_conn().open_table("rc")
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": quartered})


with DAG(dag_id="geneva_test_recreated_column", schedule=None, start_date=datetime(2026, 1, 1)):
    plan = GenevaPlanBackfillOperator(task_id="plan", table="rc", column="y")
    apply = GenevaSparkApplyOperator(task_id="apply", plan=PULLED, retries=0)
    write = GenevaSparkWriteCommitOperator(task_id="write_commit", plan=PULLED, retries=2, retry_delay=1)
    verify = GenevaVerifyOperator(task_id="verify", plan=PULLED, table="rc", column="y", retries=0)
    plan >> apply >> recreate() >> write >> verify
"""


@pytest.fixture
def recreated_column_dags(airflow_db):
    with dag_bag("geneva_test_recreated_column.py", DAGS) as bag:
        yield bag


def test_a_write_commit_task_after_its_column_was_re_created_fails_once_and_nothing_lands(
        recreated_column_dags, lance_db, connect_spark, capfd):
    tbl = lance_db.create_table("rc", events_table(3_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": plain_double})  # int64
    dr = recreated_column_dags.get_dag("geneva_test_recreated_column").test()
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert dr.state == "failed"
    assert states == {"plan": "success", "apply": "success", "recreate": "success", "write_commit": "failed",
                      "verify": "upstream_failed"}, states
    write = next(ti for ti in dr.get_task_instances() if ti.task_id == "write_commit")
    assert write.try_number == 1  # not retried: a retry meets the same new column
    logs = "".join(capfd.readouterr())
    assert "ColumnReplacedError" in logs
    assert "column 'y' of table 'rc' was dropped and re-created" in logs
    assert "type int64" in logs and "type double" in logs

    ds = tbl.dataset()
    ds.validate()
    assert ds.schema.field("y").type == pa.float64()
    assert ds.to_table(columns=["y"]).column("y").null_count == 3_000  # readable, nothing landed
    assert tbl.backfill("y", spark=connect_spark).rows_computed == 3_000  # the rerun plans afresh
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [x / 4 for x in got["x"]]
    tbl.dataset().validate()
