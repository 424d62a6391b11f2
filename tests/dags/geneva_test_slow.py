"""Test-only DAG: a backfill of table 'slow' (its UDF column added by the test), checkpointed every 500 rows."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_test_slow", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    backfill_task_group("backfill_y", "slow", "y", retries=0, checkpoint_size=500)
