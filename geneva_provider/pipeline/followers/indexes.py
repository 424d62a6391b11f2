"""The index followers: an index is refreshed after every commit that leaves some of its fragments unindexed.

A backfill's ``DataReplacement`` of an indexed column un-indexes exactly the fragments it rewrote, a view's
refresh adds and rewrites fragments, a compaction's remap may leave fragments uncovered, and another writer's
append adds fragments no segment covers (lance.md §13): each is followed by a :class:`RefreshIndex` of the
indexes it touched, which indexes add-only the fragments no segment covers with the index's saved artifacts
(``pipeline/indexes/upkeep.py``; nothing to do: no Spark job, no commit).  What the tables' facts record (their
indexes, their UDF columns) is the graph; nothing here opens a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from geneva_provider.pipeline.followers.graph import (
    ColumnBackfilled,
    Compacted,
    Step,
    TableChange,
    TableFacts,
    ViewRefreshed,
    follows,
    register_step,
)


@register_step
class RefreshIndex(Step):
    """Index, add-only, the fragments of ``table`` that the index ``index`` does not cover.

    It reads ``table`` (so it comes after every step of the walk writing it: a view's columns are backfilled
    before its index is refreshed) and writes no rows a reader sees; nothing follows it.
    """

    kind: Literal["refresh_index"] = "refresh_index"
    table: str
    index: str

    def reads(self) -> str:
        return self.table

    def label(self, root: str) -> str:
        return f"index_{self.index}" if self.table == root else f"index_{self.table}_{self.index}"


def _refreshes(table: str, tables: Mapping[str, TableFacts], columns: Iterable[str] | None = None) -> list[Step]:
    """A :class:`RefreshIndex` of each index of ``table`` (only those on any of ``columns``, when given)."""
    if table not in tables:
        return []
    wanted = None if columns is None else set(columns)
    return [RefreshIndex(table=table, index=name) for name, on in sorted(tables[table].indexes.items())
            if wanted is None or wanted & set(on)]


@follows(ColumnBackfilled)
def after_a_backfill(event: ColumnBackfilled, tables: Mapping[str, TableFacts]) -> Iterable[Step]:
    """The indexes on the backfilled column (or on any column of its multi-output group)."""
    from geneva_provider.core.functions.udf import computed_with

    facts = tables.get(event.table)
    columns = computed_with(facts.schema, event.column) if facts is not None else [event.column]
    return _refreshes(event.table, tables, columns)


@follows(Compacted)
def after_a_compaction(event: Compacted, tables: Mapping[str, TableFacts]) -> Iterable[Step]:
    """Every index of a compacted table: the remap check (what the compaction's remap left uncovered)."""
    return _refreshes(event.table, tables)


@follows(TableChange, ViewRefreshed)
def after_a_change(event: TableChange | ViewRefreshed, tables: Mapping[str, TableFacts]) -> Iterable[Step]:
    """The indexes on the columns the change wrote: the writer's (another writer's rows) or the refresh's (a view's
    rows and its query's UDF columns) -- not on a UDF column its backfill computes: that backfill's
    :class:`ColumnBackfilled` is followed by the refresh of its index."""
    from geneva_provider.core.views.meta import added_udf_columns

    facts = tables.get(event.table)
    if facts is None:
        return []
    added = added_udf_columns(facts.schema)
    return [RefreshIndex(table=event.table, index=name) for name, on in sorted(facts.indexes.items())
            if not added & set(on)]
