"""Indexes kept fresh: the index stage a job runs after its commit (pipeline).

A backfill of an indexed column un-indexes the fragments it rewrote, a view's refresh adds and rewrites
fragments, a compaction's remap may leave fragments uncovered (lance.md §13).  After such a commit the job
refreshes the indexes it touched with :func:`refresh_indexes`: each indexes add-only the fragments no segment
covers, with the index's saved artifacts (:func:`~geneva_provider.pipeline.indexes.refresh_index`) --
never retraining unless asked (``retrain=True``) or the new rows drifted from the training
(:mod:`.drift`), never Lance's default ``optimize_indices()``.  An index with nothing to index costs no Spark
job and no commit; one the package did not build (no saved artifacts) is left as it is, with a warning saying
how to adopt it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.index_models import IndexArtifacts, IndexBuildResult, IndexRefresh
from geneva_provider.core.store.layout import IndexRecords
from geneva_provider.pipeline.indexes.build import MIN_GROUP_ROWS
from geneva_provider.pipeline.indexes.checks import field_id_of
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


def view_refresh_indexes(ds: Dataset) -> list[str]:
    """The indexes a view's refresh writes the columns of: every index of the view but those on a UDF column put on
    it with ``add_columns`` (not the query's own UDF columns, which the refresh computes) -- such a column is NULL
    in new rows until its backfill, whose own index stage refreshes its index."""
    from geneva_provider.core.views.meta import added_udf_columns

    added = added_udf_columns(ds.schema)
    return sorted(d.name for d in ds.describe_indices() if not added & set(d.field_names))


def job_indexes(ds: Dataset, column: str | None) -> list[str]:
    """The indexes a job's index stage refreshes: those on the columns a backfill of ``column`` writes (every
    column of its multi-output group), or those a view's refresh writes the columns of (``column`` None:
    :func:`view_refresh_indexes`)."""
    from geneva_provider.core.functions.udf import computed_with

    return view_refresh_indexes(ds) if column is None else indexes_on(ds, computed_with(ds.schema, column))


@dataclass(frozen=True)
class DueRefresh:
    """One index with fragments to index (or to retrain): the store holding its saved artifacts, and the request
    (whose plan measures the new rows' drift and retrains past the rule's factor, :mod:`.drift`)."""

    store: CheckpointStore
    request: IndexRefresh


def due_refreshes(table: TableRef, names: Sequence[str], store: CheckpointStore | None = None, *,
                  retrain: bool = False) -> Iterator[DueRefresh]:
    """The refresh each index of ``names`` needs now, one at a time (each read at the table's latest version, after
    the one before committed): none for an index dropped meanwhile, covering every fragment, or not built by this
    package (a warning says how to adopt it); a retrain when asked (the refresh's plan retrains too when the new
    rows drifted past :data:`~geneva_provider.pipeline.indexes.drift.DRIFT_RETRAIN_FACTOR`).  The artifacts are
    looked up in ``store``, then in the table's own checkpoint store."""
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
        yield DueRefresh(found[0], IndexRefresh.of(name, retrain))


def refresh_indexes(table: TableRef, names: Sequence[str], spark: Compute | Callable[[], Compute],
                    store: CheckpointStore | None = None, *, retrain: bool = False) -> list[IndexBuildResult]:
    """Refreshes each index of ``names`` on ``table`` add-only with its saved artifacts (:func:`due_refreshes`:
    retrained when asked or drifted); returns what each refresh that indexed something (or retrained) did.

    ``spark`` is a session or task runner, or a function giving one, called only when an index has fragments to
    index.
    """
    from geneva_provider.pipeline import indexes  # the package's refresh_index, wherever the engine defines it

    results: list[IndexBuildResult] = []
    compute: Compute | None = None
    for due in due_refreshes(table, names, store, retrain=retrain):
        if compute is None:
            compute = _compute(spark)
        results.append(indexes.refresh_index(table, due.request.index_name, compute, store=due.store,
                                             retrain=due.request.retrain))
    return results


