"""SQL filters (``where``) and Lance's error messages, as users should read them (core).

Lance reports a bad filter as a ``ValueError`` whose message starts with "Invalid user input";
anything else (I/O, permissions, a missing file) is not the filter's fault and is not reported
as one.  Lance also appends the Rust source location after ", /" -- it says nothing to a user.
"""

from __future__ import annotations

from typing import Any

from geneva_provider.core.errors import InvalidArgumentError

_USER_INPUT = "Invalid user input"


def lance_reason(exc: BaseException) -> str:
    """Lance's message without the Rust source path it appends."""
    return str(exc).split(", /")[0]


def is_filter_error(exc: BaseException) -> bool:
    """True when Lance rejected the filter itself (unknown column, syntax, types)."""
    return isinstance(exc, ValueError) and str(exc).startswith(_USER_INPUT)


def check_where(ds: Any, where: str | None, subject: str) -> None:
    """Raises :class:`InvalidArgumentError` naming ``subject`` if Lance rejects ``where`` on ``ds``."""
    if where is None:
        return
    try:
        ds.scanner(filter=where, columns=[], with_row_address=True, limit=1).to_table()
    except ValueError as exc:
        if not is_filter_error(exc):
            raise
        raise InvalidArgumentError(f"invalid where filter {where!r} for {subject}: {lance_reason(exc)}") from None
