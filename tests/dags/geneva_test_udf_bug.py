"""Test-only DAG: a backfill whose UDF has a bug; its apply task must fail once, not be retried."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from geneva_provider.operators.backfill import GenevaAddColumnsOperator
from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_test_udf_bug", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    add = GenevaAddColumnsOperator(task_id="add_columns", table="buggy", columns={"y": "tests.helpers:broken_double"})
    add >> backfill_task_group("backfill_y", "buggy", "y", retries=2, retry_delay=timedelta(seconds=0))
