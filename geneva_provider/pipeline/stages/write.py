"""Write+commit stage, for every job kind: the checkpoints become table data, committed on the driver.

What is written and how it is committed is the job kind's; here is what every kind shares: a plan
with nothing to do is a no-op, a plan whose apply has not ended is refused before any Spark job
(changing nothing), a plan whose output columns were dropped and re-created since is refused before any
file is written (each commit checks them again), and the kind's work runs inside the stage's record.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.contracts.models import WriteResult
from geneva_provider.core.fragments import data_file_path
from geneva_provider.core.incarnations import check_planned_columns
from geneva_provider.core.store.layout import JobStore
from geneva_provider.pipeline.spark.task_runner import task_runner
from geneva_provider.pipeline.stages.kinds import job_kind
from geneva_provider.pipeline.stages.planning import load_plan
from geneva_provider.pipeline.stages.spark_stage import spark_stage

if TYPE_CHECKING:
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.spark.task_runner import Compute

log = logging.getLogger(__name__)


def run_write_commit(plan_uri: str, spark: Compute, storage_options: dict[str, str] | None = None) -> WriteResult:
    """Write+commit stage: writes what apply checkpointed and commits it; returns what was committed."""
    plan, store = load_plan(plan_uri, storage_options)
    if plan.nothing_to_do:  # an up-to-date table: no Spark job, no commit, no record
        log.info("write %s: nothing to do: %s was up to date at version %d", plan.job_id, plan.label(),
                 plan.read_version)
        return WriteResult(job_id=plan.job_id, version=plan.read_version, fragments_committed=0, rows_committed=0,
                           fragments_vanished=[], commit_retries=0, seconds=0.0)
    kind = job_kind(plan.kind)
    kind.check_applied(plan, store)
    runner = task_runner(spark)
    with spark_stage(plan, store, Stage.WRITE_COMMIT, runner, storage_options):
        check_planned_columns(plan, storage_options, "write+commit")  # before any file is written
        result = kind.write_commit(plan, store, runner, storage_options)
    return with_files_written(plan.table_uri, plan.read_version, result, store, storage_options)


def with_files_written(table_uri: str, read_version: int, result: WriteResult, store: CheckpointStore,
                       storage_options: dict[str, str] | None) -> WriteResult:
    """The result with the data files its commits added (those of ``result.version`` that ``read_version`` did not
    hold) and their size, also in the job's commit record, where verify reads them (lineage's output statistics)."""
    import lance

    def files(version: int) -> dict[str, int]:
        ds = lance.dataset(table_uri, version=version, storage_options=storage_options)
        return {data_file_path(f): f.file_size_bytes or 0 for frag in ds.get_fragments() for f in frag.data_files()}

    before = files(read_version)
    added = {path: size for path, size in files(result.version).items() if path not in before}
    result = result.model_copy(update={"files_written": len(added), "bytes_written": sum(added.values())})
    jobs = JobStore(store)
    record = jobs.committed(result.job_id)
    if record is not None:
        jobs.put_committed(result.job_id, record.model_copy(update={"result": result}))
    return result
