"""The table watcher misses nothing and never dies, on real Lance tables (no JVM).

A table created after the watcher started, a table dropped and re-created (a new identity, at any version), a
commit whose transaction ``cleanup_old_versions`` removed: each is reported.  A table directory with no manifest
yet, or a version Lance no longer has, never makes ``run()`` raise nor ends the shared poll of the other
watchers on the connection.  The trigger's arguments are checked when it is built.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pytest

from geneva_provider.assets import lance_table_asset
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.table_events import TableChanged
from geneva_provider.core.table_watch import LANCE_OPERATIONS
from geneva_provider.pipeline.table_changes import changes_since
from geneva_provider.stages import InProcessRunner
from geneva_provider.triggers.table import CURSOR_KEY, LanceTableChangedTrigger
from tests.helpers import counting_double, events_table
from tests.unit.test_table_changes import DictStateStore, run_once, shared_polls


def watcher(table: str) -> tuple[LanceTableChangedTrigger, DictStateStore]:
    return LanceTableChangedTrigger(table=table, poll_interval=0.01), DictStateStore()


def cleanup_all_but_latest(tbl: Any) -> None:
    lance.dataset(tbl.uri).cleanup_old_versions(older_than=dt.timedelta(0))


def test_a_table_created_after_the_watcher_started_is_reported_with_its_rows_from_version_0(lance_db):
    trigger, store = watcher("late")
    assert run_once(trigger, store) == []  # no table yet: nothing to report, and its absence is remembered
    assert run_once(trigger, store) == []
    tbl = lance_db.create_table("late", events_table(120))
    (event,) = run_once(trigger, store)
    assert TableChanged.model_validate(event) == TableChanged(
        table="late", from_version=0, to_version=tbl.dataset().version, operations=["Overwrite"],
        rows_added=120, created=True)
    assert run_once(trigger, store) == []  # reported once
    tbl.add(events_table(5, start=120))
    (event,) = run_once(trigger, store)
    assert event["operations"] == ["Append"] and event["rows_added"] == 5 and "created" not in event


@pytest.mark.parametrize("how", ["same version", "higher version through own commits", "lower version"])
def test_a_dropped_and_recreated_table_is_a_change_reported_with_what_it_holds(lance_db, call_dir, how):
    tbl = lance_db.create_table("events", events_table(100))
    if how == "lower version":
        tbl.add(events_table(10, start=100))
        tbl.add(events_table(10, start=110))
    trigger, store = watcher("events")
    assert run_once(trigger, store) == []  # the watcher's first look: recorded
    lance_db.drop_table("events")
    tbl = lance_db.create_table("events", events_table(7, start=1_000))
    if how == "higher version through own commits":
        tbl.add_columns({"y": counting_double(call_dir)})
        tbl.backfill("y", spark=InProcessRunner())
    (event,) = run_once(trigger, store)
    change = TableChanged.model_validate(event)
    assert (change.from_version, change.to_version, change.created) == (0, tbl.dataset().version, True)
    assert change.rows_added == 7 and change.operations == ["Overwrite"]
    assert run_once(trigger, store) == []


def test_a_drop_seen_between_looks_then_a_recreate_is_reported_once(lance_db):
    lance_db.create_table("events", events_table(10))
    trigger, store = watcher("events")
    assert run_once(trigger, store) == []
    lance_db.drop_table("events")
    assert run_once(trigger, store) == []  # gone: nothing to run on
    lance_db.create_table("events", events_table(3))
    (event,) = run_once(trigger, store)
    assert event["created"] is True and event["from_version"] == 0 and event["rows_added"] == 3
    assert run_once(trigger, store) == []


def test_a_commit_whose_transaction_was_cleaned_up_is_reported_as_unknown(lance_db):
    tbl = lance_db.create_table("events", events_table(100))
    trigger, store = watcher("events")
    assert run_once(trigger, store) == []
    since = tbl.dataset().version
    tbl.add(events_table(10, start=100))  # its transaction goes with the clean-up below
    tbl.add(events_table(20, start=110))
    cleanup_all_but_latest(tbl)
    ds = tbl.dataset()
    change = changes_since(ds, "events", since)
    assert change is not None and change.operations == ["Unknown", "Append"]
    assert change.to_version == ds.version and change.from_version == since
    # 30 rows came in, 10 of them by the commit Lance no longer knows: no count rather than a wrong one (20)
    assert (change.rows_added, change.rows_deleted, change.rows_updated) == (None, None, None)
    (event,) = run_once(trigger, store)
    assert event["operations"] == ["Unknown", "Append"] and event["to_version"] == ds.version
    assert event["rows_added"] is None
    assert "added" not in TableChanged.model_validate(event).describe()
    assert run_once(trigger, store) == []


def test_an_update_after_the_clean_up_of_the_version_before_it_is_reported_and_nothing_raises(lance_db):
    tbl = lance_db.create_table("events", events_table(100))
    trigger, store = watcher("events")
    assert run_once(trigger, store) == []  # the cursor: version 1
    lance.dataset(tbl.uri).update({"x": "x + 1000"}, where="x < 10")
    cleanup_all_but_latest(tbl)  # version 1, the one before the update, is gone
    (event,) = run_once(trigger, store)
    assert event["operations"] == ["Update"] and event["to_version"] == tbl.dataset().version
    assert run_once(trigger, store) == []
    tbl.delete("x >= 90")
    cleanup_all_but_latest(tbl)
    (event,) = run_once(trigger, store)
    assert event["operations"] == ["Delete"]


def half_made(lance_db: Any, name: str) -> Path:
    """A ``<name>.lance`` directory without a manifest yet: what a table being created looks like for a moment."""
    path = Path(lance_db.uri.removeprefix("file://")) / f"{name}.lance"
    (path / "_versions").mkdir(parents=True)
    (path / "data").mkdir()
    return path


def collect_run(trigger: LanceTableChangedTrigger, store: DictStateStore, steps: list[Callable[[], None]],
                timeout: float = 120.0) -> list[dict[str, Any]]:
    """Runs ``trigger.run()`` itself, doing each step in turn once the trigger has looked (and acted on its look)
    since the step before; the events, and it never ended.  Counted looks, not sleeps: a loaded machine only
    makes it slower."""
    looked = 0
    real_look = trigger.look

    def counted_look() -> Any:
        nonlocal looked
        try:
            return real_look()
        finally:
            looked += 1

    trigger.look = counted_look  # type: ignore[method-assign]

    async def go() -> list[dict[str, Any]]:
        trigger.asset_state_store = store  # type: ignore[assignment]
        events: list[dict[str, Any]] = []

        async def consume() -> None:
            async for event in trigger.run():
                events.append(event.payload)

        async def looks(n: int) -> None:
            """Until the trigger has finished ``n`` looks (the one before the last was acted on, its event kept) and
            keeps a cursor (its first look that could use the state store recorded the table, or its absence)."""
            deadline = time.monotonic() + timeout
            while looked < n or CURSOR_KEY not in store.values:
                assert not task.done(), f"run() ended: {task.exception()!r}"
                assert time.monotonic() < deadline, f"the trigger looked {looked} times in {timeout}s, not {n}"
                await asyncio.sleep(0.01)

        task = asyncio.create_task(consume())
        await looks(2)
        for step in steps:
            await asyncio.to_thread(step)
            await looks(looked + 3)  # a look begun after the step, and acted on
        assert not task.done(), f"run() ended: {task.exception()!r}"
        task.cancel()
        return events

    return asyncio.run(go())


def test_a_half_made_table_neither_ends_run_nor_is_missed_once_it_is_made(lance_db, capsys):
    path = half_made(lance_db, "fresh")
    trigger, store = watcher("fresh")

    def create() -> None:
        lance.write_dataset(events_table(40), str(path), mode="overwrite")

    events = collect_run(trigger, store, [create])
    assert [(e["from_version"], e["rows_added"], e["created"]) for e in events] == [(0, 40, True)]
    logged = capsys.readouterr().out
    assert logged.count("Cannot read table 'fresh'") == 1, logged  # why, once however many polls


def test_a_version_lance_no_longer_has_neither_ends_run_nor_loses_the_change(lance_db):
    tbl = lance_db.create_table("events", events_table(100))
    trigger, store = watcher("events")

    def update_then_clean() -> None:
        lance.dataset(tbl.uri).update({"x": "x + 1000"}, where="x < 10")
        cleanup_all_but_latest(tbl)

    events = collect_run(trigger, store, [update_then_clean, update_then_clean])
    assert [e["operations"] for e in events] == [["Update"], ["Update"]]


def test_a_half_made_table_does_not_stop_the_shared_poll_of_the_others(lance_db):
    a = lance_db.create_table("a", events_table(10))
    half_made(lance_db, "being_made")
    ta, th = (LanceTableChangedTrigger(table=t, poll_interval=0.01) for t in ("a", "being_made"))
    first, _, events_a, events_half = shared_polls([ta, th], lambda: a.add(events_table(5, start=10)))
    assert "a" in first
    assert [(e["operations"], e["rows_added"]) for e in events_a] == [(["Append"], 5)]
    assert events_half == []


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"poll_interval": math.nan}, "poll_interval"), ({"poll_interval": -1}, "poll_interval"),
    ({"poll_interval": 0}, "poll_interval"), ({"poll_interval": math.inf}, "poll_interval"),
    ({"poll_interval": "soon"}, "poll_interval"), ({"poll_interval": True}, "poll_interval"),
    ({"operations": ["Apend"]}, "Apend"), ({"operations": "Append"}, "operations"),
    ({"operations": []}, "operations"), ({"columns": ["x", ""]}, "columns"), ({"columns": "x"}, "columns"),
    ({"table": "a/b"}, "a/b"),
])
def test_the_watchers_arguments_are_checked_when_it_is_built(kwargs, named):
    arguments = {"table": "events", **kwargs}
    with pytest.raises(InvalidArgumentError, match=named) as raised:
        LanceTableChangedTrigger(**arguments)
    assert "events" in str(raised.value) or "a/b" in str(raised.value)
    with pytest.raises(InvalidArgumentError, match=named):
        lance_table_asset(**arguments)


def test_every_lance_operation_is_a_known_operation_name():
    import inspect

    ops = lance.LanceOperation
    names = {n for n, c in vars(ops).items() if inspect.isclass(c) and issubclass(c, ops.BaseOperation)
             and c is not ops.BaseOperation}
    assert names == set(LANCE_OPERATIONS)
    trigger = LanceTableChangedTrigger(table="events", operations=["Append", "Rewrite"], poll_interval=5)
    assert trigger.operations == ["Append", "Rewrite"] and trigger.poll_interval == 5.0


@pytest.mark.parametrize(("example", "setup", "table"), [
    ("on_change_backfill.py", "setup_comments", "comments"),
    ("on_change_chunks_embeddings.py", "setup_articles", "articles"),
])
def test_the_watcher_examples_snippet_runs_as_pasted(lance_db, example, setup, table):
    import ast
    import subprocess
    import sys

    from geneva_provider import examples

    source = (Path(__file__).parents[2] / "dags_examples" / example).read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    block = doc.split("::\n\n", 1)[1].split("\n\nThe file")[0]  # the docstring's one literal block
    snippet = "\n".join(line.removeprefix("    ") for line in block.splitlines())
    assert "/path/to/lake" in snippet
    getattr(examples, setup)(lance_db)
    before = lance_db.open_table(table).count_rows()
    lake = lance_db.uri.removeprefix("file://")
    done = subprocess.run([sys.executable, "-c", snippet.replace("/path/to/lake", lake)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert lance_db.open_table(table).count_rows() > before


class FlakyStateStore(DictStateStore):
    """The asset state store failing its first two reads (an API server restarting), then answering."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 2

    async def aget(self, key: str, default: Any = None) -> Any:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the API server is restarting")
        return await super().aget(key, default)


