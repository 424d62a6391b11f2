"""How messages count things: "1 fragment", "2 fragments", "12,000 rows" -- one rule for every line a user reads."""

from __future__ import annotations


def noun(n: int | None, singular: str, plural: str | None = None) -> str:
    """``singular`` when ``n`` is 1, else ``plural`` (default: ``singular`` and an "s")."""
    return singular if n == 1 else plural or singular + "s"


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and its noun: "1 fragment", "12,000 rows"."""
    return f"{n:,} {noun(n, singular, plural)}"


def skipped_rows(n: int) -> str:
    """How a job's rows that the UDF's error policy skipped are named in its outcome ("" when there are none)."""
    return f"{counted(n, 'row')} skipped by the error policy (left NULL)" if n else ""
