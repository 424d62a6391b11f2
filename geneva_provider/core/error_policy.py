"""What a UDF does when a row fails: fail the job, retry, or skip the row (core).

A policy is an ordered list of matchers (``Retry``, ``Skip``, ``Fail``); the first one whose
exception types (and optional message pattern) match an error decides.  A matcher names its
exception classes first, as the reference does: ``Retry(TimeoutError, ConnectionError, max_attempts=3)``.
A ``Retry`` whose attempts are spent hands the error on to the next matcher that matches it, so
``[Retry(TimeoutError), Skip()]`` retries timeouts and then skips what still fails.  An
error no matcher takes fails the job, as without a policy.

Retries run inside the Spark task (jittered exponential, fixed or linear backoff), so a transient error
costs one row's retry, not a task's.  Every failed attempt is reported (see
:class:`RowFailure`) so the error store can hold it with its traceback.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.errors import UDFDefinitionError

Backoff = Literal["exponential", "fixed", "linear"]
TRANSIENT: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)


@dataclass(frozen=True, init=False)
class _Matcher:
    exceptions: tuple[type[BaseException], ...] = (Exception,)
    match: str | None = None  # a regular expression searched in the error message

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``Retry(TimeoutError, ConnectionError, max_attempts=3)``, as the reference writes a matcher: leading
        exception classes are its ``exceptions``.  The earlier form -- a class or a tuple of them, then the
        other fields in order (``Retry((TimeoutError,), "pattern", 3)``) -- still works."""
        rest, classes = list(args), []
        while rest and _is_exception_class(rest[0]):
            classes.append(rest.pop(0))
        names = [f.name for f in dataclasses.fields(self)]
        given: dict[str, Any] = {"exceptions": tuple(classes)} if classes else {}
        positional = names[1:] if classes else names
        kind = type(self).__name__
        if len(rest) > len(positional):
            raise TypeError(f"{kind}() takes exception classes, then at most {len(positional)} more positional "
                            f"arguments ({', '.join(positional)}); got {args!r}")
        given.update(zip(positional, rest, strict=False))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{kind}() got an unexpected keyword argument {key!r}")
            if key in given:
                raise TypeError(f"{kind}() got multiple values for argument {key!r}")
            given[key] = value
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, given.get(f.name, f.default))
        self.__post_init__()

    def matches(self, exc: BaseException) -> bool:
        return isinstance(exc, self.exceptions) and (self.match is None or re.search(self.match, str(exc)) is not None)

    def __post_init__(self) -> None:
        if isinstance(self.exceptions, type):  # Retry(TimeoutError): one class, as a tuple
            object.__setattr__(self, "exceptions", (self.exceptions,))
        elif isinstance(self.exceptions, list):
            object.__setattr__(self, "exceptions", tuple(self.exceptions))
        elif not isinstance(self.exceptions, tuple):
            object.__setattr__(self, "exceptions", (self.exceptions,))  # refused, naming it, by _check

    def _check(self, where: str) -> None:
        classes = self.exceptions
        if not isinstance(classes, tuple) or not classes or not all(
                isinstance(e, type) and issubclass(e, BaseException) for e in classes):
            raise UDFDefinitionError(f"{where}: exceptions must be exception classes, got {classes!r}")
        if self.match is not None:
            if not isinstance(self.match, str):
                raise UDFDefinitionError(f"{where}: match must be a regular expression string, got {self.match!r}")
            try:
                re.compile(self.match)
            except re.error as exc:
                raise UDFDefinitionError(f"{where}: match={self.match!r} is not a regular expression: {exc}") from None


def _is_exception_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _check_number(where: str, arg: str, value: Any, *, integer: bool = False, low: int = 0,
                  high: int | None = None) -> None:
    """UDFDefinitionError naming ``arg`` unless ``value`` is a number (an int if ``integer``) in [low, high].

    Bools are refused: ``max_attempts=True`` is a mistake, not one attempt.  NaN fails the range test.
    """
    kinds = int if integer else (int, float)
    if not isinstance(value, kinds) or isinstance(value, bool) or not (
            low <= value and (high is None or value <= high)):
        what = "an integer" if integer else "a number"
        bounds = f"within [{low}, {high}]" if high is not None else f">= {low}"
        raise UDFDefinitionError(f"{where}: {arg} must be {what} {bounds}, got {value!r}")


