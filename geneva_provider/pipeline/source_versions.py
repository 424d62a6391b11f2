"""A view's source table, at a version, and what happened to it since another: shared by every view's planner
and by the check of a UDTF view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from geneva_provider.core.catalog import Catalog, TableResolver
from geneva_provider.core.column_paths import missing_paths
from geneva_provider.core.errors import InvalidArgumentError, TableNotFoundError
from geneva_provider.core.filters import check_where
from geneva_provider.core.refs import TableRef
from geneva_provider.core.table_status import ViewLag

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset


def view_source(view: TableRef, db_uri: str, table: str, resolve: TableResolver | None, doing: str = "refresh"
                ) -> TableRef:
    """The source table a view's metadata names (``resolve``: by default a directory database at the recorded
    URI); TableNotFoundError naming the view when it is gone, so a DAG refreshing many views knows which broke."""
    resolve = resolve or (lambda db_uri, name: Catalog(db_uri, view.storage_options).ref(name))
    try:
        return resolve(db_uri, table)
    except TableNotFoundError as exc:
        raise TableNotFoundError(f"{doing} of view '{view.name}': its source table '{table}' was not "
                                 f"found ({exc})") from None


def readable_source(view: str, source: TableRef, version: int | None, columns: list[str], where: str | None
                    ) -> Dataset:
    """The source at ``version`` (latest when None), checked to hold the ``columns`` the view reads and to
    accept its ``where``, before anything of the view changes."""
    src = source_at(source, version, view)
    missing = missing_paths(src.schema, columns)
    if missing:  # e.g. a version older than a column the view reads
        raise InvalidArgumentError(
            f"refresh of view '{view}': source table '{source.name}' at version {src.version} has no "
            f"column(s) {missing}, which the view reads; refresh to a version that has them")
    check_where(src, where, f"view '{view}' at source version {src.version}")
    return src


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


def view_lag(source: TableRef, since: int | None) -> ViewLag:
    """How far a view refreshed from ``source`` at version ``since`` (None: never) is behind the source's latest:
    rows created, updated and deleted since, from Lance's row version columns (stable row ids) -- no data is read."""
    src = source.dataset()
    latest_rows = src.count_rows()
    if since is None:
        return ViewLag(source=source.name, source_version=None, source_latest=src.version, rows_created=latest_rows,
                       rows_updated=0, rows_deleted=0)
    try:
        kept = src.count_rows(filter=f"_row_created_at_version <= {since}")
        updated = src.count_rows(
            filter=f"_row_created_at_version <= {since} AND _row_last_updated_at_version > {since}")
    except (ValueError, OSError):  # no row version columns (a table without stable row ids)
        return ViewLag(source=source.name, source_version=since, source_latest=src.version, rows_created=None,
                       rows_updated=None, rows_deleted=None)
    try:
        deleted: int | None = source.dataset(since).count_rows() - kept if since <= src.version else None
    except (ValueError, OSError):  # that version was cleaned up
        deleted = None
    return ViewLag(source=source.name, source_version=since, source_latest=src.version,
                   rows_created=latest_rows - kept, rows_updated=updated, rows_deleted=deleted)
