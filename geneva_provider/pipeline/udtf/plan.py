"""Plan stage of a chunker or batch-UDTF view refresh: which parents to expand, which rows to delete.

A chunker view follows its source row by row.  Since the source version the view was last expanded
from (``B``), the source's own version columns say what happened, in O(changed rows): rows created
after ``B`` are new parents; rows updated after ``B`` are compared -- their read columns and whether
they match the filter -- at ``B`` and now, so only parents whose inputs really changed are expanded
again (their old rows deleted); when anything but appends happened, parents no longer selected
(deleted, or no longer matching) lose their rows.  A compaction of the source or of the view changes
no parent, so it costs no UDTF call.  Parents the view already holds with the same fingerprint (a
commit that landed before its bookkeeping) are not expanded twice.

A batch UDTF view runs its UDTF per partition: a partition runs again only when the fingerprint of its
rows changed, and nothing runs while the source version is the one the view holds.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.lineage_models import udf_description
from geneva_provider.core.contracts.models import ExpandPart, ExpandTask, JobSpec, OutputGroup, PlanSummary, UdtfWork
from geneva_provider.core.contracts.options import RefreshOptions
from geneva_provider.core.fingerprints import digest_fingerprints, row_fingerprints
from geneva_provider.core.fragments import column_field_ids, files_holding
from geneva_provider.core.functions.udtf import UDTFKind, load_udtf
from geneva_provider.core.incarnations import incarnations
from geneva_provider.core.lineage import view_lineage
from geneva_provider.core.ranges import positions_of, sorted_unique
from geneva_provider.core.refs import TableRef
from geneva_provider.core.resources import ResourceAsk
from geneva_provider.core.store.layout import job_prefix, md5_hex
from geneva_provider.core.views.meta import SOURCE_ROW_ID
from geneva_provider.core.views.udtf_meta import (
    CHUNK_INDEX,
    PARTITION,
    PARTITION_FP,
    SOURCE_FP,
    UdtfViewState,
    udtf_view_state,
)
from geneva_provider.pipeline.source_versions import only_appends, readable_source, view_source
from geneva_provider.pipeline.stages.planning import PlanCall, save_plan
from geneva_provider.pipeline.udtf.check import doubled_pairs
from geneva_provider.pipeline.udtf.lineage import mark_refreshed, recreated_since, transaction_of, unfinished_refresh

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

log = logging.getLogger(__name__)


def id_runs(ids: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unique ids as runs ``[start, end)`` (compact for the long runs of appended rows)."""
    ids = sorted_unique(ids)
    if not len(ids):
        return []
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(ids)]])
    return [(int(ids[s]), int(ids[e - 1]) + 1) for s, e in zip(starts, ends, strict=True)]


