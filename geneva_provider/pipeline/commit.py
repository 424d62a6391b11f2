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
from typing import TYPE_CHECKING

from geneva_provider.core.errors import CommitError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.fragments import column_leaf_ids, output_files

if TYPE_CHECKING:
    from collections.abc import Callable

    from tenacity import Retrying

    from geneva_provider.core.lib_types import DataFile, Dataset
    from geneva_provider.core.models import PlanSettings

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 8
DEFAULT_BUDGET_SECONDS = 300
DEFAULT_BACKOFF_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 10.0


@dataclass(frozen=True)
class CommitPolicy:
    """How long a conflicting commit keeps trying: retries, a total time budget, jittered backoff."""

    max_retries: int = DEFAULT_MAX_RETRIES
    budget_seconds: float = DEFAULT_BUDGET_SECONDS
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS

    @classmethod
    def of(cls, settings: PlanSettings) -> CommitPolicy:
        """The policy a plan's settings ask for (``commit_retries``, ``commit_timeout``)."""
        return cls(max_retries=settings.commit_retries if settings.commit_retries is not None
                   else DEFAULT_MAX_RETRIES,
                   budget_seconds=settings.commit_timeout or DEFAULT_BUDGET_SECONDS)

    def retrying(self, retry_on: Callable[[BaseException], bool]) -> Retrying:
        import tenacity

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1) | tenacity.stop_after_delay(self.budget_seconds),
            wait=tenacity.wait_exponential_jitter(self.backoff_seconds, MAX_BACKOFF_SECONDS),
            retry=tenacity.retry_if_exception(retry_on), reraise=True)


@dataclass
class CommitOutcome:
    """What one DataReplacement commit did."""

    version: int
    committed: list[int] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    retries: int = 0


def is_retryable_conflict(exc: BaseException) -> bool:
    """True for Lance's retryable commit conflicts (``lance.commit.CommitConflictError`` with ``retryable``)."""
    from lance.commit import CommitConflictError

    return isinstance(exc, CommitConflictError) and exc.retryable


def is_vanished_fragment(exc: BaseException) -> bool:
    """True when a fragment being replaced was deleted or compacted away after the read version.

    Lance reports this as a plain error whose message is the only sign of it.
    """
    text = str(exc)
    return isinstance(exc, OSError) and ("Fragment being replaced not found" in text
                                         or ("DataReplacement target fragment" in text and "was removed" in text))


def _retry_on(exc: BaseException) -> bool:
    return is_retryable_conflict(exc) or is_vanished_fragment(exc)


def commit_column_files(
    table_uri: str,
    columns: list[str],
    files: dict[int, DataFile],
    read_version: int,
    *,
    output_field_ids: list[int],
    base_files: dict[int, str | None] | None = None,
    storage_options: dict[str, str] | None = None,
    policy: CommitPolicy | None = None,
) -> CommitOutcome:
    """Commits ``{fragment id: DataFile}`` holding ``columns`` as one DataReplacement.

    ``base_files`` names the output files each staged file was merged from; a fragment whose
    output files changed since then is not overwritten but reported in ``changed``, because
    committing it would erase the other writer's values.  Fragments deleted or compacted away
    since the read version are dropped from the commit and reported in ``vanished``.  Conflicts
    are retried at the latest version with jittered backoff, within ``policy``'s retries and time.
    """
    import lance

    policy = policy or CommitPolicy()
    op_cls = lance.LanceOperation
    column = ", ".join(columns)
    pending = dict(files)
    outcome = CommitOutcome(version=read_version)
    state = {"version": read_version}
    t0 = time.monotonic()

    conflicted = False
    # Only what Lance's commit itself raised is a commit failure: anything else (a missing module, a bug)
    # surfaces as itself, so a broken install is never reported as a failed commit.
    lance_error: BaseException | None = None

    def attempt() -> None:
        nonlocal conflicted, lance_error
        if conflicted:  # a retry: move to the latest version first
            _rebase(outcome, pending, state, table_uri, columns, output_field_ids, base_files, storage_options)
        if not pending:
            return
        op = op_cls.DataReplacement([op_cls.DataReplacementGroup(fid, df) for fid, df in sorted(pending.items())])
        try:
            ds = lance.LanceDataset.commit(table_uri, op, read_version=state["version"],
                                           storage_options=storage_options)
        except Exception as exc:
            lance_error = exc
            conflicted = _retry_on(exc)
            if conflicted:
                log.warning("commit of column(s) '%s' conflicted (%s); retrying at the latest version",
                            column, lance_reason(exc))
            raise
        outcome.version = ds.version
        outcome.committed.extend(sorted(pending))

    try:
        for tries in policy.retrying(_retry_on):
            with tries:
                attempt()
    except Exception as exc:
        if exc is not lance_error:
            raise
        if not _retry_on(exc):
            raise CommitError(f"commit of column(s) '{column}' to {table_uri} failed: {lance_reason(exc)}") from exc
        raise CommitError(
            f"commit of column(s) '{column}' to {table_uri} still conflicted after {outcome.retries} retries in "
            f"{time.monotonic() - t0:.0f}s (commit_retries={policy.max_retries}, "
            f"commit_timeout={policy.budget_seconds:g}s): {lance_reason(exc)}") from exc
    return outcome


def _rebase(outcome: CommitOutcome, pending: dict[int, DataFile], state: dict[str, int], table_uri: str,
            columns: list[str], output_field_ids: list[int], base_files: dict[int, str | None] | None,
            storage_options: dict[str, str] | None) -> None:
    """Moves a conflicting commit to the latest version, dropping fragments it may no longer replace."""
    import lance

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
    state["version"] = latest.version
    outcome.version = latest.version
    outcome.retries += 1


def _check_columns(ds: Dataset, columns: list[str], output_field_ids: list[int], uri: str) -> None:
    names = ds.schema.names
    if any(c not in names for c in columns) or [
            i for c in columns for i in column_leaf_ids(ds, c)] != output_field_ids:
        raise CommitError(f"column(s) {columns} of {uri} were dropped or replaced while the job ran; rerun it")
