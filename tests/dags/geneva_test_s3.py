"""Test-only DAG: a backfill of a table on an S3-compatible store, credentials only in the lance connection."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.operators.backfill import GenevaAddColumnsOperator
from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_test_s3", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    add = GenevaAddColumnsOperator(task_id="add_columns", table="events", columns={"y": "tests.helpers:plain_double"},
                                   lance_conn_id="lance_s3")
    add >> backfill_task_group("backfill_y", "events", "y", lance_conn_id="lance_s3", retries=0)
