"""The one declaration of a job's options, and the one parser of their templated values.

``Table.backfill``, ``View.refresh``, the plan operators and both task groups all take their
options from these dataclasses, so a new option is added once.  Values that arrive through
Airflow templates are strings ("None", "", "12"); :meth:`JobOptions.parse` turns them into
the declared types, naming the argument when one cannot be.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Self

from geneva_provider.core.errors import InvalidArgumentError

DEFAULT_MIN_CHECKPOINT_SIZE = 1_000
DEFAULT_MAX_CHECKPOINT_SIZE = 100_000
DEFAULT_CHECKPOINT_SIZE = 10_000  # a UDTF refresh's parents per part (apply sizes checkpoints by measured speed)
_POSITIVE = "positive"
_NON_NEGATIVE = "non-negative"
_SECONDS = "seconds"  # a positive number of seconds, or a timedelta (stored as seconds)
_SECONDS_OR_ZERO = "seconds or zero"  # the same, or 0
_UNSET = ("", "None", "none", "null")  # what an unset templated value renders as


def _option(doc: str, *, positive: bool = True, zero: bool = False, seconds: bool = False) -> Any:
    """An option field: None by default (sized to the data), with its doc and whether it must be > 0 (or >= 0),
    or be a duration (``seconds``)."""
    check = (_SECONDS_OR_ZERO if zero else _SECONDS) if seconds else (_NON_NEGATIVE if zero else _POSITIVE) \
        if positive else None
    return dataclasses.field(default=None, metadata={"doc": doc, "check": check})


@dataclass(frozen=True)
class JobOptions:
    """Tuning shared by backfills and view refreshes; ``None`` means a default sized to the data."""

    checkpoint_size: int | None = _option(
        "rows per batch checkpoint and UDF call; alone, it fixes the size.  Otherwise sizes are measured: a "
        "probe of min(100, min bound) rows, then ~3 s of the UDF's work per checkpoint (a chunker view's refresh: "
        "the parents per part of a task, default 10,000)")
    min_checkpoint_size: int | None = _option(
        "lower bound of the measured checkpoint sizes after the probe (default 1,000); also the smallest task")
    max_checkpoint_size: int | None = _option("upper bound of the measured checkpoint sizes (default 100,000)")
    task_size: int | None = _option("rows per Spark task, all equal (default: guided, shrinking tasks)")
    commit_granularity: int | None = _option("fragments per DataReplacement commit")
    concurrency: int | None = _option("Spark partitions the tasks are dealt over")
    commit_retries: int | None = _option("retries of a conflicting commit (default 8; 0: none)", zero=True)
    commit_timeout: int | None = _option("seconds a commit may spend retrying conflicts (default 300)")
    batch_checkpoint_flush_interval_seconds: float | None = _option(
        "seconds of UDF work each batch checkpoint holds, so at most this much per running task is computed again "
        "after a kill (default 3; the sizes stay within the min/max bounds); 0: every checkpoint holds "
        "min_checkpoint_size rows and is written at once.  The reference's and the Lance Namespace backfill "
        "request's name", seconds=True, zero=True)

    # ------------------------------------------------------------------ declaration
    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option this kind of job takes."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def docs(cls) -> dict[str, str]:
        """What each option means (an operator's ``:param`` entries are made of these)."""
        return {f.name: f.metadata["doc"] for f in dataclasses.fields(cls)}

    @classmethod
    def parse(cls, values: dict[str, Any] | None = None, *, job: str = "job", **kwargs: Any) -> Self:
        """Builds and validates the options from keyword values, templated strings included.

        Unknown names and values of the wrong type raise :class:`InvalidArgumentError` naming
        the argument; ``job`` ("backfill of table 'events'") says whose options they are.
        """
        given = {**(values or {}), **kwargs}
        unknown = sorted(set(given) - set(cls.names()))
        if unknown:
            raise InvalidArgumentError(f"{job}: unknown option(s) {unknown}; valid options: {list(cls.names())}")
        hints = typing.get_type_hints(cls)
        parsed = {name: _coerce(value, hints[name], name, job) for name, value in given.items()}
        cls.check({**{name: None for name in cls.names()}, **parsed}, job)  # named after the job, not the class
        return cls(**parsed)

    @classmethod
    def coerce(cls, options: Any, job: str) -> Self:
        """These options from an instance (valid by construction), a dict of (templated) values, or None."""
        if options is None:
            return cls()
        if isinstance(options, dict):
            return cls.parse(options, job=job)
        if not isinstance(options, cls):
            raise InvalidArgumentError(f"{job}: options must be a {cls.__name__} or a dict, got {options!r}")
        return options

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        """Every instance is valid, however it was built: a bad value fails where it is written, not in a stage."""
        self.validate(type(self).__name__)
        for f in dataclasses.fields(self):  # a duration is kept as seconds, as a templated one arrives
            if isinstance(value := getattr(self, f.name), timedelta):
                object.__setattr__(self, f.name, value.total_seconds())

    def validate(self, job: str = "job") -> None:
        """Rejects values of the wrong type, non-positive sizes and inverted bounds, naming the argument."""
        self.check({name: getattr(self, name) for name in self.names()}, job)

    @classmethod
    def check(cls, values: dict[str, Any], job: str) -> None:
        """Raises InvalidArgumentError naming the first bad value of ``values`` (every option, typed)."""
        for f in dataclasses.fields(cls):
            value = values.get(f.name)
            check = f.metadata.get("check")
            if value is None:
                continue
            if check is None:  # a string option (the filter)
                if not isinstance(value, str):
                    raise InvalidArgumentError(f"{job}: {f.name} must be a string, got {value!r}")
                continue
            if check in (_SECONDS, _SECONDS_OR_ZERO):
                check_seconds(value, f.name, job, zero=check == _SECONDS_OR_ZERO)
                continue
            check_count(value, f.name, job, zero=check == _NON_NEGATIVE)
        lo, hi = _bounds(values.get("checkpoint_size"), values.get("min_checkpoint_size"),
                         values.get("max_checkpoint_size"))
        if lo > hi:
            raise InvalidArgumentError(f"{job}: min_checkpoint_size {lo} > max_checkpoint_size {hi}")

    def task_settings(self, now: float) -> dict[str, Any]:
        """What the apply stage's tasks need of the options beyond the sizes (a backfill's adds some)."""
        return {}

    # ------------------------------------------------------------------ derived sizes
    def checkpoint_bounds(self) -> tuple[int, int]:
        """``(min, max)`` checkpoint rows; a lone ``checkpoint_size`` fixes the size."""
        return _bounds(self.checkpoint_size, self.min_checkpoint_size, self.max_checkpoint_size)

    def initial_checkpoint_size(self) -> int:
        """``checkpoint_size`` within the bounds (10,000 by default): the plan's ``settings.checkpoint_size``.

        A UDTF view's refresh cuts its tasks into parts of this many parents.  It is not the first
        checkpoint of an apply: ``pipeline/stages/checkpoint_sizing.py`` sizes those from the measured speed
        (a fixed 10,000 rows cost a slow UDF killed mid-task everything it had computed).
        """
        lo, hi = self.checkpoint_bounds()
        return min(max(self.checkpoint_size or DEFAULT_CHECKPOINT_SIZE, lo), hi)


@dataclass(frozen=True)
class BackfillOptions(JobOptions):
    """Options of a column backfill: which rows, at which version, and the tuning."""

    where: str | None = _option("SQL filter of the rows to compute", positive=False)
    read_version: int | None = _option("table version to read and commit against")
    intra_applier_concurrency: int | None = _option(
        "UDF calls in flight at once in each Spark task (default: the UDF's concurrency); values keep the rows' "
        "order")
    num_frags: int | None = _option(
        "a sample run: only the first N fragments that need work are planned; the next backfill plans the rest")
    timeout: float | None = _option(
        "seconds (or a timedelta) the job may run: past it, tasks stop at their next checkpoint, nothing is "
        "committed, and the result says timed_out; a later backfill resumes from the checkpoints", seconds=True)

    def task_settings(self, now: float) -> dict[str, Any]:
        """What the apply stage's tasks need of these options: calls in flight, and the deadline (epoch seconds)."""
        return {"intra_applier_concurrency": self.intra_applier_concurrency,
                "deadline": None if self.timeout is None else now + self.timeout}


@dataclass(frozen=True)
class RefreshOptions(JobOptions):
    """Options of a materialized-view refresh: which source version, how new rows are split, and the tuning."""

    src_version: int | None = _option("source table version to refresh to (default: latest)")
    max_rows_per_fragment: int | None = _option("rows per new view fragment")


def _bounds(size: int | None, lo: int | None, hi: int | None) -> tuple[int, int]:
    """``(min, max)`` checkpoint rows from the three options; a lone ``size`` fixes the size."""
    if lo is None and hi is None and size:
        return size, size
    lo = lo or min(DEFAULT_MIN_CHECKPOINT_SIZE, hi or DEFAULT_MIN_CHECKPOINT_SIZE)
    return lo, hi or max(DEFAULT_MAX_CHECKPOINT_SIZE, lo)


def check_count(value: Any, name: str, job: str, *, zero: bool = False) -> int | None:
    """``value`` if it is None or an int >= 1 (>= 0 with ``zero``); else InvalidArgumentError naming ``name``.

    Strings (even "4") and bools are not counts: a string here is a caller's mistake, not a template.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero else 1):
        kind = _NON_NEGATIVE if zero else _POSITIVE
        raise InvalidArgumentError(f"{job}: {name} must be a {kind} integer, got {value!r}")
    return value


def check_seconds(value: Any, name: str, job: str, *, zero: bool = False) -> float | None:
    """``value`` as positive seconds (a number or a timedelta; 0 too with ``zero``); else InvalidArgumentError
    naming ``name``."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0 \
            or (seconds == 0 and not zero):
        kind = "non-negative" if zero else "positive"
        raise InvalidArgumentError(f"{job}: {name} must be a {kind} number of seconds or a datetime.timedelta, "
                                   f"got {value!r}")
    return float(seconds)


def parse_count(value: Any, name: str, job: str, *, zero: bool = False) -> int | None:
    """A templated count ("12", "None", "" or an int) as :func:`check_count` takes it, naming ``name``."""
    if isinstance(value, str):
        text = value.strip()
        if text in _UNSET:
            return None
        try:
            value = int(text)
        except ValueError:
            check_count(value, name, job, zero=zero)  # raises, naming the string
    return check_count(value, name, job, zero=zero)


def rendered_later(value: Any) -> bool:
    """True for a value filled in at run time -- a Jinja template string, an Airflow XComArg -- so not checkable yet.

    Plain values (None, numbers, durations, strings without ``{{``) are known when a DAG is parsed.
    """
    if isinstance(value, str):
        return "{{" in value
    return not (value is None or isinstance(value, int | float | timedelta))


def _coerce(value: Any, hint: Any, name: str, job: str) -> Any:
    """A templated or typed value as the declared ``int | None`` / ``str | None``."""
    if isinstance(value, str) and value.strip() in _UNSET:
        return None
    if value is None:
        return None
    target = next(t for t in typing.get_args(hint) if t is not type(None)) if isinstance(
        hint, types.UnionType) else hint
    if target is int and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise InvalidArgumentError(f"{job}: {name} must be an integer, got {value!r}") from None
    if target is float and isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise InvalidArgumentError(f"{job}: {name} must be a number of seconds, got {value!r}") from None
    if target is float and isinstance(value, timedelta):
        return value.total_seconds()  # checked positive by check()
    if target is str and not isinstance(value, str):
        raise InvalidArgumentError(f"{job}: {name} must be a string, got {value!r}")
    return value
