"""Test-only DAG: a deferrable sensor that waits, in the triggerer, for a table to grow past a row count.

The watermark is a run param, so a test can start the run while the condition is false (the sensor
defers) and then make it true by appending rows.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from geneva_provider.sensors.table import GenevaTableChangedSensor

with DAG(
    dag_id="geneva_test_sensor",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"table": Param("sensed", type="string"), "min_rows": Param(0, type="integer", minimum=0)},
):
    GenevaTableChangedSensor(
        task_id="wait_for_rows",
        table="{{ params.table }}",
        min_rows="{{ params.min_rows }}",
        poke_interval=2,
        timeout=600,
        deferrable=True,
    )
