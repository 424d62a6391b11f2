"""A view's source at a version, and what happened to it since another: shared by every view's planner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.refs import TableRef

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


def source_at(source: TableRef, version: int | None, view: str) -> Dataset:
    """The source table at ``version`` (latest when None); InvalidArgumentError naming the view when it is gone."""
    try:
        return source.dataset(version)
    except (ValueError, OSError) as exc:
        if version is None:
            raise
        raise InvalidArgumentError(f"refresh of view '{view}': source table '{source.name}' has no version "
                                   f"{version} (it may have been cleaned up)") from exc


def only_appends(src: Dataset, since: int) -> bool:
    """True when the source changed since version ``since`` by appends alone."""
    if src.version < since:
        return False
    try:
        transactions = src.delta(compared_against=since).list_transactions()
    except (ValueError, OSError):  # an old version cleaned up: synchronise everything
        return False
    return all(type(t.operation).__name__ == "Append" for t in transactions if t is not None)
