"""A submitted Spark stage, by its ids only, and the report it leaves in the job's checkpoint store.

A Spark stage, however it runs (a ``spark_apps`` program under spark-submit, or the stage's
function over Spark Connect), ends by leaving its :class:`~geneva_provider.core.contracts.models.StageReport`
beside the plan, under :class:`~geneva_provider.core.store.layout.StageResultKey`.  So whoever waits
for the stage -- the operator that submitted it, a retry, or a trigger that holds nothing but these
ids -- learns its result from the store, not from the process that ran it.  A submission is plain
JSON (no credentials: the store is opened with the Lance connection's options by whoever reads).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from geneva_provider.core.contracts.kinds import EventStatus, Stage

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import StageReport


class StageSubmission(BaseModel):
    """The ids of one submitted stage of a plan: enough to find its report again, from any process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str
    stage: Stage
    plan_uri: str

    @classmethod
    def of(cls, stage: Stage, plan_uri: str) -> StageSubmission:
        from geneva_provider.core.store.checkpoint import split_key_uri
        from geneva_provider.core.store.layout import PlanKey

        return cls(job_id=PlanKey.of(split_key_uri(plan_uri)[1]).job_id, stage=stage, plan_uri=plan_uri)

    @property
    def result_key(self) -> str:
        """Where the stage leaves its report (the spark-submit programs' ``--result-key``)."""
        from geneva_provider.core.store.layout import StageResultKey

        return StageResultKey(self.job_id, self.stage).key()

    def clear(self, store: Any) -> None:
        """Forgets an earlier attempt's report, before this one starts (a retry must not read it)."""
        store.delete(self.result_key)

    def done(self, store: Any) -> bool:
        """Whether the stage has ended: its report is in the store (one cheap look, for a poll)."""
        return self.result_key in store

    def report(self, store: Any) -> StageReport | None:
        """The stage's report (None while it runs, or when it ended without leaving one)."""
        from geneva_provider.core.contracts.models import StageReport

        return store.get_model(self.result_key, StageReport) if self.done(store) else None

    def leave(self, store: Any, report: StageReport) -> None:
        """Leaves the stage's report in the store (what a stage that runs in this process does as it ends)."""
        store.put_model(self.result_key, report)

    # ------------------------------------------------------------ a stage run in a process of its own
    @property
    def lease_key(self) -> str:
        """Where the process that runs the stage keeps its lease (:class:`StageLease`)."""
        from geneva_provider.core.store.layout import StageLeaseKey

        return StageLeaseKey(self.job_id, self.stage).key()

    def lease(self, store: Any) -> StageLease | None:
        """The lease of whoever runs the stage in a process of its own (None: no one ever did, or it ended)."""
        if self.lease_key not in store:
            return None
        try:
            return StageLease.model_validate_json(store.get_text(self.lease_key))
        except (ValueError, KeyError, OSError):  # half-written or just released: as good as none
            return None

    def hold(self, store: Any, lease: StageLease) -> None:
        """Takes or renews the lease (the runner every ``LEASE_RENEW_SECONDS``)."""
        store.put_text(self.lease_key, lease.model_dump_json())

    def stop(self, store: Any) -> None:
        """Stops whoever runs the stage in a process of its own, from any process on any host: the lease is
        revoked (its runner sees that within ``LEASE_CHECK_SECONDS`` and interrupts the stage's Spark work), and a
        runner on this host is sent SIGTERM as well.  The stage then leaves a failed report."""
        import os
        import signal
        import socket

        lease = self.lease(store)
        self.hold(store, StageLease(owner="revoked", host="", pid=0, renewed=0.0))
        if lease is not None and lease.pid and lease.host == socket.gethostname():
            try:
                os.kill(lease.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def release(self, store: Any) -> None:
        """Gives the lease up (the stage has ended and its report is in the store)."""
        store.delete(self.lease_key)

    def status(self, store: Any, now: float | None = None) -> RunStatus:
        """Where the stage stands, from the store alone (a retry, a trigger): ended (succeeded / failed), running
        (a lease renewed within ``LEASE_SECONDS``), lost (a lease no one renews: its process died) or none."""
        report = self.report(store)
        if report is not None:
            return RunStatus.SUCCEEDED if report.status == EventStatus.SUCCESS else RunStatus.FAILED
        lease = self.lease(store)
        if lease is None:
            return RunStatus.NONE
        return RunStatus.RUNNING if lease.alive(now) else RunStatus.LOST


LEASE_SECONDS = 60.0  # a lease not renewed for this long belongs to a process that died
LEASE_RENEW_SECONDS = 5.0
LEASE_CHECK_SECONDS = 1.0  # how often a runner looks whether its lease was revoked or taken over


class RunStatus(StrEnum):
    """Where a submitted stage stands, as :meth:`StageSubmission.status` reads it from the store."""

    NONE = "none"  # never started in a process of its own, or its lease was released without a report
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"  # its process died before it left a report


class StageLease(BaseModel):
    """Who runs a stage in a process of its own: an owner token, where (host, pid) and when it last said so.

    Holds no credentials.  Renewed every ``LEASE_RENEW_SECONDS``; stale after ``LEASE_SECONDS``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str
    host: str
    pid: int
    renewed: float  # seconds since the epoch
    seconds: float = LEASE_SECONDS

    @classmethod
    def now(cls, owner: str, pid: int, seconds: float = LEASE_SECONDS) -> StageLease:
        import socket
        import time

        return cls(owner=owner, host=socket.gethostname(), pid=pid, renewed=time.time(), seconds=seconds)

    def alive(self, now: float | None = None) -> bool:
        """Renewed within ``seconds`` -- and, seen from the host it runs on, its process still exists (a runner
        that died is known at once there, not a lease period later)."""
        import os
        import socket
        import time

        if (time.time() if now is None else now) - self.renewed >= self.seconds:
            return False
        if self.pid and self.host == socket.gethostname():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:  # another user's process: it exists
                return True
        return True
