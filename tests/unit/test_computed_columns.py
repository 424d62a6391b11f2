"""``computed("a * 2 + b")``, the maintained SQL computed column, without a JVM: its parsing, its refusals (before
anything changes), its version, and whole backfills through the in-process task runner on real Lance tables --
appended rows filled by the next backfill, rows whose inputs changed recomputed and no other, ``where`` honoured.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.functions.computed import referenced_columns, tokens
from geneva_provider.core.functions.udf import load_udf, udf_column_info
from geneva_provider.stages import InProcessRunner


def numbers(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "a": ids * 3 - 7, "b": np.sqrt(ids.astype(np.float64)), "z": ids % 5,
                     "name": [f"n{i}" for i in ids]})


def expected(tbl) -> dict[int, float]:
    t = tbl.to_arrow(["id", "a", "b"])
    return dict(zip(t.column("id").to_pylist(), (t.column("a").to_numpy() * 2 + t.column("b").to_numpy()).tolist(),
                    strict=True))


def stored(tbl, column: str = "c") -> dict[int, object]:
    t = tbl.to_arrow(["id", column])
    return dict(zip(t.column("id").to_pylist(), t.column(column).to_pylist(), strict=True))


def test_the_tokenizer_knows_literals_quoted_identifiers_functions_and_struct_fields():
    toks = tokens("abs(a) + `odd name` * 2 || 'a + b''s' || \"b\" + info.a")
    assert [(t.kind, t.text) for t in toks][:6] == [("name", "abs"), ("symbol", "("), ("name", "a"), ("symbol", ")"),
                                                   ("symbol", "+"), ("quoted", "odd name")]
    columns = ["a", "b", "odd name", "info", "abs"]
    # 'abs' is called, the literal's a and b are text, "b" is Lance's string literal, info.a is a field of info
    assert referenced_columns(toks, columns) == ["a", "odd name", "info"]
    with pytest.raises(ValueError, match="a string literal opened at character 4 is never closed"):
        tokens("a + 'x")
    with pytest.raises(ValueError, match="a backquoted identifier opened"):
        tokens("`a + 1")


@pytest.mark.parametrize(("expression", "message"), [
    ("a + random()", "random is not a function of the row"),
    ("now() - a", "now is not a function of the row"),
    ("current_date", "current_date is not a function of the row"),
    ("UUID()", "UUID is not a function of the row"),
    ("a - avg(a)", "avg reads other rows"),
    ("row_number() OVER ()", "row_number reads other rows"),
    ("a + 'open", "a string literal opened at character 4 is never closed"),
    ("   ", "the expression must be a non-empty SQL string"),
])
def test_computed_refuses_an_expression_that_is_not_a_value_of_its_row(expression, message):
    with pytest.raises(gp.InvalidArgumentError, match=message) as caught:
        gp.computed(expression)
    assert expression.strip() == "" or repr(expression) in str(caught.value)


def test_a_column_named_like_a_volatile_function_is_still_a_column(db):
    # only a call (or a bare niladic keyword such as current_date) is refused: a column named 'now' is a column
    assert gp.computed("info.now + 1").expression == "info.now + 1"
    tbl = db.create_table("t", pa.table({"now": [1, 2], "rand": [10, 20]}))
    tbl.add_columns({"c": gp.computed("now + rand")})
    assert tbl.udf_columns()["c"]["input_columns"] == ["now", "rand"]
    tbl.backfill("c", spark=InProcessRunner())
    assert tbl.to_arrow(["c"]).column("c").to_pylist() == [11, 22]


@pytest.mark.parametrize(("expression", "kwargs", "message"), [
    ("a * 2 + zz", {}, "No field named zz"),
    ("a +* 2", {}, "cannot be evaluated"),
    ("a * 'x'", {}, "cannot be evaluated"),
    ("1 + 2", {}, "reads no column of the table"),
    ("name || 'x'", {"data_type": pa.list_(pa.int64())}, "computes string, which does not cast to data_type"),
])
def test_add_columns_refuses_what_the_table_cannot_evaluate_naming_it_and_changing_nothing(db, expression, kwargs,
                                                                                           message):
    tbl = db.create_table("t", numbers(10))
    before, schema = tbl.version, tbl.schema
    with pytest.raises(gp.InvalidArgumentError, match=message) as caught:
        tbl.add_columns({"ok": gp.computed("a + 1"), "c": gp.computed(expression, **kwargs)})
    assert "table 't'" in str(caught.value) and "computed column 'c'" in str(caught.value)
    assert repr(expression) in str(caught.value)
    assert tbl.version == before and tbl.schema == schema  # not even the good column was added
    tbl.dataset().validate()


def test_the_version_is_the_normalized_expression_and_the_type(db):
    tbl = db.create_table("t", numbers(10))
    tbl.add_columns({"c": gp.computed("a * 2 + b"), "c2": gp.computed("a*2+b"), "c3": gp.computed("a * 3 + b"),
                     "c4": gp.computed("a * 2 + b", data_type=pa.float32())})
    listed = tbl.udf_columns()
    assert listed["c"]["version"] == listed["c2"]["version"]  # spacing is not a change
    assert len({listed[c]["version"] for c in ("c", "c3", "c4")}) == 3  # another expression, another type
    assert listed["c"]["input_columns"] == ["a", "b"] and listed["c"]["expression"] == "a * 2 + b"
    assert listed["c"]["rows_missing"] == 10
    assert tbl.schema.field("c").type == pa.float64() and tbl.schema.field("c4").type == pa.float32()
    info = udf_column_info(tbl.schema.field("c").metadata)
    assert info is not None and info.expression == "a * 2 + b" and info.kind == "batch"
    fn = load_udf(info.pickle)  # what a worker loads: the expression, evaluated over a batch
    batch = pa.record_batch({"a": pa.array([1, 2], pa.int64()), "b": pa.array([0.5, 0.25])})
    assert fn.evaluate(batch, ["a", "b"]).to_pylist() == [2.5, 4.25]
    assert {s.column: s.expression for s in tbl.status().columns}["c"] == "a * 2 + b"


def test_backfill_append_update_and_where_in_process(db):
    runner = InProcessRunner(parallelism=2)
    tbl = db.create_table("t", numbers(3_000), max_rows_per_file=1_000)
    tbl.add_columns({"c": gp.computed("a * 2 + b"), "label": gp.computed("upper(name) || '-' || CAST(z AS string)")})

    assert tbl.backfill("c", where="id < 1000", spark=runner).rows_computed == 1_000
    values = stored(tbl)
    assert {i for i, v in values.items() if v is not None} == set(range(1_000))
    res = tbl.backfill("c", spark=runner)
    assert res.rows_computed == 2_000  # only the rows the filtered backfill left
    assert stored(tbl) == expected(tbl)  # exact, against numpy over the stored inputs

    tbl.add(numbers(500, start=3_000))  # appended rows: NULL until the next backfill computes them alone
    assert tbl.udf_columns()["c"]["rows_missing"] == 500
    assert tbl.backfill("c", spark=runner).rows_computed == 500
    assert stored(tbl) == expected(tbl) and len(stored(tbl)) == 3_500

    tbl.dataset().update({"z": "z + 1"}, where="id % 7 = 0")  # a column the expression does not read
    assert tbl.udf_columns()["c"]["rows_stale"] == 0
    assert tbl.backfill("c", spark=runner).rows_computed == 0

    tbl.dataset().update({"a": "a + 1000000"}, where="id % 100 = 3")  # 35 rows' input changed
    assert tbl.udf_columns()["c"]["rows_stale"] == 35
    assert tbl.backfill("c", spark=runner).rows_computed == 35
    assert stored(tbl) == expected(tbl)
    assert stored(tbl)[103] == (309 - 7 + 1_000_000) * 2 + np.sqrt(103.0)

    assert tbl.backfill("label", spark=runner).rows_computed == 3_500
    t = tbl.to_arrow(["name", "z", "label"])
    assert t.column("label").to_pylist() == [f"{n.upper()}-{z}" for n, z in zip(t.column("name").to_pylist(),
                                                                                t.column("z").to_pylist(), strict=True)]
    tbl.dataset().validate()
