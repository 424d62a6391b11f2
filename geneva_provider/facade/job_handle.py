"""A job run in the foreground with its progress shown; :class:`JobHandle` (a job in a background thread) lives in
the front door (:mod:`geneva_provider.operations.background`), which ``submit`` uses too."""

from __future__ import annotations

from collections.abc import Callable

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.contracts.models import BackfillResult, PlanSummary
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.operations.background import JobHandle
from geneva_provider.pipeline.jobs import JobControl

__all__ = ["JobHandle", "with_progress"]


def with_progress(store: CheckpointStore, label: str, run: Callable[[JobControl], BackfillResult],
                  progress: bool | None) -> BackfillResult:
    """Runs a job in the foreground, showing its progress where it runs unless ``progress=False``: a notebook
    widget, a terminal bar, or else log lines (:mod:`geneva_provider.facade.progress`).  Ctrl-C cancels the job
    and ends the call with one ``KeyboardInterrupt`` line (:mod:`geneva_provider.facade.interrupts`)."""
    from geneva_provider.facade.interrupts import cancel_on_interrupt

    control = JobControl()
    with cancel_on_interrupt(control, label) as guard:
        shown = None
        if progress is not False:
            from geneva_provider.facade.progress import JobProgress

            shown = JobProgress(store, label)
            shown.begin()  # a first line at once: the plan reads the table, a Spark session takes seconds

        def planned(summary: PlanSummary) -> None:  # the Spark session is up: it may have taken SIGINT over
            guard.install()
            control.check(Stage.APPLY)  # Ctrl-C while the session started: no apply stage
            if shown is not None:
                shown.attach(summary)

        control.on_plan = planned
        if shown is not None:
            control.on_start = shown.starting
        try:
            result = run(control)
        except BaseException as exc:
            if shown is not None:
                shown.close(error=exc)
            if guard.interrupted:
                raise guard.stopped() from None
            raise
        if shown is not None:
            shown.close(result)
        if guard.interrupted:
            raise guard.stopped(finished=True)
        return result
