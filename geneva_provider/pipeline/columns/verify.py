"""The column kinds' verify: every planned fragment now holds the file the job staged for it.

Runs on the Airflow worker (no Spark) and fails loudly, naming fragments and row counts, when a
planned row did not end up committed -- the signal a DAG must not miss.  A fragment deleted whole
during the job is reported, not failed: its rows need no value.  One compacted or rewritten away
is a failure: its rows now live elsewhere without their value, and the next run computes them there.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.models import (
    Action,
    ColumnPlan,
    FragmentPlan,
    VerifyResult,
)
from geneva_provider.core.errors import VerificationError
from geneva_provider.core.fragments import data_file_path, fragment_of
from geneva_provider.core.listing import shortened
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import JobStore
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.stages.planning import staged_files

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

log = logging.getLogger(__name__)


_VERIFIED = (Action.COMPUTE, Action.REUSE)


def verify_columns(plan: ColumnPlan, store: CheckpointStore, storage_options: dict[str, str] | None) -> VerifyResult:
    import lance

    ds = lance.dataset(plan.table_uri, storage_options=storage_options)
    live = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    commit = JobStore(store).committed(plan.job_id)
    committed = commit.staged if commit is not None else {}
    problems, deleted, rows_ok, frags_ok = [], [], 0, 0
    staged: dict[int, set[str]] | None = None  # read only when a commit record does not tell
    planned = [entry for entry in plan.fragments if entry.action in _VERIFIED]
    for entry in planned:
        meta = live.get(entry.id)
        if meta is None:
            if _rows_gone(ds, lance.dataset(plan.table_uri, version=plan.read_version,
                                            storage_options=storage_options), entry):
                deleted.append(entry.id)
            else:
                problems.append(f"fragment {entry.id} ({entry.rows} rows) no longer exists: it was compacted or "
                                "rewritten during the job, so its rows were not committed")
            continue
        files = {data_file_path(df) for df in meta.files}
        if committed.get(entry.id) not in files:
            if staged is None:
                staged = {fid: {c.file.path for c in ckpts}
                          for fid, ckpts in staged_files(store, plan.job_prefix).items()}
            if not staged.get(entry.id, set()) & files:
                problems.append(f"fragment {entry.id}: {entry.rows} rows lack their computed value")
                continue
        rows_ok += entry.rows
        frags_ok += 1
    if problems:
        # Thousands of fragments can be missing: name the first few, count the rest.
        raise VerificationError(
            f"job {plan.job_id} ({plan.label()}) is incomplete at version {ds.version}: {len(problems)} of its "
            f"{len(planned)} planned fragments are not committed: {shortened(problems, sep='; ')}. "
            "Rerun the job to finish it.")
    if deleted:
        log.warning("verify %s: fragments %s were deleted during the job (their rows need no value)",
                    plan.job_id, deleted)
    log.info("verify %s: %s, %s of %s committed at version %d",
             plan.job_id, counted(frags_ok, "fragment"), counted(rows_ok, "row"), plan.label(), ds.version)
    return VerifyResult(job_id=plan.job_id, table=plan.table, column=plan.column, version=ds.version,
                        fragments_verified=frags_ok, rows_verified=rows_ok, fragments_deleted=deleted)


def _rows_gone(ds: Dataset, planned: Dataset, entry: FragmentPlan) -> bool:
    """True when none of a vanished fragment's rows is live any more (it was deleted, not moved).

    Its rows are followed by their stable row ids, read from the version the job planned at.
    """
    if not ds.has_stable_row_ids:  # row ids change with the rows: they cannot be followed, they may have moved
        return False
    try:
        ids = fragment_of(planned, entry.id).to_table(columns=[], with_row_id=True).column("_rowid").to_numpy()
    except (ValueError, OSError):  # the planned version was cleaned up
        return False
    return not len(ids) or ds.count_rows(filter=f"_rowid >= {int(ids.min())} AND _rowid <= {int(ids.max())}") == 0
