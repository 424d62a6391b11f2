"""The follower graph: which steps follow an event, in which order (plain data: no Lance, no Spark, no Airflow).

What follows a commit used to be a record with one field per kind of follower and wiring code that knew each one;
a new kind of follower (an index refreshed after its column's backfill, an index remap checked after a compaction)
meant editing every consumer.  Here it is data, after pyiceberg's ``TableUpdate`` union:

* an **event** (:class:`FollowEvent`) is what happened to a table: another writer changed its rows
  (:class:`TableChange`), the package refreshed a view (:class:`ViewRefreshed`), backfilled a column
  (:class:`ColumnBackfilled`) or compacted a table (:class:`Compacted`);
* a **step** (:class:`Step`) is one job that follows: a pydantic model with a ``kind`` tag, registered once with
  :func:`register_step` (the union is the registry; :func:`step_from_json` reads any registered kind back); a step
  says which table it writes, which table it must read after every other step wrote it, and which event its
  commit is;
* an **edge** is a rule registered with :func:`follows`: ``(event, tables) -> steps`` for the events it names,
  ``tables`` being every table's :class:`TableFacts` by name -- its Arrow schema and its indexes (what the
  tables say is what follows them).

:func:`followers_of` walks the rules breadth-first from one event (each step's own event leads to the steps that
follow it) and returns a :class:`FollowerPlan`: every step once, after the step whose commit caused it and after
every step that writes what it reads (so each view comes after its source and its source's columns).  A new kind
of follower is one step class, its :func:`register_step` and one :func:`follows` rule here, plus one entry in each
consumer's registry (a task-group factory for ``table_change_dag``, a runner for ``Connection.follow``).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, SerializeAsAny

from geneva_provider.core.errors import InvalidArgumentError


@dataclass(frozen=True)
class TableFacts:
    """What the rules read of one table: its Arrow schema (UDF columns, view metadata) and its indexes (name ->
    the columns each indexes), the facts a follower can hang on."""

    schema: Any
    indexes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, facts: Any) -> TableFacts:
        """``facts`` as it is, or an Arrow schema alone as the facts of a table without indexes."""
        return facts if isinstance(facts, TableFacts) else cls(schema=facts)


class FollowEvent(BaseModel):
    """Something that happened to ``table``: what the rules of the graph are keyed by."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str


class TableChange(FollowEvent):
    """Rows of ``table`` changed by another writer (what a table watcher reports)."""


class ViewRefreshed(FollowEvent):
    """The view ``table`` was refreshed: its rows changed, by the package."""


class ColumnBackfilled(FollowEvent):
    """``column`` of ``table`` was backfilled (its values committed and verified)."""

    column: str


class Compacted(FollowEvent):
    """``table``'s fragments were rewritten by a compaction (no row changed, fragment ids did)."""


class Step(BaseModel):
    """One job that follows an event.  A kind sets ``kind: Literal["..."] = "..."`` and is registered with
    :func:`register_step`; equal steps are one step (a walk reaching one twice keeps the first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str

    def done(self) -> FollowEvent | None:
        """The event this step's commit is, which its own followers follow (None: nothing follows it)."""
        return None

    def writes(self) -> str | None:
        """The table whose rows or values this step changes, for steps that read it (None: none a reader sees)."""
        return None

    def reads(self) -> str | None:
        """The table this step must read only after every step of the walk that writes it (None: its cause only)."""
        return None

    def label(self, root: str) -> str:
        """A short name for the step, unique in a walk from ``root`` (a task group's id in ``table_change_dag``)."""
        return self.kind

    def join_label(self, root: str, cause: str | None) -> str | None:
        """The name of the point this step waits at for what comes before it (an Airflow join task), or None
        when nothing does; ``cause`` is the label of the step whose commit caused it."""
        return f"after_{cause}" if cause is not None else None


_STEPS: dict[str, type[Step]] = {}
_RULES: dict[type[FollowEvent], list[Callable[[Any, Mapping[str, TableFacts]], Iterable[Step]]]] = {}
S = TypeVar("S", bound=Step)
Rule = TypeVar("Rule", bound=Callable[..., Iterable[Step]])


