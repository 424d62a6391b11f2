"""Committing staged column files with ``DataReplacement``, surviving concurrent writers.

Lance rebases a stale DataReplacement over compatible commits by itself (appends, deletes,
other columns).  What remains are retryable conflicts (the same fragment rewritten by an
update, a compaction, or the same column): re-read the latest version and commit the same
files again, dropping fragments that no longer exist and reporting them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from geneva_provider.core.errors import CommitError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.fragments import leaf_field_ids, output_files

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 8
DEFAULT_BACKOFF_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 10.0


@dataclass
class CommitOutcome:
    """What one DataReplacement commit did."""

    version: int
    committed: list[int] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    retries: int = 0


def is_retryable_conflict(exc: BaseException) -> bool:
    """True for Lance's retryable commit conflicts (raised as CommitConflictError or plain OSError)."""
    retryable = getattr(exc, "retryable", None)
    if retryable is not None:
        return bool(retryable)
    return isinstance(exc, OSError) and str(exc).startswith("Retryable commit conflict")


def is_vanished_fragment(exc: BaseException) -> bool:
    """True when a fragment being replaced was deleted or compacted away after the read version."""
    text = str(exc)
    return isinstance(exc, OSError) and ("Fragment being replaced not found" in text
                                         or ("DataReplacement target fragment" in text and "was removed" in text))


def commit_column_files(
    table_uri: str,
    columns: list[str],
    files: dict[int, Any],
    read_version: int,
    *,
    output_field_ids: list[int],
    base_files: dict[int, str | None] | None = None,
    storage_options: dict[str, str] | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS,
) -> CommitOutcome:
    """Commits ``{fragment id: DataFile}`` holding ``columns`` as one DataReplacement.

    ``base_files`` names the output files each staged file was merged from; a fragment whose
    output files changed since then is not overwritten but reported in ``changed``, because
    committing it would erase the other writer's values.  Fragments deleted or compacted away
    since the read version are dropped from the commit and reported in ``vanished``.
    """
    import lance

    op_cls = lance.LanceOperation
    column = ", ".join(columns)
    pending = dict(files)
    outcome = CommitOutcome(version=read_version)
    version = read_version
    for attempt in range(max_retries + 1):
        if not pending:
            return outcome
        try:
            op = op_cls.DataReplacement([op_cls.DataReplacementGroup(fid, df) for fid, df in sorted(pending.items())])
            ds = lance.LanceDataset.commit(table_uri, op, read_version=version, storage_options=storage_options)
            outcome.version = ds.version
            outcome.committed.extend(sorted(pending))
            return outcome
        except Exception as exc:
            if not is_retryable_conflict(exc) and not is_vanished_fragment(exc):
                raise CommitError(f"commit of column(s) '{column}' to {table_uri} failed: "
                                  f"{lance_reason(exc)}") from exc
            if attempt == max_retries:
                raise CommitError(f"commit of column(s) '{column}' to {table_uri} still conflicted after "
                                  f"{max_retries} retries: {lance_reason(exc)}") from exc
            delay = min(backoff_seconds * 2**attempt, MAX_BACKOFF_SECONDS)
            log.warning("commit of column(s) '%s' conflicted (%s); retrying at the latest version in %.1fs",
                        column, lance_reason(exc), delay)
            time.sleep(delay)
            latest = lance.dataset(table_uri, storage_options=storage_options)
            _check_columns(latest, columns, output_field_ids, table_uri)
            live = {f.fragment_id: f.metadata for f in latest.get_fragments()}
            for fid in sorted(pending):
                if fid not in live:
                    outcome.vanished.append(fid)
                    del pending[fid]
                elif base_files is not None and output_files(live[fid], output_field_ids) != base_files.get(fid):
                    outcome.changed.append(fid)
                    del pending[fid]
            version = latest.version
            outcome.version = version
            outcome.retries += 1
    return outcome


def _check_columns(ds: Any, columns: list[str], output_field_ids: list[int], uri: str) -> None:
    names = ds.schema.names
    if any(c not in names for c in columns) or [
            i for c in columns for i in leaf_field_ids(ds.lance_schema.field(c))] != output_field_ids:
        raise CommitError(f"column(s) {columns} of {uri} were dropped or replaced while the job ran; rerun it")