def plan_udtf_refresh(view: TableRef, options: RefreshOptions, call: PlanCall) -> PlanSummary:
    """Plans a chunker or batch-UDTF view refresh (nothing is written but, when nothing changed, the
    source version the view is now known to match)."""
    ds = view.dataset()
    state = udtf_view_state(ds.schema.metadata, view.name)
    spec = state.spec
    source = view_source(view, spec.base_table_db_uri, spec.base_table, call.resolve)
    version = options.src_version if options.src_version is not None else state.refresh_version
    src = readable_source(view.name, source, version, spec.read_columns(), spec.where)
    fn = load_udtf(state.pickle)
    seed = state.seed()
    work = UdtfWork(source_uri=source.uri, source_version=src.version, base_version=state.base_version,
                    read_columns=spec.read_columns(),
                    max_rows_per_fragment=options.max_rows_per_fragment or spec.max_rows_per_fragment,
                    generation=state.generation, source_transaction=transaction_of(src),
                    fingerprints=state.fingerprints)
    recreated = recreated_since(source, state, view.name)
    if recreated:
        log.warning("%s; rebuilding the view from the new table (rows whose parent's inputs are the same are kept)",
                    recreated)
    # Rows an unfinished refresh committed (or a source that is another table) are not described by the
    # metadata: the view is then compared with the whole source, once.
    rebuild = bool(recreated) or unfinished_refresh(ds, state)
    unchanged = state.refreshed and src.version == state.base_version and not state.pending and not rebuild
    if spec.kind is UDTFKind.CHUNKER:
        expand, delete = (np.zeros(0, np.int64),) * 2 if unchanged else _chunker_changes(
            ds, src, source, state, rebuild)
        work.delete_parents = id_runs(delete)
        size = options.initial_checkpoint_size()
        # Checkpoints are named by what the refresh expands from -- the spec, the view's refresh generation and
        # the source version (and table) -- never by the view's version, which the refresh's own partial
        # commits move: a rerun after a kill finds every checkpoint the killed run wrote.  CHECKPOINTS names
        # what a checkpoint holds, so a refresh never takes one an older release wrote in another form.
        tasks = _cut(id_runs(expand), size, call.parallelism,
                     f"{CHECKPOINTS}:{seed}:{state.generation}:{src.version}:{work.source_transaction}")
        rows, label = len(expand), f"{len(expand):,} parents to expand, {len(delete):,} whose rows go"
    else:
        tasks, rows = [], 0
        if not unchanged:
            tasks, work = _partition_changes(ds, src, state, work)
            rows = sum(t.rows for t in tasks)
        label = f"{len(tasks):,} partitions to run, {len(work.delete_partitions):,} whose rows go"
    prefix = job_prefix(f"udtf:{spec.udtf}", spec.version, view.name, spec.where, view.uri)
    spec_job = JobSpec(
        kind=JobKind.UDTF, table=view.name, table_uri=view.uri,
        outputs=[OutputGroup(columns=list(fn.output_schema.names))],
        read_version=ds.version, output_field_ids=[], column_uid=seed,
        incarnations=incarnations(ds, spec.fragment_columns(fn.output_schema.names)),
        data_storage_version=str(ds.data_storage_version), job_prefix=prefix, rows_total=src.count_rows(),
        resource_asks=[ResourceAsk(udf=fn.name, column=view.name, resources=fn.resources)] if fn.resources else [],
        max_failed_rows=fn.on_error.skip_limits[0], max_failed_fraction=fn.on_error.skip_limits[1],
        udtf=work,
        lineage=view_lineage(source.uri, src.version, src.schema.names, view.uri, ds.schema, spec.columns,
                             {c: (spec.input_columns, udf_description("UDTF", spec.udtf, spec.version))
                              for c in fn.output_schema.names}, spec.where, group_by=spec.partition_by))
    if not tasks and not work.deletes and state.base_version != src.version:
        # Nothing to expand or delete at this version: the view now matches it (the next refresh starts here).
        mark_refreshed(ds, work, state.pending)
        spec_job = spec_job.model_copy(update={"read_version": view.dataset().version})
    return save_plan(spec_job, None, tasks, rows, 0, options, call,
                     f"view '{view.name}' of {fn.label} from source version {src.version} ({label})")


CHECKPOINTS = "fragments"  # a UDTF checkpoint names the uncommitted fragments holding its rows
PIECES = 16               # a refresh is cut into at least this many checkpoints (when it has the parents) ...
MIN_CHECKPOINT_PARENTS = 100  # ... of at least this many parents: a small refresh still spreads over the cores


