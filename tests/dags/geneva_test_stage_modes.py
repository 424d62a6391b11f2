"""Test-only DAGs: the same backfill of column 'y' with its Spark stages deferred, durable, or waited for in the task.

Each DAG backfills a table of its own (named after the mode; its UDF column added by the test), checkpointed
every 500 rows, one retry two seconds after a failure.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group

MODES = {"deferred": {"deferrable": True}, "durable": {"deferrable": False},  # durable is the default
         "blocking": {"deferrable": False, "durable": False}}

for mode, spark in MODES.items():
    with DAG(dag_id=f"geneva_test_{mode}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        backfill_task_group("backfill_y", mode, "y", retries=1, retry_delay=timedelta(seconds=2), checkpoint_size=500,
                            poll_interval=1, **spark)
