"""The registry of the Spark stages: what each runs, the program that submits it, what it returns.

One entry per stage that runs on Spark (apply, write+commit, compact, index).  Everything that used to
repeat a stage's words derives from its entry: the ``spark_apps`` programs (each is one line,
``run_stage(Stage.APPLY)``), the kinds of plan a program accepts, the Airflow operators (their
``stage``, whether the Spark Connect session is kept for the job's next stage, the job-record
counter their progress lines read).  A new job kind's Spark stage is one more entry here.

The stage functions are named by ``module:function`` and imported on first use: the Airflow
surface reads this registry at import time (DAG parsing), where numpy, pyarrow and lance must
not load.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from geneva_provider.core.contracts.index_models import IndexBuildResult
from geneva_provider.core.contracts.kinds import JobKind, Stage
from geneva_provider.core.contracts.models import ApplyResult, CompactionResult, WriteResult
from geneva_provider.pipeline.stages.kinds import kinds_running

# What a Spark stage returns: the results a StageReport carries (a new stage's result joins both unions).
StageResult = ApplyResult | WriteResult | CompactionResult | IndexBuildResult
# A Spark stage's function: (plan URI, SparkSession -- classic or Spark Connect -, storage options) -> its result.
StageFunction = Callable[[str, Any, dict[str, str] | None], StageResult]


@dataclass(frozen=True)
class SparkStage:
    """One stage that runs on Spark, and everything the layers above need to know to run it."""

    name: Stage
    function_path: str  # "module:function" of the pipeline function that runs the stage
    result: type[StageResult]  # the model the function returns (a StageReport's ``result``)
    keeps_session: bool = False  # over Spark Connect: leave the session open for the job's next Spark stage
    progress_counter: str = "rows_committed"  # the JobRecord field that counts the rows this stage moves forward
    rewrites: bool = False  # it rewrites rows, which land at its one commit (its progress line counts them so)
    builds_segments: bool = False  # its progress is segments finished out of those planned (an index build's)

    @property
    def function(self) -> StageFunction:
        """The pipeline function that runs the stage (imported now, on first use)."""
        module, _, name = self.function_path.partition(":")
        function: StageFunction = getattr(importlib.import_module(module), name)
        return function

    @property
    def plan_kinds(self) -> tuple[JobKind, ...]:
        """The kinds of plan the stage runs (the kinds' registry says which run it); another kind is refused before
        Spark starts."""
        return kinds_running(self.name)

    @property
    def function_name(self) -> str:
        """The function's name, as :mod:`geneva_provider.stages` exports it."""
        return self.function_path.partition(":")[2]

    @property
    def program(self) -> str:
        """The name of the ``spark_apps`` program that runs the stage under spark-submit."""
        return self.name.value


SPARK_STAGES: dict[Stage, SparkStage] = {entry.name: entry for entry in (
    SparkStage(Stage.APPLY, "geneva_provider.pipeline.stages.apply:run_apply", ApplyResult,
               keeps_session=True,  # write+commit reuses its warm Python workers
               progress_counter="rows_checkpointed"),
    SparkStage(Stage.WRITE_COMMIT, "geneva_provider.pipeline.stages.write:run_write_commit", WriteResult),
    SparkStage(Stage.COMPACT, "geneva_provider.pipeline.maintenance.compaction:run_compaction", CompactionResult,
               rewrites=True),
    SparkStage(Stage.INDEX, "geneva_provider.pipeline.indexes.kind:run_index", IndexBuildResult,
               progress_counter="rows_checkpointed",  # the rows of the segments finished so far
               builds_segments=True),
)}


def spark_stage(name: str) -> SparkStage:
    """The registry entry of the Spark stage ``name`` (a :class:`Stage` or its word)."""
    try:
        return SPARK_STAGES[Stage(name)]
    except (ValueError, KeyError):
        raise KeyError(f"no Spark stage named '{name}'; the Spark stages are {', '.join(SPARK_STAGES)}") from None
