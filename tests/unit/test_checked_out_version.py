"""A handle checked out at an older version (``tbl.checkout(v)``, ``db.open_table(name, version=v)``) means that
version everywhere: ``status()`` reports it, its queries read it, and a materialized view made of its query is built
from it and stays at it (refreshed with the in-process task runner: no JVM).

A view of a checked-out version is a view of that version -- a snapshot: ``refresh()`` keeps it there (recomputing
what changed in the view's own UDF columns), ``refresh(src_version=N)`` moves it to N, where it stays.  The
reference's ``refresh()`` follows the source's latest version, which a view made of the latest does here too.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.views.meta import SOURCE_ROW_ID, view_info
from geneva_provider.core.views.udtf_meta import udtf_view_state
from geneva_provider.stages import InProcessRunner
from tests.helpers import counting_double, counting_split, events_table
from tests.unit.test_udtf_views import doc_text, docs_table


def column_rows(report) -> dict[str, tuple[int, int, int]]:
    return {c.column: (c.rows_valid, c.rows_stale, c.rows_missing) for c in report.columns}


@pytest.fixture
def history(db, call_dir):
    """Table 'events': version ``v1`` holds x = 0..9 with ``y`` computed; later versions add 5 rows, delete x = 0
    and update x of ids 1 and 2 (so at the latest 2 values are stale, 5 missing)."""
    tbl = db.create_table("events", events_table(10))
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=InProcessRunner(parallelism=1))
    v1 = tbl.version
    tbl.add(events_table(5, start=10))
    tbl.delete("x = 0")
    tbl.to_lance().update({"x": "x + 100"}, where="id = 1 OR id = 2")
    return tbl, v1


def test_status_of_a_checked_out_handle_reports_that_version(db, history):
    tbl, v1 = history
    latest = tbl.version
    now = tbl.status()
    assert (now.version, now.rows, column_rows(now)) == (latest, 14, {"y": (7, 2, 5)})
    tbl.checkout(v1)
    then = tbl.status()
    assert (then.version, then.rows, column_rows(then)) == (v1, 10, {"y": (10, 0, 0)})
    assert tbl.udf_columns()["y"]["rows_valid"] == 10
    old = db.open_table("events", version=v1)
    assert old.version == v1 and old.status().version == v1 and old.count_rows() == 10
    with pytest.raises(gp.InvalidArgumentError, match=rf"add on table 'events': the table is checked out at version "
                                                      rf"{v1}, which is read-only"):
        old.add(events_table(1, start=50))
    with pytest.raises(gp.InvalidArgumentError, match="table 'events' has no version 99"):
        db.open_table("events", version=99)
    tbl.checkout_latest()
    assert tbl.status().version == latest and db.open_table("events").status().version == latest


def test_a_query_reads_the_version_its_handle_was_checked_out_at_when_it_was_built(db, history):
    tbl, v1 = history
    tbl.checkout(v1)
    q = tbl.search(None).where("x < 5").select(["id", "x"])
    tbl.checkout_latest()  # the query was built at v1, and keeps reading it
    assert q.to_list() == [{"id": i, "x": i} for i in range(5)]
    assert tbl.search(None).where("x < 5").select(["id"]).to_list() == [{"id": i} for i in (3, 4)]


def test_a_view_of_a_checked_out_query_is_built_from_that_version_and_stays_at_it(db, history, call_dir):
    tbl, v1 = history
    latest = tbl.version
    old = db.open_table("events")
    old.checkout(v1)
    view = db.create_materialized_view("then", old.search(None).where("x < 5").select(
        {"id": "id", "x": "x", "y": "y", "z": counting_double(call_dir)}))
    info = view_info(view.schema.metadata, "then")
    assert info.base_table_version == v1 and info.pinned
    assert sorted(view.to_arrow([SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_pylist()) == [0, 1, 2, 3, 4]
    runner = InProcessRunner(parallelism=1)
    view.refresh(spark=runner)
    want = [{"id": i, "x": i, "y": 2 * i, "z": 2 * i} for i in range(5)]
    assert view.search(None).select(["id", "x", "y", "z"]).to_list() == want  # v1's rows, not the latest's
    assert view.status().view.source_version == v1
    tbl.add(events_table(3, start=-3))  # more source changes: the view stays at v1
    assert view.refresh(spark=runner).rows_computed == 0
    assert view.search(None).select(["id", "x", "y", "z"]).to_list() == want
    view.refresh(src_version=latest, spark=runner)  # moved on explicitly: the rows of that version, and stays there
    assert view.to_arrow(["id", "x", "z"]).to_pylist() == [{"id": i, "x": i, "z": 2 * i} for i in (3, 4)]
    info = view_info(view.schema.metadata, "then")
    assert info.base_table_version == latest and info.pinned
    view.refresh(spark=runner)
    assert view_info(view.schema.metadata, "then").base_table_version == latest
    view.to_lance().validate()


def test_a_view_of_the_latest_follows_the_source_and_refresh_on_change_needs_it(db, history, call_dir):
    tbl, v1 = history
    view = db.create_materialized_view("now", tbl.search(None).where("x < 5").select(["id", "x"]))
    assert not view_info(view.schema.metadata, "now").pinned
    runner = InProcessRunner(parallelism=1)
    view.refresh(spark=runner)
    tbl.add(events_table(2, start=-2))
    view.refresh(spark=runner)
    assert sorted(view.to_arrow(["x"]).column("x").to_pylist()) == [-2, -1, 3, 4]
    tbl.checkout(v1)
    with pytest.raises(gp.InvalidArgumentError, match=rf"create_materialized_view 'auto': the query reads table "
                                                      rf"'events' checked out at version {v1}.*refresh_on_change"):
        db.create_materialized_view("auto", tbl.search(None).select(["id"]), refresh_on_change=True)
    assert db.table_names() == ["events", "now"]
    assert pa.types.is_int64(view.schema.field("x").type)


def test_a_chunker_view_of_a_checked_out_query_expands_that_version_and_stays_at_it(db, tmp_path):
    calls = tmp_path / "split"
    calls.mkdir()
    docs = db.create_table("docs", docs_table(range(6)), stable_row_ids=True)
    v1 = docs.version
    docs.add(docs_table(range(6, 10)))
    docs.delete("doc_id = 1")
    latest = docs.version
    runner = InProcessRunner(parallelism=1)
    old = db.open_table("docs", version=v1)
    view = db.create_udtf_view("chunks", source=old.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(calls)))
    view.refresh(spark=runner)
    parents = sorted(set(view.to_arrow(["doc_id"]).column("doc_id").to_pylist()))
    assert parents == [i for i in range(6) if doc_text(i)] and 1 in parents  # v1's documents, doc 1 among them
    assert udtf_view_state(view.schema.metadata, "chunks").base_version == v1
    view.refresh(spark=runner)
    assert udtf_view_state(view.schema.metadata, "chunks").base_version == v1
    view.refresh(src_version=latest, spark=runner)
    assert sorted(set(view.to_arrow(["doc_id"]).column("doc_id").to_pylist())) == \
        [i for i in range(2, 10) if doc_text(i)]
    docs.add(docs_table(range(10, 12)))
    view.refresh(spark=runner)  # stays at the version it was moved to
    assert udtf_view_state(view.schema.metadata, "chunks").base_version == latest
    assert view.check().exact
    with pytest.raises(gp.InvalidArgumentError, match=rf"create_udtf_view 'auto': the query reads table 'docs' "
                                                      rf"checked out at version {v1}"):
        db.create_udtf_view("auto", source=old, udtf=counting_split(str(calls)), refresh_on_change=True)
    assert "auto" not in db.table_names()
