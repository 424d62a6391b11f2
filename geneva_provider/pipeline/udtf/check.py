"""The check that a chunker or batch-UDTF view holds exactly what its UDTF makes of the source version it claims.

The verify stage of every UDTF refresh runs it, and a user can run it on any UDTF view
(``Table.check()``).  It reads only the view's reserved key columns and the source's row ids (the
filter's columns), so it costs a scan of small columns, not a UDTF call; ``fingerprints=True`` also
reads each parent's inputs to find rows made from another version of their parent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.catalog import TableResolver
from geneva_provider.core.contracts.models import ViewCheck
from geneva_provider.core.errors import InvalidArgumentError, VerificationError
from geneva_provider.core.fingerprints import digest_fingerprints, row_fingerprints
from geneva_provider.core.functions.udtf import UDTFKind
from geneva_provider.core.ranges import sorted_unique
from geneva_provider.core.refs import TableRef
from geneva_provider.core.views.meta import SOURCE_ROW_ID
from geneva_provider.core.views.udtf_meta import (
    CHUNK_INDEX,
    PARTITION,
    PARTITION_FP,
    SOURCE_FP,
    UdtfViewState,
    udtf_view_state,
)
from geneva_provider.pipeline.source_versions import view_source
from geneva_provider.pipeline.udtf.lineage import mark_for_rebuild, recreated_since

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

SHOWN = 10  # culprits named in a check's message


def check_view(view: TableRef, *, fingerprints: bool = False, resolve: TableResolver | None = None) -> ViewCheck:
    """Checks a chunker or batch-UDTF view against the source version it claims to hold.

    Returns what it found when the view is exact; otherwise raises VerificationError naming the culprits
    and marks the view so that its next refresh compares it with its whole source and repairs it.
    """
    ds = view.dataset()
    state = udtf_view_state(ds.schema.metadata, view.name)
    spec = state.spec
    source = view_source(view, spec.base_table_db_uri, spec.base_table, resolve, "check")
    if not state.refreshed:
        if ds.count_rows():
            mark_for_rebuild(ds)
            raise VerificationError(f"view '{view.name}' was never refreshed but holds {ds.count_rows():,} rows. "
                                    "The next refresh compares the view with its whole source and repairs it")
        return ViewCheck(view=view.name, version=ds.version, source=spec.base_table, source_version=-1, rows=0,
                         by_partition=spec.kind is not UDTFKind.CHUNKER)
    recreated = recreated_since(source, state, view.name)
    if recreated:
        raise VerificationError(f"{recreated}: the view's rows are of the old table; refresh the view to rebuild it")
    try:
        src = source.dataset(state.base_version)
    except (ValueError, OSError):
        raise InvalidArgumentError(f"check of view '{view.name}': version {state.base_version} of source table "
                                   f"'{spec.base_table}', which the view holds, was cleaned up; refresh the view "
                                   "and check it again") from None
    check = check_udtf_view(ds, view.name, state, src, fingerprints)
    problems = check.problems()
    if problems:
        mark_for_rebuild(ds)
        raise VerificationError(f"{problems}. The next refresh compares the view with its whole source and "
                                "repairs it")
    return check


def check_udtf_view(view: Dataset, name: str, state: UdtfViewState, source: Dataset, fingerprints: bool = False
                    ) -> ViewCheck:
    """Checks ``view`` against ``source`` (the source at the version the view claims to hold).

    ``fingerprints`` also compares each chunker row's parent fingerprint with the parent's inputs at
    that version (a read of the inputs of every parent the view holds).
    """
    spec = state.spec
    check = ViewCheck(view=name, version=view.version, source=spec.base_table, source_version=source.version,
                      rows=view.count_rows(), by_partition=spec.kind is not UDTFKind.CHUNKER,
                      fingerprints_checked=fingerprints and spec.kind is UDTFKind.CHUNKER)
    selected = source.to_table(columns=[spec.partition_by] if spec.partition_by else [], filter=spec.where,
                               with_row_id=True)
    if spec.kind is UDTFKind.CHUNKER:
        held = view.to_table(columns=[SOURCE_ROW_ID, CHUNK_INDEX, *([SOURCE_FP] if fingerprints else [])])
        twice = doubled_pairs(held.column(SOURCE_ROW_ID).to_numpy(),
                              held.column(CHUNK_INDEX).fill_null(-1).to_numpy())
        check.duplicate_count = len(twice)
        check.duplicates = [(int(p), int(c)) for p, c in twice[:SHOWN]]
        parents = sorted_unique(held.column(SOURCE_ROW_ID).to_numpy())
        ids = selected.column("_rowid").to_numpy().astype(np.int64)
        orphans = parents[~np.isin(parents, ids)]
        check.orphan_count, check.orphans = len(orphans), orphans[:SHOWN].tolist()
        if fingerprints:
            stale = _stale(source, held, parents[np.isin(parents, ids)], spec.read_columns(), state)
            check.stale_count, check.stale = len(stale), stale[:SHOWN].tolist()
        return check
    held = view.to_table(columns=[PARTITION, PARTITION_FP]).group_by([PARTITION, PARTITION_FP]).aggregate([])
    per = held.group_by([PARTITION]).aggregate([([], "count_all")])
    twice = per.filter(pc.greater(per.column("count_all"), 1)).sort_by(PARTITION)
    keys = twice.column(PARTITION).to_pylist()
    check.duplicate_count = len(keys)
    fps = held.filter(pc.is_in(held.column(PARTITION), pa.array(keys, pa.uint64())))
    check.duplicates = list(zip(fps.column(PARTITION).to_pylist()[:SHOWN], fps.column(PARTITION_FP).to_pylist()[:SHOWN],
                                strict=True))
    if spec.partition_by:
        now = row_fingerprints([selected.column(spec.partition_by)], "partition", selected.num_rows).to_numpy() \
            >> np.uint64(1)
    else:
        now = np.zeros(1, np.uint64)  # the one partition: one call over the selection, even an empty one
    have = pc.unique(held.column(PARTITION)).to_numpy()
    orphans = np.sort(have[~np.isin(have, now)])
    check.orphan_count, check.orphans = len(orphans), orphans[:SHOWN].tolist()
    return check


def doubled_pairs(parents: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The (parent, chunk index) pairs held more than once, sorted, as rows of a (k, 2) array.

    One sort of a combined 64-bit key when the values fit (they do for any real view: chunk indexes are
    small), else a sort of the pairs: a few times faster than a hash group-by on millions of rows.
    """
    parents, index = parents.astype(np.int64, copy=False), index.astype(np.int64, copy=False)
    if not len(parents):
        return np.zeros((0, 2), np.int64)
    lo, hi = int(index.min()), int(index.max())
    bits = max(hi - lo, 1).bit_length()
    if parents.min() >= 0 and int(parents.max()) < (1 << (62 - bits)):
        keys = (parents << bits) | (index - lo)
        if not bool((keys[1:] >= keys[:-1]).all()):  # a view's rows are mostly in (parent, chunk) order already
            keys = np.sort(keys)
        twice = np.unique(keys[1:][keys[1:] == keys[:-1]])
        return np.stack([twice >> bits, (twice & ((1 << bits) - 1)) + lo], axis=1)
    order = np.lexsort((index, parents))
    p, i = parents[order], index[order]
    same = (p[1:] == p[:-1]) & (i[1:] == i[:-1])
    return np.unique(np.stack([p[1:][same], i[1:][same]], axis=1), axis=0)


def _stale(source: Dataset, held: pa.Table, parents: np.ndarray, columns: list[str], state: UdtfViewState
           ) -> np.ndarray:
    """Parents whose rows carry a fingerprint other than their inputs' at the source version."""
    if not len(parents):
        return parents
    rows = source._take_rows(pa.array(parents, pa.uint64()), columns=columns)
    now = digest_fingerprints([rows.column(c) for c in columns], state.seed(), rows.num_rows,
                              scheme=state.fingerprints).to_numpy()
    expected = dict(zip(parents.tolist(), now.tolist(), strict=True))
    ids = held.column(SOURCE_ROW_ID).to_numpy()
    fps = held.column(SOURCE_FP).to_numpy(zero_copy_only=False)
    bad = {int(i) for i, f in zip(ids.tolist(), fps.tolist(), strict=True) if i in expected and expected[i] != f}
    return np.asarray(sorted(bad), np.int64)
