"""A submitted Spark stage, by its ids only, and the report it leaves in the job's checkpoint store.

A Spark stage, however it runs (a ``spark_apps`` program under spark-submit, or the stage's
function over Spark Connect), ends by leaving its :class:`~geneva_provider.core.contracts.models.StageReport`
beside the plan, under :class:`~geneva_provider.core.store.layout.StageResultKey`.  So whoever waits
for the stage -- the operator that submitted it, a retry, or a trigger that holds nothing but these
ids -- learns its result from the store, not from the process that ran it.  A submission is plain
JSON (no credentials: the store is opened with the Lance connection's options by whoever reads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from geneva_provider.core.contracts.kinds import Stage

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
