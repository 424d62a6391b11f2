"""The engine of an index build or add-only refresh: planned on the driver, segments on Spark tasks, one commit.

:mod:`.kind` makes it a job (its plan document, record, Spark stage and cancel); this module is what that job
does: :func:`plan_build` checks the request and plans the build, :func:`run_build` runs and commits it.

The plan pins one version, cuts the fragments into contiguous row-balanced groups and trains IVF / PQ once
(or reuses the saved artifacts); its id is a digest of the table, version, spec and groups, so a killed
build run again finds its plan and the segments its tasks finished, and builds only the others.  The
segment layout never blocks compaction: PQ, FLAT, scalar and full-text segments are merged into one before
the commit (one shot: a merged segment never merges again), SQ segments never are (each keeps its own
bounds) and are as many as the groups, at most ``max_segments``.  A query's cost grows with an index's
segments (lance#6860), so a refresh that would take an index past ``max_segments`` (default
:data:`DEFAULT_MAX_SEGMENTS`) re-encodes every fragment with the saved artifacts instead (no retraining) and
replaces all the segments.  The commit is one ``CreateIndex`` through the package's committer, its message
starting with ``OWN_COMMIT_PREFIX`` so table watchers ignore it.  Never Lance's default
``optimize_indices()``, which retrains and re-partitions (lance.md §13).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from geneva_provider.core.contracts.index_models import (
    IndexArtifacts,
    IndexBuildPlan,
    IndexBuildResult,
    IndexRefresh,
    IndexSpec,
    IndexType,
    SegmentTaskResult,
)
from geneva_provider.core.errors import CheckpointMissingError, CommitError, InvalidArgumentError
from geneva_provider.core.refs import TableRef
from geneva_provider.core.store.layout import IndexRecords, short_hash
from geneva_provider.pipeline.committer import OWN_COMMIT_PREFIX, Attempt, commit, commit_messages
from geneva_provider.pipeline.indexes.checks import IndexTarget, check_index, field_id_of
from geneva_provider.pipeline.indexes.groups import fragment_groups
from geneva_provider.pipeline.indexes.segments import build_segments
from geneva_provider.pipeline.indexes.stats import index_segments, unindexed_fragments
from geneva_provider.pipeline.indexes.training import train_artifacts

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.pipeline.spark.task_runner import TaskRunner

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_SEGMENTS = 32  # segments one index may have; a query searches each one
# Rows below which a fragment group is not worth a task and a segment of its own: a refresh of a few small
# appended fragments makes one segment over them all (so compaction can coalesce them), not one per core.
MIN_GROUP_ROWS = 1_000
# How many times a build whose fragments another writer rewrote (a compaction) while its tasks ran is planned
# and run again at the latest version before it gives up (its segments then index fragments that are gone).
REBUILDS = 2


class Stale(Exception):
    """The fragments a build indexed were rewritten since its pinned version: its segments cannot be committed."""

    def __init__(self, fragments: list[int]) -> None:
        super().__init__(f"fragments {fragments} were rewritten")
        self.fragments = fragments


def rebuilding(table: TableRef, name: str, once: Callable[[int], T]) -> T:
    """``once(attempt)``, planned and run again at the latest version when another writer (a compaction) rewrote
    the fragments it indexed meanwhile -- at most :data:`REBUILDS` times; nothing half-committed either way."""
    for attempt in range(REBUILDS + 1):
        try:
            return once(attempt)
        except Stale as stale:
            log.warning("index '%s' of table '%s': %s by another writer while its segments were built; building "
                        "them again at the latest version (attempt %d)", name, table.name, stale, attempt + 2)
            last = stale
    raise CommitError(f"index '{name}' of table '{table.name}': {last} by another writer during each of "
                      f"{REBUILDS + 1} builds; nothing was committed: build it again when the table is quiet")


def plan_build(table: TableRef, request: IndexSpec | IndexRefresh, store: CheckpointStore, *, parallelism: int,
               target_groups: int | None = None, max_segments: int = DEFAULT_MAX_SEGMENTS) -> IndexBuildPlan | None:
    """The build of ``request`` at the table's latest version -- checked, its groups cut and its artifacts trained
    (or found: a killed build's plan at the same version) -- or None when a refresh has nothing to index.

    Every check happens here, before any Spark job and before anything is written: a bad spec, an index name
    taken by another column, an existing index without ``replace``, a refresh of an unknown index.
    """
    check_max(max_segments)
    if isinstance(request, IndexRefresh):
        saved = IndexRecords(store, request.index_name).artifacts()
        if request.retrain and saved is not None:
            request = saved.spec.model_copy(update={"replace": True})
        else:
            return _plan_refresh(table, request.index_name, store, parallelism, target_groups, max_segments)
    return _plan_create(table, request, store, parallelism, target_groups, max_segments)


def _plan_create(table: TableRef, spec: IndexSpec, store: CheckpointStore, parallelism: int,
                 target_groups: int | None, max_segments: int) -> IndexBuildPlan:
    ds = table.dataset()
    target = check_index(ds, spec, table.name)
    name = spec.index_name
    existing = index_segments(ds, name)
    on = sorted({c for s in existing for c in s["fields"]})
    if existing and on != [spec.column]:
        raise InvalidArgumentError(f"create_index on table '{table.name}': an index named '{name}' exists on "
                                   f"column(s) {on}, not '{spec.column}'; give this one another name=")
    if existing and not spec.replace:
        raise InvalidArgumentError(f"create_index on table '{table.name}': an index named '{name}' exists on "
                                   f"column '{spec.column}'; pass replace=True to build it again")
    groups = fragment_groups(ds, _groups_wanted(target_groups, parallelism, target.spec, max_segments, target.rows))
    return _plan(table, ds, store, target, groups, replaces=[s["uuid"] for s in existing], refresh=False)


def _plan_refresh(table: TableRef, index_name: str, store: CheckpointStore, parallelism: int,
                  target_groups: int | None, max_segments: int) -> IndexBuildPlan | None:
    saved = IndexRecords(store, index_name).artifacts()
    ds = table.dataset()
    existing = index_segments(ds, index_name)
    if not existing:
        raise InvalidArgumentError(f"refresh of index '{index_name}' of table '{table.name}': the table has no "
                                   f"index of that name (its indexes: {sorted(d.name for d in ds.describe_indices())})")
    if saved is None:
        raise CheckpointMissingError(f"refresh of index '{index_name}' of table '{table.name}': no saved build "
                                     "of it in the checkpoint store (was it built by hand?); build it with "
                                     "create_index(..., replace=True)")
    new = unindexed_fragments(ds, index_name)
    if not new:
        log.info("index '%s' of table '%s' covers every fragment at version %d: nothing to refresh", index_name,
                 table.name, ds.version)
        return None
    target = IndexTarget(saved.spec, field_id_of(ds, saved.spec.column, table.name), saved.dimension,
                         ds.count_rows())
    new_rows = sum(f.count_rows() for f in ds.get_fragments() if f.fragment_id in set(new))
    groups = fragment_groups(ds, _groups_wanted(target_groups, parallelism, saved.spec, max_segments, new_rows), new)
    adding = 1 if saved.spec.index_type.merges_segments else len(groups)
    replaces: list[str] = []
    if len(existing) + adding > max_segments:
        log.info("index '%s' of table '%s': %d segments + %d new would pass max_segments=%d; re-encoding every "
                 "fragment with the saved artifacts into new segments", index_name, table.name, len(existing),
                 adding, max_segments)
        wanted = _groups_wanted(target_groups, parallelism, saved.spec, max_segments, target.rows)
        groups, replaces = fragment_groups(ds, wanted), [s["uuid"] for s in existing]
    return _plan(table, ds, store, target, groups, replaces=replaces, refresh=not replaces, saved=saved)


def check_max(max_segments: int) -> None:
    if isinstance(max_segments, bool) or not isinstance(max_segments, int) or max_segments < 1:
        raise InvalidArgumentError(f"max_segments must be a positive whole number, got {max_segments!r}")


def _groups_wanted(target_groups: int | None, parallelism: int, spec: IndexSpec, max_segments: int,
                   rows: int) -> int:
    """How many segment tasks: ``target_groups``, else the runner's parallelism but no group under
    :data:`MIN_GROUP_ROWS` rows; never more than ``max_segments`` for types whose segments stay apart."""
    wanted = target_groups if target_groups is not None else \
        max(1, min(parallelism, -(-rows // MIN_GROUP_ROWS)))
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        raise InvalidArgumentError(f"index '{spec.index_name}': target_groups must be a positive whole number, "
                                   f"got {wanted!r}")
    return wanted if spec.index_type.merges_segments else min(wanted, max_segments)


def _plan(table: TableRef, ds: Dataset, store: CheckpointStore, target: IndexTarget, groups: list[list[int]], *,
          replaces: list[str], refresh: bool, saved: IndexArtifacts | None = None) -> IndexBuildPlan:
    """The build's plan: the one stored for the same table, version, spec and groups (a killed run's: its
    artifacts and segments are reused), else a new one with newly trained artifacts (or ``saved``)."""
    spec = target.spec
    records = IndexRecords(store, spec.index_name)
    build_id = short_hash(json.dumps({"uri": table.uri, "version": ds.version, "spec": spec.model_dump(mode="json"),
                                      "groups": groups, "replaces": replaces, "refresh": refresh}, sort_keys=True))
    found = records.plan(build_id)
    if found is not None:
        log.info("index '%s' of table '%s': resuming build %s at version %d", spec.index_name, table.name, build_id,
                 ds.version)
        return found
    artifacts = saved or train_artifacts(ds, target)
    rows = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
    group_rows = [sum(rows.get(f, 0) for f in group) for group in groups]
    plan = IndexBuildPlan(build_id=build_id, table=table.name, table_uri=table.uri, store_uri=store.uri or "",
                          read_version=ds.version, spec=spec, groups=groups, field_id=target.field_id,
                          rows=sum(group_rows), group_rows=group_rows, refresh=refresh, replaces=replaces,
                          artifacts=artifacts)
    records.put_plan(plan)
    return plan


@dataclass
class _Commit:
    """The build's one commit: the segments (merged first where that is safe) as a ``CreateIndex``."""

    table: TableRef
    plan: IndexBuildPlan
    segments: list[Any]

    @property
    def message(self) -> str:
        return f"{OWN_COMMIT_PREFIX}index {self.plan.spec.index_name} build {self.plan.build_id}"

    def landed(self, latest: Dataset) -> int | None:
        return latest.version if self.message in commit_messages(latest, self.plan.read_version) else None

    def apply(self, attempt: Attempt) -> int:
        import lance
        from lance.dataset import Index

        latest = attempt.latest or self.table.dataset()
        live = {f.fragment_id for f in latest.get_fragments()}
        rewritten = sorted(f for group in self.plan.groups for f in group if f not in live)
        if rewritten:
            raise Stale(rewritten)
        gone = set(self.plan.replaces)
        removed = [Index(uuid=s["uuid"], name=s["name"], fields=[self.plan.field_id], dataset_version=s["version"],
                         fragment_ids=s["fragment_ids"], index_version=0)
                   for s in index_segments(latest, self.plan.spec.index_name) if s["uuid"] in gone]
        done = lance.LanceDataset.commit(self.table.uri, lance.LanceOperation.CreateIndex(
            new_indices=self.segments, removed_indices=removed), read_version=self.plan.read_version,
            commit_message=self.message, storage_options=self.table.storage_options)
        return int(done.version)


