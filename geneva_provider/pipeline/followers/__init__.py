"""What follows a commit, as data: the follower graph (pipeline: plain data, never sees Airflow or the facade).

:mod:`.graph` holds the events (a table changed, a view refreshed, a column backfilled, a table compacted), the
step kinds' registry and the edges' rules, and :func:`followers_of`, which walks them from one event; :mod:`.changes`
registers the built-in steps (``BackfillColumn``, ``RefreshView``) and what a change of a table is followed by
(its ``auto_backfill`` columns, its ``refresh_on_change`` views, and theirs); :mod:`.indexes` the index step
(``RefreshIndex``) after a column's backfill, a view's refresh, a compaction or another writer's change.
``table_change_dag`` (Airflow) and ``Connection.follow`` (the facade) both walk this one graph.
"""

from geneva_provider.pipeline.followers.changes import (
    META_REFRESH_ON_CHANGE,
    BackfillColumn,
    RefreshView,
    change_steps,
    view_source_of,
)
from geneva_provider.pipeline.followers.graph import (
    ColumnBackfilled,
    Compacted,
    Follower,
    FollowerPlan,
    FollowEvent,
    Step,
    TableChange,
    TableFacts,
    ViewRefreshed,
    followers_of,
    follows,
    plan_of,
    register_step,
    step_from_json,
)
from geneva_provider.pipeline.followers.indexes import RefreshIndex

__all__ = [
    "META_REFRESH_ON_CHANGE", "BackfillColumn", "ColumnBackfilled", "Compacted", "FollowEvent", "Follower",
    "FollowerPlan", "RefreshIndex", "RefreshView", "Step", "TableChange", "TableFacts", "ViewRefreshed", "change_steps",
    "followers_of", "follows", "plan_of", "register_step", "step_from_json", "view_source_of",
]
