"""Materialized views on real Lance tables and real Spark, checked against pyarrow.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/spark/test_views.py.
"""

from __future__ import annotations

import pytest

import geneva_provider as gp
from geneva_provider.core.views.meta import IS_SET, SOURCE_ROW_ID, view_info
from tests.helpers import counting_double, events_table, read_calls


@pytest.fixture
def source(db):
    return db.create_table("events", events_table(20_000), max_rows_per_file=5_000)


def test_create_is_fast_and_writes_placeholders_and_metadata(db, source, call_dir):
    q = source.search(None).where("x % 2 = 0").select({"id": "id", "y": counting_double(call_dir)})
    view = db.create_materialized_view("evens", q)
    t = view.to_arrow()
    assert t.column_names == [SOURCE_ROW_ID, "id", "y", IS_SET]
    assert t.num_rows == 10_000 and t.column(SOURCE_ROW_ID).to_pylist() == list(range(0, 20_000, 2))
    assert t.column("y").null_count == 10_000 and t.column(IS_SET).null_count == 10_000
    assert read_calls(call_dir) == []  # no UDF at create
    md = {k.decode(): v.decode() for k, v in view.schema.metadata.items()}
    assert md["geneva::view::base_table"] == "events" and md["geneva::view::version"] == "2"
    assert md["geneva::view::base_table_version"] == str(source.version)
    assert md["geneva::view::base_table_db_uri"] == db.uri
    assert view_info(view.schema.metadata, "evens").query.where == "x % 2 = 0"
    assert db.open_table("evens").count_rows() == 10_000


def test_same_seed_gives_the_same_order(db, source):
    q = source.search(None).select(["x"])
    a = db.create_materialized_view("a", q.shuffle(seed=3)).to_arrow([SOURCE_ROW_ID])
    b = db.create_materialized_view("b", q.shuffle(seed=3)).to_arrow([SOURCE_ROW_ID])
    c = db.create_materialized_view("c", q.shuffle(seed=4)).to_arrow([SOURCE_ROW_ID])
    assert a.equals(b) and not a.equals(c)
    assert sorted(a.column(SOURCE_ROW_ID).to_pylist()) == list(range(20_000))


def test_bad_view_queries_are_rejected_before_anything_is_written(db, source):
    with pytest.raises(gp.ColumnError, match="column 'nope' not found in table 'events'"):
        source.search(None).select({"a": "nope"})
    with pytest.raises(gp.InvalidArgumentError, match="reserved"):
        source.search(None).select({"__x": "x"})
    with pytest.raises(gp.InvalidArgumentError, match="selects no columns"):
        db.create_materialized_view("v", source.search(None))
    with pytest.raises(gp.InvalidArgumentError, match="invalid where filter"):
        db.create_materialized_view("v", source.search(None).where("nosuch > 1").select(["x"]))
    with pytest.raises(gp.InvalidArgumentError, match="not a materialized view"):
        source.refresh()
    assert db.table_names() == ["events"]
