"""A table watcher's logic on real Lance tables, with no JVM: which commits it reports, and its cursor.

The package's own commits (schema changes, a backfill's column writes, a view refresh) and a compaction are left
out; other writers' appends, deletes and updates are reported once each, with their rows.  The trigger is the
one an ``AssetWatcher`` runs; its cursor store here is a dict with the asset state store's two async calls (the
real store is exercised by tests/system/test_watchers.py under a real triggerer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import lance
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.table_events import TableChanged
from geneva_provider.pipeline.followers import BackfillColumn, RefreshView, TableChange, followers_of
from geneva_provider.pipeline.table_changes import changes_since
from geneva_provider.stages import InProcessRunner
from geneva_provider.triggers.table import CURSOR_KEY, INCARNATION_KEY, LanceTableChangedTrigger
from tests.helpers import counting_double, events_table, read_calls


class DictStateStore:
    """The two calls of Airflow's ``AssetStateStoreAccessors`` the trigger makes, over a dict."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_own_commits_and_compaction_are_left_out_other_writers_are_reported(db, call_dir):
    runner = InProcessRunner()
    tbl = db.create_table("events", events_table(1_000), max_rows_per_file=250)
    start = tbl.dataset().version
    tbl.add_columns({"y": counting_double(call_dir)})
    assert tbl.backfill("y", spark=runner).rows_computed == 1_000
    tbl.compact(spark=runner, target_rows_per_fragment=1_000)
    ds = tbl.dataset()
    assert ds.version > start + 2  # schema changes, column writes, the compaction's rewrite
    assert changes_since(ds, "events", start) is None

    tbl.add(events_table(100, start=1_000))
    after_add = tbl.dataset()
    change = changes_since(after_add, "events", ds.version)
    assert change == TableChanged(table="events", from_version=ds.version, to_version=after_add.version,
                                  operations=["Append"], rows_added=100, rows_deleted=0, rows_updated=0)

    tbl.backfill("y", spark=runner)  # the new rows' values: own commits in between
    tbl.delete("x < 10")
    lance.dataset(tbl.uri).update({"x": "x + 100000"}, where="x >= 1090")
    last = tbl.dataset()
    change = changes_since(last, "events", after_add.version)
    assert change is not None
    assert change.operations == ["Delete", "Update"] and change.own_commits >= 1
    assert (change.rows_added, change.rows_deleted, change.rows_updated) == (0, 10, 10)
    assert sorted(read_calls(call_dir)) == list(range(1_100))  # each row computed once


def test_a_views_refresh_removing_rows_is_its_own_commit_so_a_watcher_of_the_view_leaves_it_out(db):
    runner = InProcessRunner()
    src = db.create_table("src", pa.table({"x": list(range(100))}), max_rows_per_file=25)
    view = db.create_materialized_view("odd", src.search(None).where("x % 2 = 1").select({"x": "x"}))
    view.refresh(spark=runner)
    before = view.dataset().version
    src.delete("x < 40")  # 20 odd rows leave the view at its next refresh
    view.refresh(spark=runner)
    ds = view.dataset()
    assert sorted(ds.to_table(columns=["x"]).column("x").to_pylist()) == list(range(41, 100, 2))
    assert ds.version > before
    assert changes_since(ds, "odd", before) is None  # the refresh's deletion carries the package's message
    ds.validate()


def test_the_operations_and_columns_filters(db):
    tbl = db.create_table("t", pa.table({"x": list(range(10)), "note": ["a"] * 10}))
    v = tbl.dataset().version
    lance.dataset(tbl.uri).update({"note": "'b'"}, where="x < 3")
    ds = tbl.dataset()
    assert changes_since(ds, "t", v, operations=["Append"]) is None
    # Lance rewrote whole rows (its Update names no field): a row rewrite counts whatever columns are watched
    assert ds.get_transactions(1)[0].operation.fields_modified == []
    assert changes_since(ds, "t", v, columns=["x"]).operations == ["Update"]


def run_once(trigger: LanceTableChangedTrigger, store: DictStateStore) -> list[dict[str, Any]]:
    """One look through the trigger's own path (what ``run`` does each poll), returning the events."""

    async def once() -> list[dict[str, Any]]:
        trigger.asset_state_store = store  # type: ignore[assignment]
        import geneva_provider.triggers.table as t

        event = await trigger.on_look(await asyncio.to_thread(trigger.look))
        if event is None:
            return []
        await trigger.advance(event)
        assert isinstance(event, t.TriggerEvent)
        return [event.payload]

    return asyncio.run(once())