def register_step(cls: type[S]) -> type[S]:
    """Class decorator: ``cls`` joins the step union under the default of its ``kind`` field."""
    kind = cls.model_fields["kind"].default
    if not isinstance(kind, str) or not kind:
        raise InvalidArgumentError(f"step kind {cls.__name__}: its kind field needs a default string, got {kind!r}")
    if _STEPS.get(kind, cls) is not cls:
        raise InvalidArgumentError(f"step kind {kind!r} is already registered (by {_STEPS[kind].__name__})")
    _STEPS[kind] = cls
    return cls


def step_kinds() -> dict[str, type[Step]]:
    """The registered step kinds by their ``kind`` tag."""
    return dict(_STEPS)


def step_from_json(data: str | bytes | Mapping[str, Any]) -> Step:
    """A step of any registered kind from its JSON (or its dict), by its ``kind`` tag."""
    fields = dict(json.loads(data) if isinstance(data, (str, bytes)) else data)
    kind = fields.get("kind")
    if kind not in _STEPS:
        raise InvalidArgumentError(f"unknown follower step kind {kind!r}; registered: {sorted(_STEPS)}")
    return _STEPS[str(kind)].model_validate(fields)


def follows(*events: type[FollowEvent]) -> Callable[[Rule], Rule]:
    """Function decorator: the rule ``(event, tables) -> steps`` gives steps that follow each of ``events``."""
    def register(rule: Rule) -> Rule:
        for event in events:
            rules = _RULES.setdefault(event, [])
            if rule not in rules:
                rules.append(rule)
        return rule
    return register


class Follower(BaseModel):
    """One step of a walk: what caused it, and the earlier steps (their indexes in the plan) it waits for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: SerializeAsAny[Step]
    cause: SerializeAsAny[FollowEvent]
    after: tuple[int, ...] = ()


class FollowerPlan(BaseModel):
    """What follows ``event``: its followers in an order where each comes after every one it waits for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: SerializeAsAny[FollowEvent]
    followers: tuple[Follower, ...] = ()

    def steps(self) -> list[Step]:
        return [f.step for f in self.followers]

    def of_kind(self, kind: type[S]) -> list[S]:
        """The steps of one kind, in order."""
        return [f.step for f in self.followers if isinstance(f.step, kind)]

    def cause_of(self, index: int) -> int | None:
        """The index of the step whose commit caused follower ``index`` (None: the plan's event did)."""
        cause = self.followers[index].cause
        return next((i for i in self.followers[index].after if self.followers[i].step.done() == cause), None)


def followers_of(event: FollowEvent, tables: Mapping[str, TableFacts | Any]) -> FollowerPlan:
    """What follows ``event`` among ``tables`` (name -> :class:`TableFacts`, or an Arrow schema alone): the rules'
    steps, walked breadth-first."""
    facts = {name: TableFacts.of(t) for name, t in tables.items()}
    found: list[tuple[Step, FollowEvent]] = []
    seen: set[Step] = set()
    queue: deque[FollowEvent] = deque([event])
    while queue:
        happened = queue.popleft()
        for rule in _RULES.get(type(happened), []):
            for step in rule(happened, facts):
                if step in seen:
                    continue
                seen.add(step)
                found.append((step, happened))
                if (nxt := step.done()) is not None and nxt != event:
                    queue.append(nxt)
    return plan_of(event, found)


def plan_of(event: FollowEvent, found: Sequence[tuple[Step, FollowEvent]]) -> FollowerPlan:
    """The plan of steps found with their causes: each after the step whose event caused it and after every
    step that writes what it reads, in that order (earlier found first among those free to go)."""
    waits = [{j for j, (other, _) in enumerate(found) if j != i and (
        other.done() == cause or (step.reads() is not None and other.writes() == step.reads()))}
        for i, (step, cause) in enumerate(found)]
    order: list[int] = []
    while len(order) < len(found):
        free = [i for i in range(len(found)) if i not in order and waits[i] <= set(order)]
        if not free:
            stuck = [found[i][0] for i in range(len(found)) if i not in order]
            raise InvalidArgumentError(f"the followers of {event!r} wait for one another in a circle: {stuck}")
        order.append(free[0])
    position = {old: new for new, old in enumerate(order)}
    return FollowerPlan(event=event, followers=tuple(
        Follower(step=found[i][0], cause=found[i][1], after=tuple(sorted(position[j] for j in waits[i])))
        for i in order))
