"""Hourly backfill: every hour, wait (deferred, no worker slot held) for rows that lack the column,
then backfill them.  An hour with no new rows ends with the sensor skipped and no Spark job.

``GENEVA_HOURLY_WAIT_SECONDS`` (default 3000) bounds the wait within one run.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.operators.backfill import GenevaAddColumnsOperator
from geneva_provider.sensors.table import GenevaTableChangedSensor
from geneva_provider.task_groups import backfill_task_group

TABLE = "events"

with DAG(
    dag_id="geneva_hourly_backfill",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["geneva", "example"],
):
    add_columns = GenevaAddColumnsOperator(
        task_id="add_columns", table=TABLE, columns={"embedding": "geneva_provider.examples:embed"})
    wait = GenevaTableChangedSensor(
        task_id="wait_for_new_rows",
        table=TABLE,
        column="embedding",
        poke_interval=60,
        timeout=float(os.environ.get("GENEVA_HOURLY_WAIT_SECONDS", 3000)),
        soft_fail=True,
    )
    add_columns >> wait >> backfill_task_group("backfill_embedding", TABLE, "embedding")
