"""What follows a change, run in this process: ``Connection.followers`` / ``Connection.follow`` (the facade).

The steps come from the follower graph (:mod:`geneva_provider.pipeline.followers`), the one ``table_change_dag``
turns into task groups; here each step kind has a runner registered on :func:`run_step` (``@singledispatch``:
a new step kind is one ``@run_step.register(Kind)``), called in the plan's order, each after every step it waits for.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import singledispatch
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.pipeline.followers import (
    BackfillColumn,
    FollowerPlan,
    FollowEvent,
    RefreshIndex,
    RefreshView,
    Step,
    TableChange,
    TableFacts,
)

if TYPE_CHECKING:
    from geneva_provider.facade.connection import Connection


@dataclass(frozen=True)
class FollowedStep:
    """One step ``Connection.follow`` ran, and what it returned (a backfill's or refresh's ``BackfillResult``, an
    index refresh's ``IndexBuildResult`` or None)."""

    step: Step
    result: Any


@singledispatch
def run_step(step: Step, db: Connection, **options: Any) -> Any:
    """Runs one follower step against ``db``; ``options`` (``spark``, ``progress``) go to the job it starts."""
    raise InvalidArgumentError(f"follower step {step!r} has no runner in this process; register one with "
                               f"@run_step.register (geneva_provider.facade.followers)")


@run_step.register(BackfillColumn)
def _backfill_column(step: BackfillColumn, db: Connection, **options: Any) -> Any:
    return db.open_table(step.table).backfill(step.column, **options)


@run_step.register(RefreshView)
def _refresh_view(step: RefreshView, db: Connection, **options: Any) -> Any:
    return db.open_table(step.view).refresh(**options)


@run_step.register(RefreshIndex)
def _refresh_index(step: RefreshIndex, db: Connection, **options: Any) -> Any:
    """The index refreshed add-only (nothing to index: no Spark job, no commit); its ``IndexBuildResult``, or
    None when there was nothing to do."""
    from geneva_provider.pipeline.jobs import refresh_job_indexes

    table = db.open_table(step.table)
    done = refresh_job_indexes(table.ref, lambda ds: [step.index], options.get("spark"), table.checkpoint_store)
    return done[0] if done else None


def followers(db: Connection, event: str | FollowEvent) -> FollowerPlan:
    """The follower plan of ``event`` (a table's name: a change of its rows) among ``db``'s tables."""
    from geneva_provider.pipeline.followers import followers_of

    if isinstance(event, str):
        event = TableChange(table=event)
    if not isinstance(event, FollowEvent):
        raise InvalidArgumentError(f"followers: expected a table name or a follower event "
                                   f"(TableChange, ColumnBackfilled, ...), got {event!r}")
    db.open_table(event.table).dataset()  # TableNotFoundError naming it
    return followers_of(event, table_facts(db))


def table_facts(db: Connection) -> dict[str, TableFacts]:
    """What the follower graph's rules read of each table of ``db``: its schema and its indexes."""
    facts: dict[str, TableFacts] = {}
    for name in db.table_names():
        ds = db.open_table(name).dataset()
        facts[name] = TableFacts(schema=ds.schema, indexes={
            d.name: tuple(d.field_names) for d in ds.describe_indices()})
    return facts


def follow(db: Connection, event: str | FollowEvent, **options: Any) -> list[FollowedStep]:
    """Runs the steps of ``followers(db, event)`` in order, stopping at the first that fails (its error raised)."""
    return [FollowedStep(step, run_step(step, db, **options)) for step in followers(db, event).steps()]
