"""Which commits to a table matter to the jobs that follow it, and what follows it (pipeline: never sees Airflow).

A table watcher (``LanceTableChangedTrigger``) asks :func:`changes_since` what happened after the version it last
reported: the commits of other writers that change rows -- appends, deletes, updates (``merge_insert`` is an
``Update`` to Lance), overwrites, a column's data replaced -- and not this package's own (a backfill's column
writes, a view's refresh, schema changes: their commit messages start with
:data:`~geneva_provider.pipeline.committer.OWN_COMMIT_PREFIX`), nor those that move no row (a compaction's
``Rewrite``, an index, a config change), so a DAG that listens to a table and backfills it does not start itself.

:func:`change_followers` says what a change of a table is followed by: its ``auto_backfill`` UDF columns, and the
views with ``refresh_on_change`` over it, then over those views (source -> view -> view), in an order that
refreshes every view after its source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from geneva_provider.core.table_events import TableChanged
from geneva_provider.pipeline.committer import is_own_commit

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

CHANGE_OPERATIONS = ("Append", "Delete", "Update", "Overwrite", "DataReplacement")
"""The Lance operations that change rows, hence what a watcher reports by default."""
META_REFRESH_ON_CHANGE = "geneva::view::refresh_on_change"  # "true": a change of the source refreshes the view


def changes_since(ds: Dataset, table: str, since: int, operations: Sequence[str] | None = None,
                  columns: Sequence[str] | None = None) -> TableChanged | None:
    """The commits after version ``since`` up to ``ds``'s that matter, or None when none does.

    ``operations`` (default :data:`CHANGE_OPERATIONS`) are the Lance operations reported; a commit whose
    transaction Lance no longer has is reported (as ``Unknown``): missing a change is worse than a no-op run.
    With ``columns``, an ``Update`` or ``DataReplacement`` that says which fields it wrote and wrote none of
    them (an unrelated column) is left out; an ``Update`` that rewrote whole rows always counts.
    """
    if ds.version <= since:
        return None
    wanted = set(operations or CHANGE_OPERATIONS)
    watched = _field_ids(ds, columns) if columns else None
    newest_first = ds.get_transactions(ds.version - since)
    kept: list[tuple[int, str, Any]] = []
    own = 0
    for offset, tx in enumerate(newest_first):
        version = ds.version - offset
        if tx is None:
            kept.append((version, "Unknown", None))
            continue
        if is_own_commit(tx.transaction_properties):
            own += 1
            continue
        name = type(tx.operation).__name__
        if name in wanted and (watched is None or _touches(tx.operation, watched)):
            kept.append((version, name, tx.operation))
    if not kept:
        return None
    kept.reverse()
    added, deleted, updated = 0, 0 if ds.has_stable_row_ids else None, 0 if ds.has_stable_row_ids else None
    for version, name, op in kept:
        if name in ("Append", "Overwrite"):
            added += sum(f.physical_rows for f in op.fragments)
        elif name in ("Delete", "Update") and ds.has_stable_row_ids:
            # Lance's change feed of that one version (exact with stable row ids; silently empty without them)
            delta = ds.delta(begin_version=version - 1, end_version=version)
            deleted = (deleted or 0) + delta.get_deleted_row_ids().read_all().num_rows
            updated = (updated or 0) + delta.get_updated_rows().read_all().num_rows
            added += delta.get_inserted_rows().read_all().num_rows
    return TableChanged(table=table, from_version=since, to_version=ds.version, operations=[n for _, n, _ in kept],
                        own_commits=own, rows_added=added, rows_deleted=deleted, rows_updated=updated)


def _field_ids(ds: Dataset, columns: Sequence[str]) -> set[int]:
    from geneva_provider.core.fragments import column_field_ids

    return {i for c in columns if c in ds.schema.names for i in column_field_ids(ds, c)}


def _touches(op: Any, watched: set[int]) -> bool:
    """False only when the operation says which fields it wrote and none is watched."""
    name = type(op).__name__
    if name == "Update" and op.fields_modified:
        return bool(watched & set(op.fields_modified))
    if name == "DataReplacement":
        return any(watched & set(r.new_file.fields) for r in op.replacements)
    return True


class ChangeFollowers(BaseModel):
    """What a change of ``table`` is followed by: its ``auto_backfill`` columns, then views over it in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str
    columns: list[str]
    views: list[tuple[str, str]]  # (view, its source), every view after its source
    view_columns: list[tuple[str, str]] = []  # (view, column): a following view's own auto_backfill columns


def change_followers(table: str, schemas: Mapping[str, Any]) -> ChangeFollowers:
    """The followers of ``table`` among the tables ``schemas`` describes (name -> Arrow schema).

    A column follows when its ``@udf(auto_backfill=True)`` is recorded on it; a view follows when it was made
    with ``refresh_on_change=True`` and its source is ``table`` or a view that follows, and so do such columns
    added to a following view (a chunk view's embedding), after its refresh.  The views come in breadth-first
    order from ``table``, so each one's source is refreshed before it.
    """
    columns = _auto_backfill_columns(schemas[table]) if table in schemas else []
    sources = {name: src for name, schema in schemas.items() if (src := view_source_of(schema)) is not None
               and _decoded(schema.metadata).get(META_REFRESH_ON_CHANGE) == "true"}
    views: list[tuple[str, str]] = []
    frontier = [table]
    while frontier:
        nxt = sorted(v for v, s in sources.items() if s in frontier and v not in {w for w, _ in views} and v != table)
        views += [(v, sources[v]) for v in nxt]
        frontier = nxt
    view_columns = [(v, c) for v, _ in views for c in _auto_backfill_columns(schemas[v])]
    return ChangeFollowers(table=table, columns=columns, views=views, view_columns=view_columns)


def _auto_backfill_columns(schema: Any) -> list[str]:
    """The ``auto_backfill`` UDF columns of a table or view, but not a query view's own UDF columns (its
    refresh computes those): the columns ``add_columns`` put on it."""
    from geneva_provider.core.functions.udf import udf_column_info
    from geneva_provider.core.views.meta import META_QUERY, StoredViewQuery

    md = _decoded(schema.metadata)
    query = set(StoredViewQuery.model_validate_json(md[META_QUERY]).udf_columns) if META_QUERY in md else set()
    return [f.name for f in schema if f.name not in query
            and (info := udf_column_info(f.metadata)) is not None and info.auto_backfill]


def view_source_of(schema: Any) -> str | None:
    """The source table a view's schema metadata names (a query view or a UDTF view), or None: not a view."""
    from geneva_provider.core.views.meta import META_BASE_TABLE
    from geneva_provider.core.views.udtf_meta import META_UDTF_VIEW

    md = _decoded(schema.metadata)
    if META_BASE_TABLE in md:
        return md[META_BASE_TABLE]
    if META_UDTF_VIEW in md:
        from geneva_provider.core.views.udtf_meta import UdtfViewSpec

        return UdtfViewSpec.model_validate_json(md[META_UDTF_VIEW]).base_table
    return None


def _decoded(metadata: dict[Any, Any] | None) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (metadata or {}).items()}