def _cut(runs: list[tuple[int, int]], size: int, parallelism: int, versions: str) -> list[ExpandTask]:
    """Runs of parent ids cut into parts of at most ``size`` parents, dealt into about 2 tasks per core.

    Parts are made small enough that the parents make ``PIECES`` of them, so a small refresh still runs
    on every core.  Apply expands a part in checkpoints sized by the UDTF's measured speed; every
    checkpoint of the refresh shares one prefix named by ``versions`` (the view's spec, its refresh
    generation, the source version and the source's identity) and says which parents it expanded, so a
    rerun of the same refresh -- even after some of its partial commits landed, which cuts its parts
    differently -- takes every parent a checkpoint holds, while a later refresh (after this one finished,
    or of another source version) never takes an earlier one's rows.
    """
    ids = positions_of(runs)
    size = max(1, min(size, max(MIN_CHECKPOINT_PARENTS, -(-len(ids) // PIECES))))
    chunks = [ids[i:i + size] for i in range(0, len(ids), size)]
    key = md5_hex(versions)
    parts = [ExpandPart(ranges=id_runs(c), src_key=key) for c in chunks]
    n_tasks = max(1, min(len(parts), 2 * parallelism))
    per = -(-len(parts) // n_tasks) if parts else 0
    return [ExpandTask(parts=parts[i:i + per]) for i in range(0, len(parts), per)] if parts else []


def _ids(ds: Dataset, where: str | None, extra: str | None = None) -> np.ndarray:
    cond = " AND ".join(f"({c})" for c in (where, extra) if c) or None
    return ds.to_table(columns=[], filter=cond, with_row_id=True).column("_rowid").to_numpy().astype(np.int64)


def _fingerprints(ds: Dataset, ids: np.ndarray, columns: list[str], state: UdtfViewState) -> np.ndarray:
    if not len(ids):
        return np.zeros(0, np.uint64)
    rows = ds._take_rows(pa.array(ids, pa.uint64()), columns=columns)
    fp: np.ndarray = digest_fingerprints([rows.column(c) for c in columns], state.seed(), rows.num_rows,
                                         scheme=state.fingerprints).to_numpy()
    return fp


def _children(view: Dataset, at_least: int | None = None) -> pa.Table:
    """The view's (parent id, chunk index, parent fingerprint) rows, of parents from ``at_least`` on."""
    return view.to_table(columns=[SOURCE_ROW_ID, CHUNK_INDEX, SOURCE_FP],
                         filter=None if at_least is None else f"{SOURCE_ROW_ID} >= {int(at_least)}")


def _chunker_changes(view: Dataset, src: Dataset, source: TableRef, state: UdtfViewState,
                     rebuild: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(parents to expand, parents whose rows are deleted), both sorted.

    One rule holds whatever the view's history: every parent expanded has its previous rows deleted in the
    same commit, so a parent's rows are always the children of one version of it.
    """
    spec, base = state.spec, state.base_version
    cols = spec.read_columns()
    delete = np.zeros(0, np.int64)
    if not state.refreshed or src.version < base or rebuild:
        # The first refresh, back to an older version, after an unfinished refresh or onto a re-created
        # source: compared with the whole selection (parents whose rows are current are not expanded).
        expand = _ids(src, spec.where)
        have = np.unique(_children(view).column(SOURCE_ROW_ID).to_numpy())
        delete = have[~np.isin(have, expand)]
    else:
        expand = _ids(src, spec.where, f"_row_created_at_version > {base}")
        touched = src.to_table(columns=[], with_row_id=True, with_row_address=True, filter=(
            f"_row_created_at_version <= {base} AND _row_last_updated_at_version > {base}"))
        updated = touched.column("_rowid").to_numpy().astype(np.int64)
        if len(updated):
            frags = (touched.column("_rowaddr").to_numpy() >> np.uint64(32)).astype(np.int64)
            changed, selected = _changed(src, source, view, state, updated, frags, cols)
            delete = np.union1d(delete, changed)
            expand = np.union1d(expand, changed[np.isin(changed, selected)])
        if not only_appends(src, base):  # deletes (or a changed filter match): parents no longer selected
            have = np.unique(_children(view).column(SOURCE_ROW_ID).to_numpy())
            delete = np.union1d(delete, have[~np.isin(have, _ids(src, spec.where))])
        if state.pending:
            pending = np.asarray(state.pending, np.int64)
            expand = np.union1d(expand, pending[np.isin(pending, _ids(src, spec.where))])
    expand = sorted_unique(expand)
    if len(expand):  # parents the view already holds as they are now (a commit whose bookkeeping was lost)
        held = _children(view, int(expand.min()))
        ids = held.column(SOURCE_ROW_ID).to_numpy()
        mine = np.isin(ids, expand)
        if mine.any():
            ids, fps = ids[mine], held.column(SOURCE_FP).to_numpy(zero_copy_only=False)[mine]
            candidates = np.unique(ids)
            now = dict(zip(candidates.tolist(), _fingerprints(src, candidates, cols, state).tolist(), strict=True))
            stale = {int(i) for i, f in zip(ids.tolist(), fps.tolist(), strict=True) if now[int(i)] != f}
            # a parent holding some (parent, chunk index) pair twice is rebuilt, whatever its fingerprint
            stale |= set(doubled_pairs(ids, held.column(CHUNK_INDEX).fill_null(-1).to_numpy()[mine])[:, 0].tolist())
            done = np.asarray(sorted(set(candidates.tolist()) - stale), np.int64)
            expand = expand[~np.isin(expand, done)]
            delete = np.union1d(delete[~np.isin(delete, done)], np.asarray(sorted(stale), np.int64))
    return expand, sorted_unique(delete)


def _changed(src: Dataset, source: TableRef, view: Dataset, state: UdtfViewState, updated: np.ndarray,
             frags: np.ndarray, cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Of the rows updated since the view's base version (``frags``: the fragment each lives in now): those
    whose inputs or filter match changed, and which of them the filter selects now.

    Compared with the rows as they were at the base version -- except rows whose fragment still holds its
    read columns in the very files it did then (another column was backfilled or replaced: Lance counts
    that as an update of every row of the fragment), whose inputs cannot have changed.  When the base
    version was cleaned up, compared with the fingerprints the view's rows keep (a parent without rows is
    then expanded again).
    """
    where = state.spec.where
    selected = _ids(src, where, f"_row_last_updated_at_version > {state.base_version}") if where else updated
    try:
        old = source.dataset(state.base_version)
    except (ValueError, OSError):
        old = None
    if old is None:
        log.warning("view '%s': source version %d is gone; comparing updated rows with the fingerprints the view "
                    "keeps (updated parents without rows are expanded again)", view.uri, state.base_version)
        fp_now = _fingerprints(src, updated, cols, state)
        held = _children(view)
        stored = dict(zip(held.column(SOURCE_ROW_ID).to_numpy().tolist(),
                          held.column(SOURCE_FP).to_numpy(zero_copy_only=False).tolist(), strict=True))
        differs = np.array([stored.get(int(i)) != int(f) for i, f in zip(updated, fp_now, strict=True)], bool)
        return updated[differs], selected
    same = np.isin(frags, _fragments_with_same_inputs(src, old, cols))
    differs = np.zeros(len(updated), bool)
    check = updated[~same]
    differs[~same] = _fingerprints(src, check, cols, state) != _fingerprints(old, check, cols, state)
    if where:
        differs |= np.isin(updated, selected) != np.isin(updated, _ids(old, where))
    return updated[differs], selected


def _fragments_with_same_inputs(src: Dataset, old: Dataset, cols: list[str]) -> list[int]:
    """Fragments holding ``cols`` in the same data files (and with the same rows) now as at ``old``."""
    def inputs(ds: Dataset) -> dict[int, tuple[list[str], int]]:
        ids = sorted({i for c in cols for i in column_field_ids(ds, c)})
        return {f.fragment_id: (files_holding(f.metadata, ids), f.metadata.physical_rows) for f in ds.get_fragments()}

    then = inputs(old)
    return [fid for fid, files in inputs(src).items() if then.get(fid) == files]


def _partition_changes(view: Dataset, src: Dataset, state: UdtfViewState, work: UdtfWork
                       ) -> tuple[list[ExpandTask], UdtfWork]:
    """A batch UDTF's partitions whose rows changed (each one task part), and the partitions that went."""
    spec = state.spec
    cols = spec.read_columns()
    rows = src.to_table(columns=cols, filter=spec.where, with_row_id=True)
    ids = rows.column("_rowid").to_numpy().astype(np.int64)
    keys = (row_fingerprints([rows.column(spec.partition_by)], "partition", rows.num_rows).to_numpy()
            >> np.uint64(1) if spec.partition_by else np.zeros(rows.num_rows, np.uint64))  # < 2**63: JSON and SQL
    fps = digest_fingerprints([rows.column(c) for c in cols], state.seed(), rows.num_rows,
                              scheme=state.fingerprints).to_numpy()
    order = np.lexsort((ids, keys))
    ids, keys, fps = ids[order], keys[order], fps[order]
    bounds = np.flatnonzero(np.diff(keys)) + 1
    current: dict[int, tuple[int, np.ndarray]] = {}
    for s, e in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(ids)]]), strict=True):
        if e > s or not spec.partition_by:  # unpartitioned: one call over the selection, even an empty one
            digest = hashlib.md5(ids[s:e].tobytes() + fps[s:e].tobytes()).digest()
            current[int(keys[s]) if e > s else 0] = (int.from_bytes(digest[:8], "little") >> 1, ids[s:e])
    held = view.to_table(columns=[PARTITION, PARTITION_FP]).group_by([PARTITION, PARTITION_FP]).aggregate([])
    in_view: dict[int, set[int]] = {}
    for k, f in zip(held.column(PARTITION).to_pylist(), held.column(PARTITION_FP).to_pylist(), strict=True):
        in_view.setdefault(int(k), set()).add(int(f))
    stored = {int(k): v for k, v in state.partitions.items()}
    changed = sorted(k for k, (fp, _) in current.items()
                     if stored.get(k) != fp and in_view.get(k) != {fp})
    gone = sorted((set(stored) | set(in_view)) - set(current))
    tasks = [ExpandTask(parts=[ExpandPart(partition=i, ranges=id_runs(current[k][1]),
                                          src_key=md5_hex(f"{CHECKPOINTS}:{k}:{current[k][0]}"))])
             for i, k in enumerate(changed)]
    work = work.model_copy(update={
        "delete_partitions": sorted({*[k for k in changed if k in in_view], *gone}),
        "partitions": [(k, current[k][0]) for k in changed],
        "partition_state": {str(k): fp for k, (fp, _) in current.items()}})
    return tasks, work

