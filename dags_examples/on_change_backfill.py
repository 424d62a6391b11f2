"""Backfill on change: an Airflow DAG scheduled on a *watched* table backfills its UDF column after each
write made outside Airflow (an ingester, a notebook, another team's job) -- no cron, no ingest DAG.

``geneva_on_change_backfill`` is scheduled on ``lance_table_asset("comments")``: an Asset with a watcher whose
trigger runs in the triggerer, looks at the table's version every ``poll_interval`` seconds and emits an
asset event for each change that moves rows (append, delete, update, merge_insert, overwrite).  The package's
own commits -- this DAG's column writes among them -- are left out, so a run never starts another.  Each run
backfills exactly the rows that lack ``words`` (the rows appended since the run before).  The same DAG in one
line: ``table_change_dag("comments", columns=["words"], views=[])`` (geneva_provider.task_groups).

Set up (once; running it again changes nothing): ``python dags_examples/on_change_backfill.py`` makes the
table ``comments`` (``id``, ``x``, ``text``) with the UDF column ``words`` of
``geneva_provider.examples:word_count`` in the ``lance_default`` connection's database, if missing
(``geneva_provider.examples.setup_comments``).  Then, with a scheduler and a triggerer running, any write
starts the DAG, e.g. from a plain Python process::

    import geneva_provider as gp
    from geneva_provider.examples import sample

    db = gp.connect("/path/to/lake")  # the lance_default connection's database
    db.open_table("comments").add(sample(1_000, start=0))

The file opens no table when parsed: the DAG parses before the table exists (the watcher waits for it).
Connections: ``lance_default`` (host = database directory or URI) and ``spark_default``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.assets import lance_table_asset
from geneva_provider.task_groups import backfill_task_group

TABLE = "comments"

with DAG(
    dag_id="geneva_on_change_backfill",
    schedule=[lance_table_asset(TABLE, poll_interval=10.0)],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # runs queue behind one another; each one's plan picks up what the one before left
    tags=["geneva", "example", "on-change"],
):
    backfill_task_group("backfill_words", TABLE, "words")


if __name__ == "__main__":
    from geneva_provider.examples import setup_comments
    from geneva_provider.hooks.lance import LanceHook

    print(setup_comments(LanceHook().database).schema)
