"""Test-only DAG: a backfill whose apply task fails once and is retried by Airflow."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from geneva_provider.operators.backfill import GenevaAddColumnsOperator
from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_test_retry", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    add = GenevaAddColumnsOperator(task_id="add_columns", table="retry", columns={"y": "tests.helpers:flaky_double"})
    add >> backfill_task_group("backfill_y", "retry", "y", retries=1, retry_delay=timedelta(seconds=0),
                               checkpoint_size=500, task_size=8_000)
