"""SQL filters (``where``) and Lance's error messages, as users should read them (core).

Any error Lance raises while planning a filter is the filter's fault -- a syntax error, an unknown
column or function, an aggregate (``sum(x) > 3``); running it, only errors starting with "Invalid
user input" are: I/O failures (a missing file, a permission) are reported as they are.  Lance also
appends the Rust source location after ", /" -- it says nothing to a user.

Lance parses a filter as ``SELECT 1 FROM t WHERE <filter>`` and silently ignores whatever follows
the first complete expression (``x > 1; DROP TABLE t``, ``x > 100 garbage``, ``x > 1) OR (true``),
so a filter is checked as ``(<filter>)`` too -- the closing parenthesis makes Lance read all of it
-- with its parentheses balanced and no ``;`` outside string literals and quoted names.

For an unknown column Lance lists every field it knows ("Valid fields are ..."), its own ``_rowid``
and the package's fingerprint and view columns among them; the error lists the user's columns instead.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

_USER_INPUT = "Invalid user input"
_MAX_REASON = 300  # Lance prints whole logical plans in some messages (kilobytes)
_QUOTES = "'\"`"
_VALID_FIELDS = re.compile(r"Valid fields are .*?\.(?=\s|$)", re.DOTALL)  # to the full stop ending the sentence


def lance_reason(exc: BaseException, limit: int | None = None) -> str:
    """Lance's message without the Rust source path it appends (cut at ``limit`` characters)."""
    return _cut(str(exc).split(", /")[0], limit)


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit] + "..."


def is_filter_error(exc: BaseException) -> bool:
    """True when Lance rejected the filter while running it (unknown column, syntax, types), not an I/O failure."""
    return isinstance(exc, ValueError) and str(exc).startswith(_USER_INPUT)


def unquoted_problem(where: str) -> str | None:
    """Why Lance would read only part of ``where``: a ``;`` or an unbalanced ``)`` outside quotes (else None).

    Quotes are SQL's: '...' strings, "..." and `...` names, a doubled quote standing for itself
    (it closes and reopens, which the scan sees the same way).
    """
    quote, depth = None, 0
    for ch in where:
        if quote is not None:
            quote = None if ch == quote else quote
        elif ch in _QUOTES:
            quote = ch
        elif ch == ";":
            return "';' ends the filter and Lance would ignore what follows; use AND / OR"
        elif ch in "()":
            depth += 1 if ch == "(" else -1
            if depth < 0:
                return "a ')' closes no '(' and Lance would ignore what follows it"
    return None


def check_where(ds: Dataset, where: Any, subject: str) -> None:
    """Raises :class:`InvalidArgumentError` naming ``subject`` and ``where`` unless Lance reads all of ``where``.

    ``None`` (every row) passes.  The filter is run on at most one row of ``ds``, as ``(where)``:
    if only that form fails, Lance would have ignored the end of the filter.
    """
    if where is None:
        return
    if not isinstance(where, str):
        raise InvalidArgumentError(f"invalid where filter for {subject}: a filter is a SQL string, got {where!r}")
    problem = unquoted_problem(where)
    if problem is None and (error := _lance_error(ds, f"(\n{where}\n)")) is not None:
        # The newlines end a trailing "-- comment" before the ")"; the bare filter gives Lance's own message.
        bare = _lance_error(ds, where)
        whole = " ".join(_reason(ds, error).split())
        problem = (_reason(ds, bare) if bare is not None else
                   f"Lance reads only the start of it and would ignore the rest (read whole: {whole})")
    if problem is not None:
        raise InvalidArgumentError(f"invalid where filter {where!r} for {subject}: {problem}")


def _reason(ds: Dataset, exc: BaseException) -> str:
    """Lance's reason for rejecting a filter, its list of fields replaced by the user's columns of ``ds``."""
    from geneva_provider.core.column_names import user_columns  # loads pyarrow: not when Airflow loads the assets

    listed = f"The table's columns are {user_columns(ds.schema.names)}."
    return _cut(_VALID_FIELDS.sub(lambda _: listed, lance_reason(exc)), _MAX_REASON)


def _lance_error(ds: Dataset, where: str) -> BaseException | None:
    """The error Lance raises planning ``where`` on ``ds``, or running it on one row (None if it runs).

    Planning reads no data, so whatever fails there -- parsing, resolving, an expression Lance
    cannot execute -- is the filter's fault; a failure running it is only when Lance says so.
    """
    try:
        scanner = ds.scanner(filter=where, columns=[], with_row_address=True, limit=1)
        scanner.explain_plan()
    except (ValueError, RuntimeError, TypeError) as exc:  # an OSError is I/O, not the filter: it propagates
        return exc
    try:
        scanner.to_table()
    except ValueError as exc:
        if not is_filter_error(exc):
            raise
        return exc
    return None


_NAME = re.compile(r"""'(?:[^']|'')*'|"((?:[^"]|"")*)"|`((?:[^`]|``)*)`|([A-Za-z_][A-Za-z0-9_]*)""")


def filter_columns(where: str | None, names: Any) -> list[str]:
    """The columns among ``names`` that the SQL filter ``where`` reads, in the filter's order (none for None).

    A name counts bare (``x > 1``) or quoted (``"my col"``, ```my col```), never inside a string literal
    (``s = 'x'``); a nested field (``meta.lang``) counts as its top-level column.
    """
    if not where:
        return []
    known = set(names)
    found: list[str] = []
    for match in _NAME.finditer(where):
        quoted_double, quoted_back, bare = match.groups()
        name = (quoted_double.replace('""', '"') if quoted_double is not None
                else quoted_back.replace("``", "`") if quoted_back is not None else bare)
        if name is not None and name in known and name not in found:
            found.append(name)
    return found
