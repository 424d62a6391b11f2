"""The built-in followers of a change: a table's ``auto_backfill`` columns and its ``refresh_on_change`` views.

A change of a table -- another writer's commit, or a view's refresh -- is followed by a backfill of each of its
``auto_backfill`` UDF columns (:class:`BackfillColumn`) and a refresh of each view made with
``refresh_on_change=True`` over it (:class:`RefreshView`), whose refresh is in turn a change of the view: its own
``auto_backfill`` columns (a chunk view's embedding) and the views over it follow (source -> view -> view).  What the
tables' schemas record is the graph; nothing here opens a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from geneva_provider.pipeline.followers.graph import (
    ColumnBackfilled,
    FollowerPlan,
    FollowEvent,
    Step,
    TableChange,
    TableFacts,
    ViewRefreshed,
    follows,
    plan_of,
    register_step,
)

META_REFRESH_ON_CHANGE = "geneva::view::refresh_on_change"  # "true": a change of the source refreshes the view


@register_step
class BackfillColumn(Step):
    """Backfill ``column`` of ``table`` (a table or a view): its commit is a :class:`ColumnBackfilled`."""

    kind: Literal["backfill_column"] = "backfill_column"
    table: str
    column: str

    def done(self) -> FollowEvent:
        return ColumnBackfilled(table=self.table, column=self.column)

    def writes(self) -> str:
        return self.table

    def label(self, root: str) -> str:
        return f"backfill_{self.column}" if self.table == root else f"backfill_{self.table}_{self.column}"


@register_step
class RefreshView(Step):
    """Refresh ``view`` after its ``source`` (and every step writing it): its commit is a :class:`ViewRefreshed`."""

    kind: Literal["refresh_view"] = "refresh_view"
    view: str
    source: str

    def done(self) -> FollowEvent:
        return ViewRefreshed(table=self.view)

    def writes(self) -> str:
        return self.view

    def reads(self) -> str:
        return self.source

    def label(self, root: str) -> str:
        return f"refresh_{self.view}"

    def join_label(self, root: str, cause: str | None) -> str:
        # Always a join: a source with nothing to compute skips its steps, and the view is refreshed all the same.
        return f"after_{self.source}_for_{self.view}"


@follows(TableChange, ViewRefreshed)
def after_a_change(event: FollowEvent, tables: Mapping[str, TableFacts]) -> Iterable[Step]:
    """A changed table's ``auto_backfill`` columns, then the ``refresh_on_change`` views over it (by name)."""
    table = event.table
    steps: list[Step] = [BackfillColumn(table=table, column=c)
                         for c in (auto_backfill_columns(tables[table].schema) if table in tables else [])]
    views = sorted(name for name, t in tables.items() if name != table and view_source_of(t.schema) == table
                   and decoded(t.schema.metadata).get(META_REFRESH_ON_CHANGE) == "true")
    return steps + [RefreshView(view=v, source=table) for v in views]


def change_steps(table: str, columns: Sequence[str], views: Sequence[tuple[str, str]],
                 view_columns: Sequence[tuple[str, str]] = ()) -> FollowerPlan:
    """The plan of a change of ``table`` given by name instead of read from the tables: ``columns`` of the table,
    ``views`` ((view, source) pairs) and ``view_columns`` ((view, column) pairs, of views among ``views``: a view
    not refreshed has no column backfilled), wired as a walk would."""
    refreshed = {v for v, _ in views}
    found: list[tuple[Step, FollowEvent]] = [(BackfillColumn(table=table, column=c), TableChange(table=table))
                                             for c in columns]
    found += [(RefreshView(view=v, source=s), ViewRefreshed(table=s) if s in refreshed else TableChange(table=table))
              for v, s in views]
    found += [(BackfillColumn(table=v, column=c), ViewRefreshed(table=v)) for v, c in view_columns if v in refreshed]
    return plan_of(TableChange(table=table), found)


def auto_backfill_columns(schema: Any) -> list[str]:
    """The ``auto_backfill`` UDF columns of a table or view, but not a query view's own UDF columns (its
    refresh computes those): the columns ``add_columns`` put on it."""
    from geneva_provider.core.functions.udf import udf_column_info
    from geneva_provider.core.views.meta import query_udf_columns

    query = query_udf_columns(schema.metadata)
    return [f.name for f in schema if f.name not in query
            and (info := udf_column_info(f.metadata)) is not None and info.auto_backfill]


def view_source_of(schema: Any) -> str | None:
    """The source table a view's schema metadata names (a query view or a UDTF view), or None: not a view."""
    from geneva_provider.core.views.meta import META_BASE_TABLE
    from geneva_provider.core.views.udtf_meta import META_UDTF_VIEW

    md = decoded(schema.metadata)
    if META_BASE_TABLE in md:
        return md[META_BASE_TABLE]
    if META_UDTF_VIEW in md:
        from geneva_provider.core.views.udtf_meta import UdtfViewSpec

        return UdtfViewSpec.model_validate_json(md[META_UDTF_VIEW]).base_table
    return None


def decoded(metadata: dict[Any, Any] | None) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (metadata or {}).items()}
