"""The public stage API: the functions the Airflow operators call, one stage per task.

``plan_backfill`` / ``plan_refresh`` take a table reference (``tbl.ref``) and return the
:class:`PlanSummary` (what XCom carries); ``run_apply`` and ``run_write_commit`` take the plan
URI and a SparkSession; ``verify`` checks the result.  ``plan_compaction`` / ``run_compaction`` are
the distributed compaction (plan on the driver, rewrite tasks on Spark, one commit); ``plan_index`` /
``run_index`` an index build (plan and train on the driver, segment tasks on Spark, one commit).
``local_session`` builds the local Spark session the embedded default runs on; an
``InProcessRunner`` runs the stages' tasks in this process instead (tests and quick local checks, no JVM),
wherever a SparkSession is taken.
The Spark stages' functions here are the ones the stage registry
(:mod:`geneva_provider.pipeline.stages.registry`) names: the operators and the spark-submit
programs run them through it.
"""

from __future__ import annotations

from geneva_provider.core.contracts.models import ApplyResult, PlanSummary, VerifyResult, WriteResult
from geneva_provider.core.contracts.options import BackfillOptions, RefreshOptions
from geneva_provider.core.refs import TableRef
from geneva_provider.pipeline.columns.plan_backfill import plan_backfill
from geneva_provider.pipeline.columns.plan_refresh import plan_refresh
from geneva_provider.pipeline.indexes.kind import plan_index, run_index
from geneva_provider.pipeline.maintenance.compaction import plan_compaction, run_compaction
from geneva_provider.pipeline.spark.in_process import InProcessRunner
from geneva_provider.pipeline.spark.runner import local_session
from geneva_provider.pipeline.stages.apply import run_apply
from geneva_provider.pipeline.stages.planning import load_plan
from geneva_provider.pipeline.stages.verify import verify
from geneva_provider.pipeline.stages.write import run_write_commit

__all__ = [
    "ApplyResult",
    "BackfillOptions",
    "InProcessRunner",
    "PlanSummary",
    "RefreshOptions",
    "TableRef",
    "VerifyResult",
    "WriteResult",
    "load_plan",
    "local_session",
    "plan_backfill",
    "plan_compaction",
    "plan_index",
    "plan_refresh",
    "run_apply",
    "run_compaction",
    "run_index",
    "run_write_commit",
    "verify",
]
