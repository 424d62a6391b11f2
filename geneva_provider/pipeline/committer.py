"""The one commit loop: every change this package makes to a table lands through :func:`commit`.

Column files (``DataReplacement``, :mod:`~geneva_provider.pipeline.columns.commit`), a UDTF view's new rows
(``Update``), a compaction's rewrite and schema changes (:mod:`~geneva_provider.pipeline.schema_changes`)
all commit here, under one :class:`CommitPolicy` -- retries, a time budget, jittered backoff: the job's
``commit_retries`` / ``commit_timeout`` -- and one conflict classifier, :func:`conflict_of`.

As in pyiceberg's commit loop, a retry first asks whether the change already landed -- a commit that
reached the table though its caller never heard back, or a stage run again after its commit -- and
returns what landed instead of committing twice.  Otherwise the change is built again at the latest
version and committed.  Changes say how they know they landed: a commit message among the table's
transactions since their read version (:func:`commit_messages`), or the table's state itself (a
column with this incarnation's id, staged files that are a fragment's output files now).

Lance's conflicts are told apart by type: ``lance.commit.CommitConflictError`` and its ``retryable``.
An incompatible conflict (``retryable=False``: another writer changed what this change is built on) is
retried only by a change that rebuilds itself from the latest version each attempt (``reapplies``).
The one Lance call that reports a conflict as a plain ``OSError``, ``Compaction.commit``, is classified
where it is called by what the table shows (:mod:`~geneva_provider.pipeline.maintenance.compaction`), which raises
:class:`RetryCommit` -- never by the error's text.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from geneva_provider.core.errors import CommitError
from geneva_provider.core.filters import lance_reason

if TYPE_CHECKING:
    from tenacity import Retrying

    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 8
DEFAULT_BUDGET_SECONDS = 300
DEFAULT_BACKOFF_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 10.0
COMMIT_MESSAGE = "__lance_commit_message"  # where Lance keeps a commit's message among its transaction's properties
# Every commit message this package writes starts so: a table watcher (``LanceTableChangedTrigger``) tells the
# package's own commits (column writes, view refreshes, schema changes) from other writers' by it.
OWN_COMMIT_PREFIX = "geneva "

T = TypeVar("T")


class CommitSettings(Protocol):
    """What a job's settings say about its commits (a plan's ``settings``, a compaction plan)."""

    @property
    def commit_retries(self) -> int | None: ...

    @property
    def commit_timeout(self) -> int | None: ...


@dataclass(frozen=True)
class CommitPolicy:
    """How long a conflicting commit keeps trying: retries, a total time budget, jittered backoff."""

    max_retries: int = DEFAULT_MAX_RETRIES
    budget_seconds: float = DEFAULT_BUDGET_SECONDS
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS

    @classmethod
    def of(cls, settings: CommitSettings, *, default_retries: int = DEFAULT_MAX_RETRIES) -> CommitPolicy:
        """The policy a job's settings ask for (``commit_retries``, ``commit_timeout``; unset: the defaults)."""
        return cls(max_retries=settings.commit_retries if settings.commit_retries is not None else default_retries,
                   budget_seconds=settings.commit_timeout or DEFAULT_BUDGET_SECONDS)

    def retrying(self, retry_on: Callable[[BaseException], bool]) -> Retrying:
        import tenacity

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1) | tenacity.stop_after_delay(self.budget_seconds),
            wait=tenacity.wait_exponential_jitter(self.backoff_seconds, MAX_BACKOFF_SECONDS),
            retry=tenacity.retry_if_exception(retry_on), reraise=True)

    def describe(self) -> str:
        return f"commit_retries={self.max_retries}, commit_timeout={self.budget_seconds:g}s"


class Conflict(enum.Enum):
    """What kind of commit conflict an error is."""

    RETRYABLE = "retryable"        # preempted by a concurrent commit: the same change may land at the latest version
    INCOMPATIBLE = "incompatible"  # a concurrent commit changed what the change was built on: rebuild it first


class RetryCommit(Exception):
    """Raised by a change that found the table moved under its commit (Lance's error is its cause): retry it."""


