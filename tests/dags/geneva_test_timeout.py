"""Test-only DAG: a backfill of table 'slow' whose tasks may run 6 seconds at most (a hung stage is bounded)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group

with DAG(dag_id="geneva_test_timeout", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    backfill_task_group("backfill_y", "slow", "y", retries=0, checkpoint_size=500,
                        execution_timeout=timedelta(seconds=6))
