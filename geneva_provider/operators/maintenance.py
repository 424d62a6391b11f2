"""Maintenance operators: distributed compaction (plan, then rewrite on Spark), checkpoint and old-version clean-up.

Compaction never touches fragments that a live backfill or refresh of the table still has to
commit (their plans in the checkpoint store are the lock), and costs no recompute afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.contracts.options import parse_count, rendered_later
from geneva_provider.core.docstrings import inherit_params
from geneva_provider.hooks.errors import fails_without_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.openlineage import LineageMixin
from geneva_provider.operators._common import duration, reject_unknown_kwargs, with_retry_policy
from geneva_provider.operators.links import GenevaJobLink, push_job_link
from geneva_provider.operators.spark import _GenevaSparkStageOperator


class GenevaPlanCompactionOperator(LineageMixin, BaseOperator):
    """Plans a compaction of a table on the Airflow worker; returns the plan summary for XCom.

    :param table: the table to compact (templated)
    :param target_rows_per_fragment: rows per fragment after compaction (templated)
    :param options: further ``lance.optimize.CompactionOptions`` (``materialize_deletions``, ...), and the
        commit's ``commit_retries`` / ``commit_timeout``.
    :param exclude_live_jobs: leave alone fragments that live backfills and refreshes still have to commit.
    :param release_index_segments: first drop the small segments index refreshes left (two or more, smaller than
        the target), which would keep the compaction from coalescing their fragments -- for a compaction followed
        by its index stage (``compaction_task_group`` does both), which indexes again what the compaction made of
        them; until then those rows are searched by a flat scan, answers unchanged.
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    """

    template_fields: Sequence[str] = ("table", "target_rows_per_fragment")
    ui_color = "#f0e8f8"
    operator_extra_links = (GenevaJobLink(),)

    def __init__(self, *, table: str, target_rows_per_fragment: int | None = None,
                 options: dict[str, Any] | None = None, exclude_live_jobs: bool = True,
                 release_index_segments: bool = False, lance_conn_id: str = LanceHook.default_conn_name,
                 **kwargs: Any) -> None:
        reject_unknown_kwargs(type(self), kwargs)  # like the plan operators: not Airflow's generic TypeError
        if not rendered_later(target_rows_per_fragment):
            parse_count(target_rows_per_fragment, "target_rows_per_fragment", f"compaction of table {table!r}")
        super().__init__(**with_retry_policy(kwargs))
        self.table = table
        self.target_rows_per_fragment = target_rows_per_fragment
        self.options = options or {}
        self.exclude_live_jobs = exclude_live_jobs
        self.release_index_segments = release_index_segments
        self.lance_conn_id = lance_conn_id

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.pipeline.jobs import plan_compaction_keeping_indexes

        options = dict(self.options)
        target = parse_count(self.target_rows_per_fragment, "target_rows_per_fragment",
                             f"compaction of table '{self.table}'")
        if target is not None:
            options["target_rows_per_fragment"] = target
        tbl = LanceHook(self.lance_conn_id).open_table(self.table)
        self._summary = summary = plan_compaction_keeping_indexes(
            tbl.ref, options, store=tbl.checkpoint_store, exclude_live_jobs=self.exclude_live_jobs,
            airflow_run_id=context.get("run_id"), release_index_segments=self.release_index_segments)
        self.log.info("Compaction plan %s for table '%s': %s", summary.job_id, self.table, summary.describe())
        push_job_link(context, summary.job_id, summary.table, self.lance_conn_id)
        return summary.to_xcom()


class GenevaSparkCompactOperator(_GenevaSparkStageOperator):
    """Runs a compaction plan on Spark: one Spark task per rewrite, one commit; skipped when nothing to compact."""

    stage = Stage.COMPACT


class _GenevaTableCleanupOperator(LineageMixin, BaseOperator):
    """A clean-up of one table of things older than ``older_than``.

    :param table: table name in the Lance database (templated)
    :param older_than: a ``timedelta``, a number of seconds, an ISO-8601 duration (``"P7D"``, ``"PT12H"``)
        or a phrase such as ``"7 days"`` / ``"1 day 12 hours"``; never negative (default 7 days) (templated)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    """

    template_fields: Sequence[str] = ("table", "older_than")
    ui_color = "#f0e8f8"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__doc__ = inherit_params(cls.__doc__, _GenevaTableCleanupOperator.__doc__)

    def __init__(self, *, table: str, older_than: timedelta | float | str = timedelta(days=7),
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        if isinstance(older_than, (timedelta, int, float)) or (isinstance(older_than, str) and "{{" not in older_than):
            duration(older_than, "older_than", self._job(table))  # templates and XComArgs: once rendered
        super().__init__(**with_retry_policy(kwargs))
        self.table = table
        self.older_than = older_than
        self.lance_conn_id = lance_conn_id

    def _job(self, table: str) -> str:
        return f"{type(self).__name__} of table '{table}'"

    def older_than_delta(self) -> timedelta:
        """The rendered ``older_than`` as a validated timedelta."""
        return duration(self.older_than, "older_than", self._job(self.table))


class GenevaCleanupOldVersionsOperator(_GenevaTableCleanupOperator):
    """Removes table versions older than ``older_than`` and the files only they referenced (Lance's clean-up).

    Never ``delete_unverified``: files a running job has staged but not committed yet are kept.
    """

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        stats = LanceHook(self.lance_conn_id).dataset(self.table).cleanup_old_versions(
            older_than=self.older_than_delta())
        result = {"table": self.table, "old_versions": stats.old_versions, "bytes_removed": stats.bytes_removed}
        self.log.info("Cleaned up table '%s': %d old versions, %d bytes removed", self.table, stats.old_versions,
                      stats.bytes_removed)
        return result


class GenevaCleanupCheckpointsOperator(_GenevaTableCleanupOperator):
    """Removes checkpoints and plans no live job needs and no future job can use (``Table.cleanup_checkpoints``).

    Never those of a running job: a clean-up may run beside backfills.
    """

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        older_than = self.older_than_delta()
        result = LanceHook(self.lance_conn_id).open_table(self.table).cleanup_checkpoints(older_than=older_than)
        self.log.info("Checkpoint clean-up of table '%s': removed %s; kept %d keys of live jobs", self.table,
                      result.removed or "nothing", result.kept_for_live_jobs)
        return {"table": self.table, "removed": result.removed, "kept_for_live_jobs": result.kept_for_live_jobs}
