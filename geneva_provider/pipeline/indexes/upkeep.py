"""Indexes kept fresh: the index stage a job runs after its commit (pipeline).

A backfill of an indexed column un-indexes the fragments it rewrote, a view's refresh adds and rewrites
fragments, a compaction's remap may leave fragments uncovered (lance.md §13).  After such a commit the job
refreshes the indexes it touched with :func:`refresh_indexes`: each indexes add-only the fragments no segment
covers, with the index's saved artifacts (:func:`~geneva_provider.pipeline.indexes.build.refresh_index`) --
never retraining unless asked (``retrain=True``) or the new rows drifted from the training
(:mod:`.drift`), never Lance's default ``optimize_indices()``.  An index with nothing to index costs no Spark
job and no commit; one the package did not build (no saved artifacts) is left as it is, with a warning saying
how to adopt it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.index_models import IndexArtifacts, IndexBuildResult, IndexRefresh
from geneva_provider.core.store.layout import IndexRecords
from geneva_provider.pipeline.indexes.drift import DRIFT_RETRAIN_FACTOR, drift
from geneva_provider.pipeline.indexes.kind import plan_index, refresh_index
from geneva_provider.pipeline.indexes.stats import index_segments, unindexed_fragments
from geneva_provider.pipeline.spark.task_runner import is_compute

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.spark.task_runner import Compute

log = logging.getLogger(__name__)


def indexes_on(ds: Dataset, columns: Iterable[str] | None = None) -> list[str]:
    """The names of ``ds``'s indexes on any of ``columns`` (every index: None), sorted."""
    wanted = None if columns is None else set(columns)
    return sorted(d.name for d in ds.describe_indices() if wanted is None or wanted & set(d.field_names))


def job_indexes(ds: Dataset, column: str | None) -> list[str]:
    """The indexes a job's index stage refreshes: those on the columns a backfill of ``column`` writes (every
    column of its multi-output group), or every index of a refreshed view (``column`` None)."""
    from geneva_provider.core.functions.udf import computed_with

    return indexes_on(ds, None if column is None else computed_with(ds.schema, column))


@dataclass(frozen=True)
class DueRefresh:
    """One index with fragments to index (or to retrain): the store holding its saved artifacts, the request,
    and the new rows' drift (None: not measured)."""

    store: CheckpointStore
    request: IndexRefresh
    drift: float | None


def due_refreshes(table: TableRef, names: Sequence[str], store: CheckpointStore | None = None, *,
                  retrain: bool = False) -> Iterator[DueRefresh]:
    """The refresh each index of ``names`` needs now, one at a time (each read at the table's latest version, after
    the one before committed): none for an index dropped meanwhile, covering every fragment, or not built by this
    package (a warning says how to adopt it); a retrain when asked or when the new rows drifted past
    :data:`~geneva_provider.pipeline.indexes.drift.DRIFT_RETRAIN_FACTOR`."""
    for name in names:
        ds = table.dataset()
        if not index_segments(ds, name):
            continue  # dropped meanwhile
        new = unindexed_fragments(ds, name)
        if not new and not retrain:
            continue
        found = _saved(table, name, store)
        if found is None:
            log.warning("index '%s' of table '%s' was not built by this package (no saved artifacts): it is left "
                        "as it is and its %d unindexed fragments are searched by a flat scan; to keep it fresh, "
                        "build it again with create_index(..., name='%s', replace=True)", name, table.name, len(new),
                        name)
            continue
        holder, saved = found
        measured = drift(ds, saved, new) if new else None
        drifted = measured is not None and measured > DRIFT_RETRAIN_FACTOR
        if drifted:
            log.info("index '%s' of table '%s': the new rows' drift %.2f passes %.1f; retraining it", name,
                     table.name, measured, DRIFT_RETRAIN_FACTOR)
        yield DueRefresh(holder, IndexRefresh.of(name, retrain or drifted), measured)


def refresh_indexes(table: TableRef, names: Sequence[str], spark: Compute | Callable[[], Compute],
                    store: CheckpointStore | None = None, *, retrain: bool = False) -> list[IndexBuildResult]:
    """Refreshes each index of ``names`` on ``table`` add-only with its saved artifacts; returns what each
    refresh that indexed something (or retrained) did.

    ``spark`` is a session or task runner, or a function giving one, called only when an index has fragments to
    index.  The artifacts are looked up in ``store``, then in the table's own checkpoint store
    (:func:`due_refreshes`).
    """
    results: list[IndexBuildResult] = []
    compute: Compute | None = None
    for due in due_refreshes(table, names, store, retrain=retrain):
        if compute is None:
            compute = _compute(spark)
        result = refresh_index(table, due.request.index_name, compute, store=due.store, retrain=due.request.retrain)
        results.append(result.model_copy(update={"drift": due.drift}))
    return results


def plan_refreshes(table: TableRef, names: Sequence[str], store: CheckpointStore | None = None, *,
                   airflow_run_id: str | None = None) -> list[PlanSummary]:
    """The plans of the refreshes :func:`due_refreshes` finds, each stored like any index job's, for an index stage
    run elsewhere (Airflow's Spark index task, one per plan); none when no index has anything to index."""
    return [plan_index(table, due.request, store=due.store, airflow_run_id=airflow_run_id)
            for due in due_refreshes(table, names, store)]


def _compute(spark: Compute | Callable[[], Compute]) -> Compute:
    """``spark`` as it is, or what the function ``spark`` gives (a session started only now)."""
    if is_compute(spark) or not callable(spark):
        return spark  # type: ignore[return-value]  # a Compute: is_compute says so
    return spark()


def _saved(table: TableRef, name: str, store: CheckpointStore | None
           ) -> tuple[CheckpointStore, IndexArtifacts] | None:
    """The checkpoint store holding the index's saved artifacts (``store``, else the table's), and them."""
    for candidate in ([store] if store is not None else []) + [table.checkpoint_store()]:
        saved = IndexRecords(candidate, name).artifacts()
        if saved is not None:
            return candidate, saved
    return None
