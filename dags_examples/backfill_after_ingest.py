"""Backfill after ingest: an ingest DAG appends rows and emits the table's Asset; a backfill DAG
scheduled on that Asset fills the UDF column for exactly the new rows.

Run: ``airflow dags test geneva_ingest_events`` then ``airflow dags test geneva_backfill_after_ingest``
(with a scheduler running, the second starts by itself after the first).
Connections: ``lance_default`` (host = database directory or URI) and ``spark_default``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from geneva_provider.assets import table_asset
from geneva_provider.operators.backfill import GenevaAddColumnsOperator
from geneva_provider.task_groups import backfill_task_group

TABLE = "events"
EVENTS = table_asset(TABLE)

with DAG(
    dag_id="geneva_ingest_events",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"rows": Param(10_000, type="integer", minimum=1)},
    tags=["geneva", "example"],
):

    @task(outlets=[EVENTS])
    def ingest(params: dict | None = None, outlet_events=None) -> dict:
        """Appends sample rows (creating the table on the first run)."""
        import pyarrow.compute as pc

        from geneva_provider.examples import sample
        from geneva_provider.hooks.lance import LanceHook

        db = LanceHook().get_conn()
        rows = int(params["rows"])
        if TABLE in db.table_names():
            tbl = db.open_table(TABLE)
            start = (pc.max(tbl.to_arrow(["id"]).column("id")).as_py() or -1) + 1
            version = tbl.add(sample(rows, start=start))
        else:
            tbl = db.create_table(TABLE, sample(rows), max_rows_per_file=max(rows // 4, 1))
            version = tbl.version
        outlet_events[EVENTS].extra = {"table": TABLE, "rows_added": rows, "version": version}
        return {"table": TABLE, "rows_added": rows, "version": version}

    ingest()

with DAG(
    dag_id="geneva_backfill_after_ingest",
    schedule=[EVENTS],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["geneva", "example"],
):
    add_columns = GenevaAddColumnsOperator(
        task_id="add_columns", table=TABLE, columns={"words": "geneva_provider.examples:word_count"})
    add_columns >> backfill_task_group("backfill_words", TABLE, "words")
