"""Committing staged column files with ``DataReplacement``, surviving concurrent writers.

Lance rebases a stale DataReplacement over compatible commits by itself (appends, deletes,
other columns).  What remains are conflicts (the same fragment rewritten by an update, a
compaction, a delete of all its rows, or the same column): the commit is retried through
:mod:`~geneva_provider.pipeline.committer` at the latest version with the same files, dropping
fragments that no longer exist and those another writer filled meanwhile, and reporting them.
A retry that finds its files already in the table (the commit had landed) commits nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from geneva_provider.core.errors import CommitError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.fragments import output_files
from geneva_provider.core.incarnations import check_incarnations
from geneva_provider.core.refs import TableRef
from geneva_provider.pipeline.committer import (
    OWN_COMMIT_PREFIX,
    Attempt,
    CommitPolicy,
    RetryCommit,
    commit,
    conflict_of,
)

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import ColumnIncarnation
    from geneva_provider.core.lib_types import DataFile, Dataset


@dataclass
class CommitOutcome:
    """What one DataReplacement commit did."""

    version: int
    committed: list[int] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    retries: int = 0


def commit_column_files(
    table_uri: str,
    columns: list[str],
    files: dict[int, DataFile],
    read_version: int,
    *,
    output_field_ids: list[int],
    incarnations: list[ColumnIncarnation],
    base_files: dict[int, str | None] | None = None,
    storage_options: dict[str, str] | None = None,
    policy: CommitPolicy | None = None,
    table: str | None = None,
) -> CommitOutcome:
    """Commits ``{fragment id: DataFile}`` holding ``columns`` as one DataReplacement.

    ``base_files`` names the output files each staged file was merged from; a fragment whose
    output files changed since then is not overwritten but reported in ``changed``, because
    committing it would erase the other writer's values.  Fragments deleted or compacted away
    since the read version are dropped from the commit and reported in ``vanished``.  Conflicts
    are retried at the latest version with jittered backoff, within ``policy``'s retries and time.
    ``table`` names the table in errors (by default its URI).

    Every attempt first checks that ``columns`` are still the ``incarnations`` the files were written for
    (:func:`~geneva_provider.core.incarnations.check_incarnations`): a column dropped and re-created since,
    whatever its type, is ``ColumnReplacedError`` and nothing is committed.
    """
    change = _ColumnFiles(TableRef(table or table_uri, table_uri, storage_options), columns, dict(files),
                          output_field_ids, incarnations, base_files, CommitOutcome(version=read_version))
    done = commit(change.table, f"commit of column(s) '{', '.join(columns)}'", change.apply, landed=change.landed,
                  policy=policy, reapplies=True)
    done.value.retries = done.retries
    return done.value


@dataclass
class _ColumnFiles:
    """One DataReplacement, rebuilt at the latest version on each retry (``reapplies``)."""

    table: TableRef
    columns: list[str]
    pending: dict[int, DataFile]
    output_field_ids: list[int]
    incarnations: list[ColumnIncarnation]
    base_files: dict[int, str | None] | None
    outcome: CommitOutcome

    def landed(self, latest: Dataset) -> CommitOutcome | None:
        """The outcome when a fragment already holds its staged file: a DataReplacement lands whole, so this
        commit did (a retry after a commit whose answer was lost)."""
        live = {f.fragment_id: f.metadata for f in latest.get_fragments()}
        if not any(fid in live and output_files(live[fid], self.output_field_ids) == df.path
                   for fid, df in self.pending.items()):
            return None
        self.outcome.committed.extend(sorted(self.pending))
        self.outcome.version = latest.version
        self.pending.clear()
        return self.outcome

    def apply(self, attempt: Attempt) -> CommitOutcome:
        import lance

        # Lance rebases a stale DataReplacement over a drop and re-add of its column by itself, so the column's
        # incarnation is checked at the latest version before every attempt, the first included.
        self._check_columns(attempt.latest if attempt.latest is not None else self.table.dataset())
        if attempt.latest is not None:  # a retry: move to the latest version first
            self._rebase(attempt.latest)
        if not self.pending:
            return self.outcome
        op_cls = lance.LanceOperation
        op = op_cls.DataReplacement([op_cls.DataReplacementGroup(fid, df) for fid, df in sorted(self.pending.items())])
        try:
            ds = lance.LanceDataset.commit(self.table.uri, op, read_version=self.outcome.version,
                                           storage_options=self.table.storage_options,
                                           commit_message=f"{OWN_COMMIT_PREFIX}column write {','.join(self.columns)}")
        except Exception as exc:
            # Only what Lance's commit itself raised is a commit failure: anything else (a missing module, a bug)
            # surfaces as itself, so a broken install is never reported as a failed commit.
            if conflict_of(exc) is not None:
                raise
            if self._vanished_at(self.outcome.version):  # a fragment gone at the version committed on
                raise RetryCommit from exc
            raise CommitError(f"commit of column(s) '{', '.join(self.columns)}' to table '{self.table.name}' "
                              f"failed: {lance_reason(exc)}") from exc
        self.outcome.version = ds.version
        self.outcome.committed.extend(sorted(self.pending))
        self.pending.clear()
        return self.outcome

    def _check_columns(self, latest: Dataset) -> None:
        check_incarnations(latest, self.columns, self.output_field_ids, self.incarnations, self.table.name,
                           f"commit of column(s) '{', '.join(self.columns)}'")

    def _vanished_at(self, version: int) -> bool:
        """True when a pending fragment does not exist at ``version`` (deleted or compacted away before it)."""
        live = {f.fragment_id for f in self.table.dataset(version).get_fragments()}
        return any(fid not in live for fid in self.pending)

    def _rebase(self, latest: Dataset) -> None:
        """Moves the commit to the latest version, dropping fragments it may no longer replace."""
        live = {f.fragment_id: f.metadata for f in latest.get_fragments()}
        for fid in sorted(self.pending):
            if fid not in live:
                self.outcome.vanished.append(fid)
                del self.pending[fid]
            elif self.base_files is not None and \
                    output_files(live[fid], self.output_field_ids) != self.base_files.get(fid):
                self.outcome.changed.append(fid)
                del self.pending[fid]
        self.outcome.version = latest.version
