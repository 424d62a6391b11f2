"""The trigger a deferred Spark stage waits on: it polls the stage's report in the job's checkpoint store.

A deferrable stage operator starts the stage in a process of its own
(:mod:`geneva_provider.stage_runner.detached`) and defers; this trigger holds only the stage's
ids (job id, stage, plan reference) and the Lance connection id -- never a credential: the
triggerer looks the connection up itself -- so the same kwargs make the same trigger and a
triggerer restart resumes the wait.  It fires once the stage has ended (its report is beside the
plan) or its runner is gone (a lease no one renews); the operator's ``execute_complete`` then
reads the report, as a stage waited for in the task would.  Progress lines go to the trigger's log
while it waits, in the format and at the cadence of a stage waited for in its task
(:mod:`geneva_provider.pipeline.stages.progress_lines`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from geneva_provider.hooks.lance import LanceHook
from geneva_provider.pipeline.stages.progress_lines import PROGRESS_SECONDS, ProgressLines


class GenevaStageTrigger(BaseTrigger):
    """Fires when a Spark stage of a plan, run in a process of its own, has ended (or its process has died).

    The event is ``{"status": "succeeded" | "failed" | "lost" | "none" | "timeout" | "error", "job_id",
    "stage", "plan_uri"}`` (``"error"`` adds a ``message``: the store could not be read).  ``deadline``
    (seconds since the epoch: the task's ``execution_timeout``) stops the stage's runner when it passes
    (its lease is revoked) and fires ``"timeout"``.  ``progress_interval``: seconds between two looks at
    the job record for a progress line.
    """

    def __init__(self, job_id: str, stage: str, plan_uri: str, lance_conn_id: str = LanceHook.default_conn_name,
                 poll_interval: float = 5.0, deadline: float | None = None,
                 progress_interval: float = PROGRESS_SECONDS) -> None:
        super().__init__()
        self.deadline = float(deadline) if deadline is not None else None
        self.job_id = job_id
        self.stage = stage
        self.plan_uri = plan_uri
        self.lance_conn_id = lance_conn_id
        self.poll_interval = float(poll_interval)
        self.progress_interval = float(progress_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"job_id": self.job_id, "stage": self.stage, "plan_uri": self.plan_uri,
                 "lance_conn_id": self.lance_conn_id, "poll_interval": self.poll_interval, "deadline": self.deadline,
                 "progress_interval": self.progress_interval})

    def _ids(self) -> dict[str, str]:
        return {"job_id": self.job_id, "stage": self.stage, "plan_uri": self.plan_uri}

    def _open(self) -> tuple[Any, Any]:
        from geneva_provider.core.store.checkpoint import open_store, split_key_uri
        from geneva_provider.pipeline.stage_reports import StageSubmission

        submission = StageSubmission.model_validate(self._ids())
        return submission, open_store(split_key_uri(self.plan_uri)[0], LanceHook(self.lance_conn_id).storage_options)

    @staticmethod
    def _look(submission: Any, store: Any) -> tuple[str, Any]:
        """The stage's status, and its job record (None without one)."""
        from geneva_provider.pipeline.stages.job_records import read_record

        return str(submission.status(store)), read_record(store, submission.job_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        lines = ProgressLines(self.job_id, self.stage)
        since_line = self.progress_interval  # the first look makes a line
        try:
            submission, store = await asyncio.to_thread(self._open)
            while True:
                status, record = await asyncio.to_thread(self._look, submission, store)
                if status != "running":
                    if record is not None:
                        self.log.info("%s", lines.look(record, final=True))
                    yield TriggerEvent({"status": status, **self._ids()})
                    return
                if record is not None and since_line >= self.progress_interval:
                    since_line = 0.0
                    line = lines.look(record)
                    if line is not None:
                        self.log.info("%s", line)
                remaining = self.deadline - time.time() if self.deadline is not None else None
                if remaining is not None and remaining <= 0:  # the task's execution_timeout: stop the stage too
                    await asyncio.to_thread(submission.stop, store)
                    yield TriggerEvent({"status": "timeout", **self._ids()})
                    return
                wait = self.poll_interval if remaining is None else min(self.poll_interval, remaining)
                await asyncio.sleep(wait)
                since_line += wait
        except Exception as exc:  # noqa: BLE001 - delivered to execute_complete, which fails the task with it
            yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}", **self._ids()})
