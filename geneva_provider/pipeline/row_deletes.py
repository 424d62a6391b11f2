"""Rows deleted by key in one commit that says who made it.

``LanceDataset.delete`` commits with no message, so a table watcher could not tell a view refresh's
deletions from an outside writer's.  Here the deletions are built per fragment (each fragment's
deletion file, or the fragment dropped when every row goes) and committed as one ``Update`` through
the one commit loop, under the caller's message: a UDTF refresh adds its new fragments to the same
commit; a query view's refresh commits only the deletions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from geneva_provider.core.fragments import fragment_of
from geneva_provider.pipeline.committer import Attempt, CommitPolicy, commit

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef


def deletions(ds: Dataset, column: str, values: np.ndarray) -> tuple[list[Any], list[int], int]:
    """The fragments that lose rows whose ``column`` is in ``values`` (with their deletion files), and those
    that lose all of them; and how many rows go."""
    if not len(values):
        return [], [], 0
    t = ds.to_table(columns=[column], with_row_address=True)
    have = t.column(column).to_numpy(zero_copy_only=False)
    hit = np.isin(have, values.astype(have.dtype))  # one integer type: no float rounding of 64-bit keys
    addrs = t.column("_rowaddr").to_numpy()[hit]
    found = have[hit]
    updated, removed = [], []
    for fid in np.unique(addrs >> np.uint64(32)).tolist():
        mine = np.unique(found[(addrs >> np.uint64(32)) == fid])
        meta = fragment_of(ds, int(fid)).delete(f"{column} IN ({','.join(str(int(v)) for v in mine)})")
        (removed.append(int(fid)) if meta is None else updated.append(meta))
    return updated, removed, int(hit.sum())


def delete_rows(table: TableRef, column: str, values: np.ndarray, message: str,
                policy: CommitPolicy | None = None) -> int:
    """Deletes ``table``'s rows whose ``column`` is in ``values`` in one commit carrying ``message``; returns
    how many rows went.  A conflict is retried from the latest version (rows already gone are not counted)."""
    import lance

    def apply(attempt: Attempt) -> int:
        ds = attempt.latest if attempt.latest is not None else table.dataset()
        updated, removed, deleted = deletions(ds, column, values)
        if updated or removed:
            lance.LanceDataset.commit(table.uri, lance.LanceOperation.Update(removed_fragment_ids=removed,
                                                                             updated_fragments=updated),
                                      read_version=ds.version, storage_options=table.storage_options,
                                      commit_message=message)
        return deleted

    return commit(table, f"deletion of {len(values)} row(s) by '{column}'", apply, policy=policy,
                  reapplies=True).value
