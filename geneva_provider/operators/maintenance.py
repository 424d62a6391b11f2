"""Maintenance operators: distributed compaction (plan, then rewrite on Spark), checkpoint and old-version clean-up.

Compaction never touches fragments that a live backfill or refresh of the table still has to
commit (their plans in the checkpoint store are the lock), and costs no recompute afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.spark import _GenevaSparkStageOperator


class GenevaPlanCompactionOperator(BaseOperator):
    """Plans a compaction of a table on the Airflow worker; returns the plan summary for XCom.

    :param table: the table to compact.
    :param target_rows_per_fragment: rows per fragment after compaction.
    :param options: further ``lance.optimize.CompactionOptions`` (``materialize_deletions``, ...).
    :param exclude_live_jobs: leave alone fragments that live backfills and refreshes still have to commit.
    """

    template_fields: Sequence[str] = ("table", "target_rows_per_fragment")
    ui_color = "#f0e8f8"

    def __init__(self, *, table: str, target_rows_per_fragment: int | None = None,
                 options: dict[str, Any] | None = None, exclude_live_jobs: bool = True,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.target_rows_per_fragment = target_rows_per_fragment
        self.options = options or {}
        self.exclude_live_jobs = exclude_live_jobs
        self.lance_conn_id = lance_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.pipeline.compaction import plan_compaction

        options = dict(self.options)
        if self.target_rows_per_fragment not in (None, "", "None"):
            options["target_rows_per_fragment"] = int(self.target_rows_per_fragment)
        tbl = LanceHook(self.lance_conn_id).open_table(self.table)
        summary = plan_compaction(tbl.ref, options, store=tbl.checkpoint_store,
                                  exclude_live_jobs=self.exclude_live_jobs, airflow_run_id=context.get("run_id"))
        self.log.info("Compaction plan %s for table '%s': %d rewrite tasks over %d fragments", summary.job_id,
                      self.table, summary.tasks, summary.fragments_to_compute)
        return summary.to_xcom()


class GenevaSparkCompactOperator(_GenevaSparkStageOperator):
    """Runs a compaction plan on Spark: one Spark task per rewrite, one commit; skipped when nothing to compact."""

    stage = "compact"


class _GenevaTableCleanupOperator(BaseOperator):
    """A clean-up of one table of things older than ``older_than``."""

    template_fields: Sequence[str] = ("table",)
    ui_color = "#f0e8f8"

    def __init__(self, *, table: str, older_than: timedelta = timedelta(days=7),
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.older_than = older_than
        self.lance_conn_id = lance_conn_id


class GenevaCleanupOldVersionsOperator(_GenevaTableCleanupOperator):
    """Removes table versions older than ``older_than`` and the files only they referenced (Lance's clean-up).

    Never ``delete_unverified``: files a running job has staged but not committed yet are kept.
    """

    def execute(self, context: Any) -> dict[str, Any]:
        stats = LanceHook(self.lance_conn_id).dataset(self.table).cleanup_old_versions(older_than=self.older_than)
        result = {"table": self.table, "old_versions": stats.old_versions, "bytes_removed": stats.bytes_removed}
        self.log.info("Cleaned up table '%s': %d old versions, %d bytes removed", self.table, stats.old_versions,
                      stats.bytes_removed)
        return result


class GenevaCleanupCheckpointsOperator(_GenevaTableCleanupOperator):
    """Removes checkpoints and plans no live job needs and no future job can use (``Table.cleanup_checkpoints``).

    Never those of a running job: a clean-up may run beside backfills.
    """

    def execute(self, context: Any) -> dict[str, Any]:
        result = LanceHook(self.lance_conn_id).open_table(self.table).cleanup_checkpoints(older_than=self.older_than)
        self.log.info("Checkpoint clean-up of table '%s': removed %s; kept %d keys of live jobs", self.table,
                      result.removed or "nothing", result.kept_for_live_jobs)
        return {"table": self.table, "removed": result.removed, "kept_for_live_jobs": result.kept_for_live_jobs}
