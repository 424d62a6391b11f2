"""What every executor-side task of a stage is sent: the job (no per-fragment plan) and how to reach it.

Pickled once into the Spark closure; the storage options travel only in memory, never in a
stored document, and are left out of the repr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.models import JobPlan, JobSpec, PlanSettings
from geneva_provider.core.store.checkpoint import CheckpointStore, open_store

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


@dataclass(frozen=True)
class StageContext:
    """The job a task belongs to, its resolved settings, its checkpoint store, and the storage options."""

    job: JobSpec
    settings: PlanSettings
    store_uri: str
    storage_options: dict[str, str] | None = field(default=None, repr=False)
    job_id: str | None = None  # names the markers of the UDF calls running (pipeline.worker_deaths)

    @classmethod
    def of(cls, plan: JobPlan, storage_options: dict[str, str] | None) -> StageContext:
        return cls(plan.job(), plan.settings, plan.store_uri, storage_options, plan.job_id)

    def store(self) -> CheckpointStore:
        return open_store(self.store_uri, self.storage_options)

    def dataset(self) -> Dataset:
        """The table at the plan's read version."""
        import lance

        return lance.dataset(self.job.table_uri, version=self.job.read_version, storage_options=self.storage_options)