def test_the_cursor_lives_in_the_state_store_so_a_restarted_trigger_reports_each_change_once(lance_db, call_dir):
    runner = InProcessRunner()
    tbl = lance_db.create_table("events", events_table(500))
    tbl.add_columns({"y": counting_double(call_dir)})
    store = DictStateStore()
    classpath, kwargs = LanceTableChangedTrigger(table="events", poll_interval=0.01).serialize()
    assert kwargs == {"table": "events", "lance_conn_id": "lance_default", "poll_interval": 0.01,
                      "operations": None, "columns": None}

    first = LanceTableChangedTrigger(**kwargs)
    assert run_once(first, store) == []  # the first look records the version
    assert store.values[CURSOR_KEY] == tbl.dataset().version
    assert store.values[INCARNATION_KEY].startswith(f"{tbl.dataset().version}@")
    tbl.backfill("y", spark=runner)
    assert run_once(first, store) == []  # own commits: the cursor moves past them, no event
    assert store.values[CURSOR_KEY] == tbl.dataset().version

    tbl.add(events_table(50, start=500))
    (event,) = run_once(first, store)
    assert event["rows_added"] == 50 and event["operations"] == ["Append"]
    assert run_once(first, store) == []  # reported once

    # The triggerer restarts: the same kwargs make the same trigger, which resumes from the stored cursor.
    tbl.delete("x < 5")
    second = LanceTableChangedTrigger(**kwargs)
    assert second.serialize() == (classpath, kwargs)
    (event,) = run_once(second, store)
    assert event["from_version"] == first_to(store, event) and event["rows_deleted"] == 5
    assert run_once(second, store) == []


def first_to(store: DictStateStore, event: dict[str, Any]) -> int:
    """The version the first event ended at is where the second one starts."""
    assert store.values[CURSOR_KEY] == event["to_version"]
    return event["from_version"]


def shared_polls(triggers: list[LanceTableChangedTrigger], between: Callable[[], Any]) -> tuple[list[Any], ...]:
    """Two rounds of the connection's shared poll, ``between()`` run between them; then what each of ``triggers``
    (each given a state store) reports of the two rounds: (first round, second round, events of each trigger...)."""
    for trigger in triggers:
        trigger.asset_state_store = DictStateStore()  # type: ignore[assignment]

    async def polls() -> tuple[list[Any], ...]:
        stream = LanceTableChangedTrigger.open_shared_stream(triggers[0].serialize()[1])
        first = await anext(stream)
        between()
        second = await anext(stream)
        await stream.aclose()

        async def replay() -> Any:
            for looks in (first, second):
                yield looks

        return (first, second, *[[e.payload async for e in t.filter_shared_stream(replay())] for t in triggers])

    return asyncio.run(polls())


def test_triggers_of_one_connection_share_one_poll_of_every_table(lance_db):
    a = lance_db.create_table("a", events_table(10))
    lance_db.create_table("b", events_table(10))
    ta, tb = (LanceTableChangedTrigger(table=t, poll_interval=0.01) for t in ("a", "b"))
    assert ta.shared_stream_key() == tb.shared_stream_key()
    first, second, events_a, events_b = shared_polls([ta, tb], lambda: a.add(events_table(5, start=10)))
    assert set(first) == {"a", "b"} and second["a"].version == first["a"].version + 1 and second["b"] == first["b"]
    assert [(e["from_version"], e["to_version"], e["rows_added"]) for e in events_a] == [
        (first["a"].version, second["a"].version, 5)]
    assert events_b == []


def test_a_tables_followers_are_its_auto_backfill_columns_and_chained_views(db, call_dir):
    @gp.udf(data_type=pa.int64(), auto_backfill=True)
    def triple(x: int) -> int:
        return 3 * x

    src = db.create_table("src", events_table(20))
    src.add_columns({"y": counting_double(call_dir), "z": triple})
    evens = db.create_materialized_view("evens", src.search(None).where("x % 2 = 0").select({"x": "x"}),
                                        refresh_on_change=True)
    big = db.create_materialized_view("big_evens", evens.search(None).where("x > 10").select({"x": "x", "t": triple}),
                                      refresh_on_change=True)
    big.add_columns({"t2": triple})  # the view's own column; "t" is its query's, which its refresh computes
    db.create_materialized_view("by_hand", src.search(None).select({"x": "x"}))
    schemas = {name: db.open_table(name).schema for name in db.table_names()}
    followers = followers_of(TableChange(table="src"), schemas)
    assert followers.steps() == [BackfillColumn(table="src", column="z"), RefreshView(view="evens", source="src"),
                                 RefreshView(view="big_evens", source="evens"),
                                 BackfillColumn(table="big_evens", column="t2")]
    assert [f.after for f in followers.followers] == [(), (0,), (1,), (2,)]  # each view after its source's steps
    assert followers_of(TableChange(table="evens"), schemas).of_kind(RefreshView) == [
        RefreshView(view="big_evens", source="evens")]
    with pytest.raises(InvalidArgumentError, match="refresh_on_change must be True or False"):
        db.create_materialized_view("bad", src.search(None).select({"x": "x"}), refresh_on_change="yes")
    assert "bad" not in db.table_names()
