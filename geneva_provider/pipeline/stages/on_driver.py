"""Small work on the driver: a stage's tasks run in this process when a Spark job would cost more than the work.

On a warm ``local[2]`` session a Spark job costs ~0.1 to 0.3 s before any row is computed (scheduling, the
closure and tasks serialized and shipped, the Python workers' round trips), which measured (issue 44) as most
of an incremental backfill of a cheap UDF: the work itself -- 100,000 rows of ``x * 2`` -- takes ~0.03 s.
So two stages hand small work to the :class:`~geneva_provider.pipeline.spark.in_process.InProcessRunner`, the
very runner the tests use, which runs the same tasks, pickled the same way, one after another here:

* **apply**, when the session is a classic *local* one (the driver is on the machine the workers are on, with
  the same Python and packages), no UDF asks for resources (GPUs, cores, memory: the driver gives none), and
  computing the rows on the driver, one task after another, costs less than on Spark: ``(rows x cost a row +
  fragment parts x PART_SECONDS) x (1 - 1 / slots) <= SPARK_JOB_SECONDS`` (what Spark's slots would save is less
  than a job's fixed cost; at ~0.5 us a row of ``x * 2`` and 2 slots, up to ~1.2 million rows in a few fragments,
  not 100,000 rows in 1,000 fragments, whose files cost more than their rows).  The cost of a row is what the
  column's last apply measured (kept in its ledger,
  :func:`~geneva_provider.pipeline.stages.planning.record_row_seconds`), or on a column never measured, what the
  same UDF (name and version) last cost in this process on another table (a warm notebook's next table).  A UDF
  never measured runs on Spark: an unknown UDF may be a model, and its first apply checkpoints as Spark's
  workers judge worth it (what a later job after a drop and re-add of the same UDF reuses).
* **write+commit's writers** (fragments whose rows were computed in several tasks, written from their
  checkpoints), when the files to write hold at most :data:`DRIVER_WRITE_BYTES` (estimated from the output
  columns' types): their cost is reading checkpoints and writing a column file, whatever the UDF, and the
  driver commits them anyway.

Everything else stays as on Spark: the same checkpoints, staged files and commits, so a job killed here resumes
from what it left like any other.  A job cancelled (``db.cancel_job``) while its small work runs here stops once
that work ends (well under a second of computing); its next stage is not run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from geneva_provider.pipeline.spark.in_process import InProcessRunner
from geneva_provider.pipeline.spark.runner import is_connect
from geneva_provider.pipeline.spark.task_runner import SparkRunner
from geneva_provider.pipeline.stages.checkpoint_sizing import job_sizer

if TYPE_CHECKING:
    import pyarrow as pa

    from geneva_provider.core.contracts.models import JobPlan
    from geneva_provider.pipeline.spark.task_runner import TaskRunner

log = logging.getLogger(__name__)

# What a Spark job costs a warm local[2] session before its rows (measured for issue 44: ~0.1 to 0.3 s).  An apply
# runs on the driver while computing its rows there costs less than this plus their share of Spark's slots.
SPARK_JOB_SECONDS = 0.3
# What a fragment part costs an apply beyond its rows (opening it, its column file or checkpoint, its staged entry):
# 1,000 fragments of 100 rows of a cheap UDF took 1.8 s on the driver, where Spark's two slots share them.
PART_SECONDS = 0.002
DRIVER_WRITE_BYTES = 16 * 2**20  # column files of at most this many bytes are written on the driver
VARIABLE_WIDTH_BYTES = 256  # what a value of a variable-width type (string, list, binary) is counted as


def local_session(runner: TaskRunner) -> bool:
    """True for a classic Spark session whose master is ``local[...]``: its workers run on this machine."""
    if not isinstance(runner, SparkRunner) or is_connect(runner.spark):
        return False
    return str(runner.spark.sparkContext.master).startswith("local")


def apply_runner(runner: TaskRunner, plan: JobPlan, measured: Callable[[], float | None]) -> TaskRunner:
    """The runner of the plan's apply: the driver for a measured cheap column on a local session, else ``runner``.

    ``measured()``: what a row of the column last cost (None: never measured), asked only on a local session.
    """
    if plan.resource_asks or not local_session(runner):
        return runner
    row_seconds = measured()
    if row_seconds is None:
        return runner
    slots = runner.parallelism()
    parts = sum(len(t.parts) for t in plan.tasks)  # fragments (or fragment parts) the tasks open and write
    estimate = plan.rows_to_compute * row_seconds + parts * PART_SECONDS
    # The driver computes the rows one task after another (``estimate``); Spark spreads them over its slots but
    # first pays a job's fixed cost: the driver wins while what the slots would save is less than that cost.
    if estimate * (1 - 1 / max(slots, 1)) > SPARK_JOB_SECONDS:
        return runner
    log.info("apply %s: %d rows at the %.2g s a row measured before (~%.3f s): computed on the driver, cheaper "
             "than a Spark job", plan.job_id, plan.rows_to_compute, row_seconds, estimate)
    job_sizer(plan.job_id, plan.settings).assume(row_seconds)  # the driver's tasks start at the measured speed
    return InProcessRunner(slots)


def write_runner(runner: TaskRunner, plan: JobPlan, rows: int, schema: pa.Schema) -> TaskRunner:
    """The runner of write+commit's writers for ``rows`` rows of the outputs (``schema``): the driver when small."""
    if isinstance(runner, InProcessRunner) or not rows:
        return runner
    size = write_bytes(plan, rows, schema)
    if size > DRIVER_WRITE_BYTES:
        return runner
    log.info("write %s: %d rows (~%d KiB) to write from checkpoints: written on the driver, cheaper than a Spark "
             "job", plan.job_id, rows, size // 1024)
    return InProcessRunner(runner.parallelism())


def write_bytes(plan: JobPlan, rows: int, schema: pa.Schema) -> int:
    """About how many bytes the column files of ``rows`` rows of the plan's outputs (types from ``schema``) hold."""
    return rows * sum(value_bytes(schema.field(c).type) for c in plan.output_columns)


def value_bytes(t: pa.DataType) -> int:
    """About how many bytes a value of type ``t`` takes (variable widths count :data:`VARIABLE_WIDTH_BYTES`)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(t):
        return t.list_size * value_bytes(t.value_type)
    if pa.types.is_struct(t):
        return sum(value_bytes(t.field(i).type) for i in range(t.num_fields)) or 1
    if pa.types.is_boolean(t):
        return 1
    try:
        return max(t.bit_width // 8, 1)
    except ValueError:  # not fixed width
        return VARIABLE_WIDTH_BYTES
