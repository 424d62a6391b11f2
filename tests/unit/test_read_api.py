"""The read API on real Lance tables: ``search(None | vector)`` read as Arrow / pandas / row dicts, ``checkout`` and
``to_lance``, as LanceDB's table API and the reference system read them.  No JVM: nothing here computes.

The UDTF side (a batch UDTF given ``source: GenevaQueryBuilder``, ``@chunker(inherit_input_columns=False)``'s
rows, ``db.refresh``) runs on Spark in tests/spark/test_read_api.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.views.meta import SOURCE_ROW_ID
from tests.helpers import Chunk, counting_double, events_table
from tests.unit.test_udtf_views import docs_table

DIM = 4


def vectors(n: int) -> np.ndarray:
    """Distinct, seeded vectors: no two rows at the same distance from the queries below."""
    return np.random.default_rng(7).normal(size=(n, DIM)).astype(np.float32)


@pytest.fixture
def items(db):
    vs = vectors(200)
    data = pa.table({"id": pa.array(range(200), pa.int64()), "tag": [("a", "b", "c")[i % 3] for i in range(200)],
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(vs.ravel()), DIM)})
    return db.create_table("items", data, max_rows_per_file=64)


def nearest(vs: np.ndarray, q: np.ndarray, ids: list[int], metric: str = "l2") -> list[tuple[int, float]]:
    """(id, distance) of ``ids`` nearest first, computed here: squared L2 as Lance, or cosine distance."""
    x = vs[ids]
    d = ((x - q) ** 2).sum(axis=1) if metric == "l2" else \
        1 - (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    return sorted(zip(ids, d.tolist(), strict=True), key=lambda p: p[1])


def test_a_plain_query_reads_the_rows_where_selects_in_order_with_offset_limit_and_renames(db):
    tbl = db.create_table("events", events_table(1_000), max_rows_per_file=300)
    q = tbl.search(None).where("x % 7 = 0").select({"key": "id", "x": "x"}).offset(5).limit(4)
    assert q.to_list() == [{"key": k, "x": k} for k in (35, 42, 49, 56)]
    assert q.to_arrow().schema.names == ["key", "x"]
    assert q.to_pandas().to_dict("list") == {"key": [35, 42, 49, 56], "x": [35, 42, 49, 56]}
    assert tbl.search(None).to_arrow().equals(tbl.to_arrow())  # every row and column by default
    assert tbl.search(None).where("x < 0").to_list() == []
    assert isinstance(q, gp.GenevaQueryBuilder) and isinstance(q, gp.Query)


def test_a_query_reads_the_very_rows_a_materialized_view_of_it_holds(db):
    tbl = db.create_table("events", events_table(5_000), max_rows_per_file=1_000)
    tbl.delete("x % 10 = 3")
    q = tbl.search(None).where("x >= 100").select(["id"]).shuffle(seed=11).offset(40).limit(300)
    view = db.create_materialized_view("sample", q)  # placeholders of the rows it holds, in its order
    assert q.to_arrow().column("id").to_pylist() == view.to_arrow([SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_pylist()
    assert len(set(q.to_arrow().column("id").to_pylist())) == 300


def test_a_query_selecting_a_udf_column_is_read_through_a_view(db, call_dir):
    tbl = db.create_table("events", events_table(10))
    q = tbl.search(None).select({"id": "id", "y": counting_double(call_dir)})
    with pytest.raises(gp.InvalidArgumentError, match=r"query on table 'events'.*UDF column\(s\) \['y'\].*"
                                                      "materialized view"):
        q.to_arrow()
    with pytest.raises(gp.InvalidArgumentError, match="invalid where filter"):
        tbl.search(None).where("nosuch > 1").to_list()


def test_a_vector_search_reads_the_nearest_rows_exactly_with_their_distance(items):
    vs, q = vectors(200), np.array([0.1, -0.2, 0.3, 0.0], np.float32)
    want = nearest(vs, q, list(range(200)))
    got = items.search(q.tolist()).select(["id", "tag"]).to_list()  # LanceDB's default limit: 10
    assert [r["id"] for r in got] == [i for i, _ in want[:10]]
    assert [r["_distance"] for r in got] == pytest.approx([d for _, d in want[:10]], rel=1e-5)
    assert [r["tag"] for r in got] == [("a", "b", "c")[i % 3] for i, _ in want[:10]]
    assert items.search(q).to_arrow().schema.names == ["id", "tag", "vec", "_distance"]
    page = items.search(q, vector_column_name="vec").offset(3).limit(5).select({"key": "id"}).to_arrow()
    assert page.column_names == ["key", "_distance"] and page.column("key").to_pylist() == [i for i, _ in want[3:8]]
    # where filters before the search (LanceDB's default prefilter): the 3 nearest rows tagged "b"
    b_rows = nearest(vs, q, [i for i in range(200) if i % 3 == 1])
    assert items.search(q).where("tag = 'b'").limit(3).to_pandas()["id"].tolist() == [i for i, _ in b_rows[:3]]
    cos = nearest(vs, q, list(range(200)), "cosine")
    by_cos = items.search(q).distance_type("cosine").limit(4).to_list()
    assert [r["id"] for r in by_cos] == [i for i, _ in cos[:4]]
    assert [r["_distance"] for r in by_cos] == pytest.approx([d for _, d in cos[:4]], rel=1e-4, abs=1e-6)
    assert items.search(q).limit(0).to_list() == []


def test_a_vector_search_that_cannot_run_is_refused_naming_the_table_and_column(db, items):
    with pytest.raises(gp.InvalidArgumentError, match="column 'vec' holds vectors of 4 values, the query has 3"):
        items.search([1.0, 2.0, 3.0])
    with pytest.raises(gp.ColumnError, match="vector column 'nope' not found"):
        items.search([0.0] * DIM, vector_column_name="nope")
    with pytest.raises(gp.InvalidArgumentError, match="column 'tag' holds string, not vectors"):
        items.search([0.0] * DIM, vector_column_name="tag")
    with pytest.raises(gp.InvalidArgumentError, match="full-text search of 'red shoes' needs an FTS"):
        items.search("red shoes")
    with pytest.raises(gp.InvalidArgumentError, match=r"column 'vec': distance_type \(metric\) must be one of"):
        items.search([0.0] * DIM).distance_type("manhattan")
    with pytest.raises(gp.InvalidArgumentError, match="cannot be shuffled"):
        items.search([0.0] * DIM).shuffle(1)
    plain = db.create_table("plain", events_table(3))
    with pytest.raises(gp.InvalidArgumentError, match="search on table 'plain': the table has no vector column"):
        plain.search([0.0])
    with pytest.raises(gp.InvalidArgumentError, match="the source query is a vector search"):
        db.create_materialized_view("near", items.search([0.0] * DIM).select(["id"]))
    assert db.table_names() == ["items", "plain"]


def test_checkout_reads_an_old_version_and_refuses_writes_until_checkout_latest(db, call_dir):
    tbl = db.create_table("events", events_table(10))
    v1 = tbl.version
    tbl.add(events_table(5, start=10))
    tbl.add_columns({"y": counting_double(call_dir)})
    latest = tbl.version
    tbl.checkout(v1)
    assert tbl.version == v1 and tbl.to_lance().version == v1 and tbl.count_rows() == 10
    assert tbl.schema.names == ["id", "x"] and tbl.search(None).select(["x"]).to_list()[-1] == {"x": 9}
    writes = {
        "add": lambda: tbl.add(events_table(1, start=99)),
        "delete": lambda: tbl.delete("x = 1"),
        "add_columns": lambda: tbl.add_columns({"z": counting_double(call_dir)}),
        "drop_columns": lambda: tbl.drop_columns(["x"]),
        "alter_columns": lambda: tbl.alter_columns({"path": "x", "rename": "w"}),
        "backfill": lambda: tbl.backfill("y"),
        "refresh": lambda: tbl.refresh(),
        "compact": lambda: tbl.compact(),
    }
    for what, write in writes.items():
        with pytest.raises(gp.InvalidArgumentError, match=rf"{what} on table 'events': the table is checked out at "
                                                          rf"version {v1}, which is read-only"):
            write()
    other = db.open_table("events")  # other handles read the latest
    assert other.version == latest and other.count_rows() == 15
    tbl.checkout_latest()
    assert tbl.version == latest and tbl.count_rows() == 15
    tbl.add(events_table(1, start=15))
    assert tbl.count_rows() == 16 and tbl.version == latest + 1
    tbl.to_lance().validate()
    with pytest.raises(gp.InvalidArgumentError, match="table 'events' has no version 99"):
        tbl.checkout(99)
    assert tbl.version == latest + 1  # still the latest: nothing was checked out


def test_db_refresh_refreshes_the_view_it_names(db):
    db.create_table("events", events_table(3))
    with pytest.raises(gp.InvalidArgumentError, match="table 'events' is not a materialized view"):
        db.refresh("events")
    with pytest.raises(gp.TableNotFoundError, match="nope"):
        db.refresh("nope")


def test_a_chunker_that_does_not_inherit_its_inputs_leaves_them_out_of_its_view(db):
    @gp.chunker(inherit_input_columns=False)
    def split(text: str) -> Iterator[Chunk]:
        yield Chunk(text, 0)

    @gp.chunker(inherit_input_columns=False, output_schema=pa.schema([("text", pa.string())]))
    def upper(text: str) -> Iterator[dict]:
        yield {"text": text.upper()}

    docs = db.create_table("docs", docs_table(range(4)), stable_row_ids=True)
    chunks = db.create_udtf_view("chunks", docs.search(None).select(["doc_id", "text"]), udtf=split)
    assert [n for n in chunks.schema.names if not n.startswith("__")] == ["doc_id", "chunk", "start"]
    every = db.create_udtf_view("every", docs, udtf=split)  # no select: every source column but the input
    assert [n for n in every.schema.names if not n.startswith("__")] == ["doc_id", "lang", "chunk", "start"]
    # an output column may take the input's name: the input is not carried, so nothing clashes
    same = db.create_udtf_view("same", docs.search(None).select(["doc_id", "text"]), udtf=upper)
    assert [n for n in same.schema.names if not n.startswith("__")] == ["doc_id", "text"]
    with pytest.raises(gp.UDFDefinitionError, match="inherit_input_columns must be True or False"):
        gp.chunker(inherit_input_columns="no")(split.func)