def conflict_of(exc: BaseException) -> Conflict | None:
    """The conflict ``exc`` is (None: not a commit conflict), by its type alone."""
    from lance.commit import CommitConflictError

    if isinstance(exc, RetryCommit):
        return Conflict.RETRYABLE
    if isinstance(exc, CommitConflictError):
        return Conflict.RETRYABLE if exc.retryable else Conflict.INCOMPATIBLE
    return None


def is_retryable_conflict(exc: BaseException) -> bool:
    """True for Lance's retryable commit conflicts (``lance.commit.CommitConflictError`` with ``retryable``)."""
    return conflict_of(exc) is Conflict.RETRYABLE


@dataclass(frozen=True)
class Attempt:
    """One try of a commit: its number (0: the first) and, for a retry or a change that looks first, the
    table's latest version (else None: the change commits against the version it was built on)."""

    number: int
    latest: Dataset | None


@dataclass(frozen=True)
class Committed(Generic[T]):
    """What a commit returned, how many retries it took, and whether it had landed before (not made again)."""

    value: T
    retries: int
    landed_before: bool = False


class _Conflicted(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def commit(table: TableRef, what: str, apply: Callable[[Attempt], T], *,
           landed: Callable[[Dataset], T | None] | None = None, policy: CommitPolicy | None = None,
           reapplies: bool = False, look_first: bool = False) -> Committed[T]:
    """Runs ``apply`` until it commits, retrying its conflicts within ``policy``.

    ``what`` names the change in errors and logs ("commit of column(s) 'y'").  Before a retry -- and
    before the first attempt when ``look_first`` -- the table's latest version is opened and ``landed``
    asked whether the change is already in it (its value then returned, nothing committed).  ``reapplies``:
    ``apply`` builds the change anew from ``attempt.latest``, so an incompatible conflict is retried too.
    A conflict left after the retries and the time budget, or an incompatible one otherwise, raises
    :class:`CommitError` naming the table; anything else ``apply`` raises surfaces as itself.
    """
    import tenacity  # noqa: F401 -- a missing module fails as itself, before any commit is tried

    policy = policy or CommitPolicy()
    t0 = time.monotonic()
    number = -1

    def attempt() -> Committed[T]:
        nonlocal number
        number += 1
        latest = table.dataset() if number or look_first else None
        if latest is not None and landed is not None and (done := landed(latest)) is not None:
            if number:
                log.info("%s to table '%s' had landed at version %d; not committed again", what, table.name,
                         latest.version)
            return Committed(done, number, landed_before=True)
        try:
            return Committed(apply(Attempt(number, latest)), number)
        except Exception as exc:
            kind = conflict_of(exc)
            if kind is Conflict.RETRYABLE or (kind is Conflict.INCOMPATIBLE and reapplies):
                log.warning("%s to table '%s' conflicted (%s); retrying at the latest version", what, table.name,
                            lance_reason(exc.__cause__ if isinstance(exc, RetryCommit) and exc.__cause__ else exc))
                raise _Conflicted(exc) from exc
            if kind is Conflict.INCOMPATIBLE:
                raise CommitError(f"{what} to table '{table.name}' failed: {lance_reason(exc)}") from exc
            raise

    try:
        for tries in policy.retrying(lambda e: isinstance(e, _Conflicted)):
            with tries:
                return attempt()
    except _Conflicted as conflicted:
        cause = conflicted.cause
        reason = cause.__cause__ if isinstance(cause, RetryCommit) and cause.__cause__ else cause
        raise CommitError(
            f"{what} to table '{table.name}' still conflicted after {number} retries in "
            f"{time.monotonic() - t0:.0f}s ({policy.describe()}): {lance_reason(reason)}") from cause
    raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover


def commit_messages(ds: Dataset, since_version: int) -> list[str]:
    """The messages of the commits after ``since_version`` up to ``ds``'s version, newest first."""
    if ds.version <= since_version:
        return []
    return [(t.transaction_properties or {}).get(COMMIT_MESSAGE, "")
            for t in ds.get_transactions(ds.version - since_version) if t is not None]


def is_own_commit(transaction_properties: dict[str, str] | None) -> bool:
    """True when a commit's message says this package made it (:data:`OWN_COMMIT_PREFIX`)."""
    return (transaction_properties or {}).get(COMMIT_MESSAGE, "").startswith(OWN_COMMIT_PREFIX)