def test_a_failing_state_store_neither_ends_run_nor_loses_a_change(lance_db):
    lance_db.create_table("events", events_table(10))
    trigger, store = LanceTableChangedTrigger(table="events", poll_interval=0.01), FlakyStateStore()

    def append() -> None:
        lance_db.open_table("events").add(events_table(4, start=10))

    events = collect_run(trigger, store, [append])
    assert store.failures == 0
    assert [(e["operations"], e["rows_added"]) for e in events] == [(["Append"], 4)]


def test_a_tables_incarnation_reads_the_same_in_every_time_zone(lance_db):
    """Lance gives a version's commit time in local time: a triggerer moved to another zone sees the same table."""
    import subprocess
    import sys

    tbl = lance_db.create_table("events", events_table(3))
    code = ("import lance, sys; from geneva_provider.pipeline.table_changes import commit_time; "
            "print(commit_time(lance.dataset(sys.argv[1])))")
    seen = {tz: subprocess.run([sys.executable, "-c", code, tbl.uri], capture_output=True, text=True, check=True,
                               env={**os.environ, "TZ": tz}, timeout=120).stdout.strip()
            for tz in ("UTC", "America/New_York", "Asia/Tokyo")}
    assert len(set(seen.values())) == 1 and seen["UTC"].endswith("+00:00"), seen
