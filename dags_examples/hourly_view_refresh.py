"""Hourly materialized-view refresh, and a chained view refreshed whenever its parent is.

``geneva_hourly_view_refresh`` keeps ``events_even`` (the even-``x`` rows of ``events`` with a word
count UDF column) fresh every hour: only source rows appended since the last refresh are
computed, and an hour with no new rows skips Spark entirely.  ``geneva_chained_view_refresh`` is
scheduled on the parent view's Asset and refreshes ``events_even_short`` (a view on the view).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.assets import table_asset
from geneva_provider.operators.views import GenevaCreateMaterializedViewOperator
from geneva_provider.task_groups import refresh_task_group

SOURCE, VIEW, CHILD = "events", "events_even", "events_even_short"

with DAG(
    dag_id="geneva_hourly_view_refresh",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["geneva", "example"],
):
    create = GenevaCreateMaterializedViewOperator(
        task_id="create_view", view=VIEW, source_table=SOURCE, where="x % 2 = 0",
        columns={"id": "id", "text": "text", "n_words": "geneva_provider.examples:word_count"},
        max_rows_per_fragment=50_000)
    create >> refresh_task_group("refresh", VIEW)

with DAG(
    dag_id="geneva_chained_view_refresh",
    schedule=[table_asset(VIEW)],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["geneva", "example"],
):
    create_child = GenevaCreateMaterializedViewOperator(
        task_id="create_view", view=CHILD, source_table=VIEW, where="n_words <= 2",
        columns={"id": "id", "text": "text", "n_words": "n_words"})
    create_child >> refresh_task_group("refresh", CHILD)