def plan_refreshes(table: TableRef, names: Sequence[str], store: CheckpointStore | None = None, *,
                   airflow_run_id: str | None = None) -> list[PlanSummary]:
    """The plans of the refreshes :func:`due_refreshes` finds, each stored like any index job's, for an index stage
    run elsewhere (Airflow's Spark index task, one per plan); none when no index has anything to index."""
    from geneva_provider.pipeline import indexes  # the package's plan_index, wherever the engine defines it

    return [indexes.plan_index(table, due.request, store=due.store, airflow_run_id=airflow_run_id)
            for due in due_refreshes(table, names, store)]


def release_delta_segments(table: TableRef, target_rows: int, store: CheckpointStore | None = None) -> list[str]:
    """Before a compaction: drops the small segments that would keep it from coalescing small fragments.

    Lance compacts only fragments covered by the identical set of segments (lance.md §13), so fragments each
    indexed by a refresh of their own -- one small segment each -- are never compacted.  Of each index the
    package built (saved artifacts), the delta segments -- over fewer rows than the compaction's
    ``target_rows_per_fragment`` and than a build's smallest group (``MIN_GROUP_ROWS``, 1,000: what the refresh
    of a few small appended fragments makes; a build's segments are bigger, and so is a refresh whose fragments
    compact among themselves) -- are dropped when there are two or more of them, never the index's largest
    segment.  Their fragments are then unindexed (searched by a flat
    scan, answers unchanged) until the compaction's remap check indexes what the compaction made of them,
    add-only with the saved artifacts.  One commit per index, through the committer (watchers ignore it).
    Returns the names of the indexes whose segments were dropped.
    """
    released = []
    for name in indexes_on(table.dataset()):
        if _saved(table, name, store) is not None and _drop_deltas(table, name, target_rows):
            released.append(name)
    return released


def _deltas(ds: Dataset, name: str, target_rows: int) -> list[Any]:
    """The segments of index ``name`` a compaction to ``target_rows`` rows would be blocked by (see above)."""
    rows = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
    segments = index_segments(ds, name)
    size = {s["uuid"]: sum(rows.get(int(f), 0) for f in s["fragment_ids"]) for s in segments}
    largest = max(segments, key=lambda s: size[s["uuid"]])["uuid"] if segments else None
    small = [s for s in segments if size[s["uuid"]] < min(target_rows, MIN_GROUP_ROWS) and s["uuid"] != largest]
    return small if len(small) >= 2 else []


def _drop_deltas(table: TableRef, name: str, target_rows: int) -> bool:
    import lance
    from lance.dataset import Index

    from geneva_provider.pipeline.committer import OWN_COMMIT_PREFIX, Attempt, commit, commit_messages

    ds = table.dataset()
    if not _deltas(ds, name, target_rows):
        return False
    message = f"{OWN_COMMIT_PREFIX}index {name} small segments dropped for a compaction at version {ds.version}"

    def landed(latest: Dataset) -> bool | None:
        return True if message in commit_messages(latest, ds.version) else None

    def apply(attempt: Attempt) -> bool:
        latest = attempt.latest or ds
        dropped = _deltas(latest, name, target_rows)
        if not dropped:
            return False
        ids = {s["uuid"]: [field_id_of(latest, c, table.name) for c in s["fields"]] for s in dropped}
        removed = [Index(uuid=s["uuid"], name=s["name"], fields=ids[s["uuid"]], dataset_version=s["version"],
                         fragment_ids=s["fragment_ids"], index_version=0) for s in dropped]
        lance.LanceDataset.commit(table.uri, lance.LanceOperation.CreateIndex(new_indices=[], removed_indices=removed),
                                  read_version=latest.version, commit_message=message,
                                  storage_options=table.storage_options)
        log.info("index '%s' of table '%s': %d small segments dropped so that a compaction can coalesce their "
                 "fragments; the compaction's remap check indexes them again", name, table.name, len(dropped))
        return True

    return commit(table, f"drop of small segments of index '{name}'", apply, landed=landed, reapplies=True).value


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