def run_build(table: TableRef, store: CheckpointStore, plan: IndexBuildPlan, runner: TaskRunner, *, tag: str,
              progress: Callable[[], str | None] | None = None) -> IndexBuildResult:
    """The plan's segment tasks (finished ones only looked up; ``tag`` marks their Spark jobs, which a cancel
    stops), then the one commit; :class:`Stale` when another writer rewrote the fragments meanwhile."""
    name = plan.spec.index_name
    records = IndexRecords(store, name)
    with runner.retries():
        encoded = runner.run_tasks(list(range(len(plan.groups))), partial(
            build_segments, plan.model_dump_json(), plan.artifacts.model_dump_json(),
            runner.options_for_tasks(table.storage_options)),
            description=f"geneva index {table.name}.{name}", tag=tag, progress=progress)
    results = [SegmentTaskResult.model_validate_json(r) for r in encoded]
    finished = records.segments(plan.build_id)
    if len(finished) != len(plan.groups):
        raise CheckpointMissingError(f"index '{name}' of table '{table.name}': build {plan.build_id} has "
                                     f"{len(finished)} of {len(plan.groups)} segments after its tasks ran")
    segments = [r.lance_index() for r in finished]
    # A full-text segment is written as staged parts that only a merge turns into an index, even alone.
    if plan.spec.index_type.merges_segments and (len(segments) > 1 or plan.spec.index_type is IndexType.INVERTED):
        segments = [table.dataset(plan.read_version).merge_existing_index_segments(segments)]
    change = _Commit(table, plan, segments)
    try:
        done = commit(table, f"commit of index '{name}'", change.apply, landed=change.landed, look_first=True)
    except Stale:
        records.drop_build(plan.build_id)
        raise
    records.put_artifacts(plan.artifacts)
    records.drop_build(plan.build_id)
    built = sum(r.built for r in results)
    log.info("index '%s' of table '%s': %s %d fragments in %d segments (%d built, %d from an earlier run) at "
             "version %d", name, table.name, "refreshed" if plan.refresh else "built",
             sum(len(g) for g in plan.groups), len(segments), built, len(results) - built, done.value)
    return IndexBuildResult(index_name=name, build_id=plan.build_id, version=done.value, segments_built=built,
                            segments_reused=len(results) - built, segments_committed=len(segments),
                            segments_per_task=[int(r.built) for r in results],
                            fragments_indexed=sorted(f for g in plan.groups for f in g), rows_indexed=plan.rows,
                            rows_reused=sum(plan.group_rows[r.group] for r in results
                                            if not r.built and r.group < len(plan.group_rows)),
                            trained=not plan.refresh and plan.artifacts.trained_at_version == plan.read_version,
                            refresh=plan.refresh)
