"""Table maintenance: compaction on Spark, checkpoint clean-up, then Lance's clean-up of old versions.

``geneva_maintenance`` runs daily.  Compaction plans on the Airflow worker, rewrites fragments on
Spark (one task per rewrite) and commits once; it leaves alone every fragment that a live backfill
or refresh of the table still has to commit, so it never makes running work vanish, and computed
columns stay valid (nothing is recomputed).  Its index stage then indexes, add-only, what the
compaction made of fragments the table's indexes covered (``compaction_task_group``).  To keep
maintenance and backfills from competing for a small cluster, give their tasks the same pool
(``GENEVA_MAINTENANCE_POOL``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from geneva_provider.operators.maintenance import GenevaCleanupCheckpointsOperator, GenevaCleanupOldVersionsOperator
from geneva_provider.task_groups import compaction_task_group

TABLE = "events"
POOL = os.environ.get("GENEVA_MAINTENANCE_POOL", "default_pool")

with DAG(
    dag_id="geneva_maintenance",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"target_rows_per_fragment": Param(1_000_000, type="integer", minimum=1)},
    tags=["geneva", "example"],
):
    compaction = compaction_task_group("compaction", TABLE, pool=POOL, retries=1,
                                       target_rows_per_fragment="{{ params.target_rows_per_fragment }}")
    checkpoints = GenevaCleanupCheckpointsOperator(task_id="cleanup_checkpoints", table=TABLE,
                                                   older_than=timedelta(days=7), trigger_rule="none_failed", pool=POOL)
    versions = GenevaCleanupOldVersionsOperator(task_id="cleanup_old_versions", table=TABLE,
                                                older_than=timedelta(days=7), trigger_rule="none_failed", pool=POOL)
    compaction >> checkpoints >> versions