@dataclass(frozen=True, init=False)
class Retry(_Matcher):
    """Retries a failing row (or batch) up to ``max_attempts`` calls in all, with backoff between them."""

    max_attempts: int = 3
    backoff: Backoff = "exponential"
    initial_seconds: float = 1.0
    max_seconds: float = 60.0

    def _check(self, where: str) -> None:
        super()._check(where)
        _check_number(where, "max_attempts", self.max_attempts, integer=True, low=1)
        if self.backoff not in ("exponential", "fixed", "linear"):
            raise UDFDefinitionError(f"{where}: backoff must be 'exponential', 'fixed' or 'linear', "
                                     f"got {self.backoff!r}")
        _check_number(where, "initial_seconds", self.initial_seconds)
        _check_number(where, "max_seconds", self.max_seconds)

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure (exponential backoff is jittered)."""
        if self.backoff == "fixed":
            return min(self.initial_seconds, self.max_seconds)
        if self.backoff == "linear":
            return min(self.initial_seconds * failures, self.max_seconds)
        return min(self.initial_seconds * 2 ** (failures - 1) + random.uniform(0, self.initial_seconds),
                   self.max_seconds)


@dataclass(frozen=True, init=False)
class Skip(_Matcher):
    """Writes NULL for a failing row, and records it; the job fails past ``max_rows`` or ``max_fraction``."""

    max_rows: int | None = None
    max_fraction: float | None = None

    def _check(self, where: str) -> None:
        super()._check(where)
        if self.max_rows is not None:
            _check_number(where, "max_rows", self.max_rows, integer=True)
        if self.max_fraction is not None:
            _check_number(where, "max_fraction", self.max_fraction, high=1)


@dataclass(frozen=True, init=False)
class Fail(_Matcher):
    """Fails the job (what happens to any error no matcher takes)."""


Matcher = Retry | Skip | Fail


@dataclass(frozen=True)
class ErrorPolicy:
    """An ordered list of matchers; the first that matches an error decides."""

    matchers: tuple[Matcher, ...] = ()

    @property
    def can_skip(self) -> bool:
        return any(isinstance(m, Skip) for m in self.matchers)

    @property
    def skip_limits(self) -> tuple[int | None, float | None]:
        """The tightest ``max_rows`` and ``max_fraction`` of the policy's Skip matchers."""
        skips = [m for m in self.matchers if isinstance(m, Skip)]
        rows = [m.max_rows for m in skips if m.max_rows is not None]
        fractions = [m.max_fraction for m in skips if m.max_fraction is not None]
        return (min(rows) if rows else None, min(fractions) if fractions else None)

    def first(self, exc: BaseException, after: int = -1) -> tuple[int, Matcher | None]:
        """The first matcher past index ``after`` that takes ``exc`` (and its index)."""
        for i, m in enumerate(self.matchers):
            if i > after and m.matches(exc):
                return i, m
        return -1, None


def error_policy(on_error: Any, where: str) -> ErrorPolicy:
    """Normalises ``@udf(on_error=...)``: None, one matcher, a list of them, or an ErrorPolicy."""
    if on_error is None:
        return ErrorPolicy()
    if isinstance(on_error, ErrorPolicy):
        policy = on_error
    elif isinstance(on_error, Retry | Skip | Fail):
        policy = ErrorPolicy((on_error,))
    elif isinstance(on_error, Sequence) and not isinstance(on_error, str):
        bad = [m for m in on_error if not isinstance(m, Retry | Skip | Fail)]
        if bad:
            raise UDFDefinitionError(f"{where}: on_error takes Retry, Skip and Fail matchers, got {bad[0]!r}")
        policy = ErrorPolicy(tuple(on_error))
    else:
        raise UDFDefinitionError(f"{where}: on_error must be a Retry, Skip or Fail matcher, a list of them, or one "
                                 f"of retry_transient(), retry_all(), skip_on_error(), fail_fast(); got {on_error!r}")
    for m in policy.matchers:
        m._check(where)
    return policy


def fail_fast() -> ErrorPolicy:
    """The default: any error fails the job."""
    return ErrorPolicy()


def retry_transient(max_attempts: int = 3, backoff: Backoff = "exponential", initial_seconds: float = 1.0,
                    max_seconds: float = 60.0,
                    exceptions: tuple[type[BaseException], ...] = TRANSIENT) -> ErrorPolicy:
    """Retries network-like errors (ConnectionError, TimeoutError, OSError); anything else fails."""
    return ErrorPolicy((Retry(tuple(exceptions), None, max_attempts, backoff, initial_seconds, max_seconds),))


def retry_all(max_attempts: int = 3, backoff: Backoff = "exponential", initial_seconds: float = 1.0,
              max_seconds: float = 60.0) -> ErrorPolicy:
    """Retries any error."""
    return ErrorPolicy((Retry((Exception,), None, max_attempts, backoff, initial_seconds, max_seconds),))


def skip_on_error(max_rows: int | None = None, max_fraction: float | None = None,
                  exceptions: tuple[type[BaseException], ...] = (Exception,)) -> ErrorPolicy:
    """Skips failing rows (NULL, recorded in the error store), failing the job past a limit."""
    return ErrorPolicy((Skip(tuple(exceptions), None, max_rows, max_fraction),))


# ---------------------------------------------------------------------- running a call
@dataclass
class RowFailure:
    """One row's failure as the UDF saw it: what was raised, how often, and what became of the row."""

    index: int                   # the row within the evaluated batch
    error_type: str
    message: str
    traceback: str
    attempts: int
    outcome: RowOutcome


@dataclass
class Outcome:
    """The result of calling with a policy: the value, or why there is none."""

    value: Any = None
    ok: bool = True
    attempts: int = 1
    error: BaseException | None = None
    skipped: bool = False
    trace: str = field(default="", repr=False)


def call_with_policy(policy: ErrorPolicy, fn: Callable[[], Any]) -> Outcome:
    """Calls ``fn`` under ``policy``: retried per the first matching ``Retry``, then skipped or failed."""
    attempts = 0
    failures: dict[int, int] = {}  # matcher index -> failures it has taken
    first_error: BaseException | None = None
    while True:
        attempts += 1
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - classified by the policy
            first_error = first_error or exc
            idx, matcher = policy.first(exc)
            if isinstance(matcher, Retry):
                failures[idx] = failures.get(idx, 0) + 1
                if failures[idx] < matcher.max_attempts:
                    time.sleep(matcher.delay(failures[idx]))
                    continue
                idx, matcher = policy.first(exc, idx)  # spent: the next matcher decides
            return Outcome(ok=False, attempts=attempts, error=exc, skipped=isinstance(matcher, Skip),
                           trace=format_trace(exc))
        if first_error is None:
            return Outcome(value=value, attempts=attempts)
        return Outcome(value=value, attempts=attempts, error=first_error, trace=format_trace(first_error))


def format_trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8_000:]
