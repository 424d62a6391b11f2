"""The interval between two progress lines of a Spark stage in its task log, as Airflow's config sets it (the lines
themselves: :class:`geneva_provider.stage_runner.progress.ProgressLogger`).
"""

from __future__ import annotations

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.pipeline.stages.progress_lines import PROGRESS_SECONDS


def progress_seconds(value: float | None, who: str) -> float:
    """The interval between two progress lines: ``value``, else ``[geneva] progress_interval``, else 5 s."""
    if value is None:
        from airflow.sdk import conf

        value = conf.getfloat("geneva", "progress_interval", fallback=PROGRESS_SECONDS)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidArgumentError(f"{who}: progress_interval must be a positive number of seconds, got {value!r}")
    return float(value)
