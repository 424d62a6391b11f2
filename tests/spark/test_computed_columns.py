"""``computed("a * 2 + b")`` on Spark: the maintained SQL computed column backfilled by the usual stages, kept
valid as rows are appended and inputs updated, recomputed after its expression is revised -- values exact
against numpy over the stored inputs.  (Parsing, refusals and the in-process runner: tests/unit.)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import geneva_provider as gp
from tests.helpers import counting_double, events_table


def numbers(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "a": ids * 3 - 7, "b": np.sqrt(ids.astype(np.float64))})


def values(tbl, column: str) -> dict[int, object]:
    t = tbl.to_arrow(["id", column])
    return dict(zip(t.column("id").to_pylist(), t.column(column).to_pylist(), strict=True))


def expected(tbl, factor: int = 2) -> dict[int, float]:
    t = tbl.to_arrow(["id", "a", "b"])
    computed = t.column("a").to_numpy() * factor + t.column("b").to_numpy()
    return dict(zip(t.column("id").to_pylist(), computed.tolist(), strict=True))


def test_a_computed_column_is_backfilled_kept_valid_and_recomputed_on_spark(db, spark):
    tbl = db.create_table("t", numbers(4_000), max_rows_per_file=1_000)  # 4 fragments
    tbl.add_columns({"c": gp.computed("a * 2 + b")})
    assert tbl.to_arrow(["c"]).column("c").null_count == 4_000  # added all-NULL, metadata only

    res = tbl.backfill("c", where="id % 2 = 0", spark=spark)
    assert res.rows_computed == 2_000
    assert {i for i, v in values(tbl, "c").items() if v is not None} == set(range(0, 4_000, 2))
    res = tbl.backfill("c", spark=spark)
    assert res.rows_computed == 2_000 and res.fragments_committed == 4
    assert values(tbl, "c") == expected(tbl)

    tbl.add(numbers(1_500, start=4_000))
    assert tbl.backfill("c", spark=spark).rows_computed == 1_500  # the appended rows alone
    tbl.dataset().update({"a": "a - 500000"}, where="id % 250 = 1")  # 22 rows' input changed
    assert tbl.udf_columns()["c"]["rows_stale"] == 22
    assert tbl.backfill("c", spark=spark).rows_computed == 22
    assert values(tbl, "c") == expected(tbl) and len(values(tbl, "c")) == 5_500
    assert tbl.count_rows("c < -900000") == 22  # a real, filterable column

    old = tbl.udf_columns()["c"]["version"]
    tbl.alter_columns({"path": "c", "udf": gp.computed("a * 3 + b")})  # a new expression: every value stale
    listed = tbl.udf_columns()["c"]
    assert listed["version"] != old and listed["expression"] == "a * 3 + b" and listed["rows_stale"] == 5_500
    assert values(tbl, "c") == expected(tbl)  # still the old values, until the backfill
    assert tbl.backfill("c", spark=spark).rows_computed == 5_500
    assert values(tbl, "c") == expected(tbl, factor=3)
    tbl.dataset().validate()


def test_a_computed_column_reads_a_udf_column_once_that_is_computed(db, spark, call_dir):
    tbl = db.create_table("events", events_table(600), max_rows_per_file=200)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.add_columns({"z": gp.computed("coalesce(y + x, -1)", data_type=pa.int64())})
    assert tbl.udf_columns()["z"]["input_columns"] == ["y", "x"]
    tbl.backfill("z", spark=spark)
    assert set(tbl.to_arrow(["z"]).column("z").to_pylist()) == {-1}  # y is NULL until computed: coalesce gives -1
    tbl.backfill("y", spark=spark)
    assert tbl.udf_columns()["z"]["rows_stale"] == 600  # its input y changed under it
    assert tbl.backfill("z", spark=spark).rows_computed == 600
    t = tbl.to_arrow(["x", "y", "z"])
    assert tbl.schema.field("z").type == pa.int64()
    assert t.column("z").to_pylist() == [x + y for x, y in zip(t.column("x").to_pylist(), t.column("y").to_pylist(),
                                                               strict=True)]
    tbl.dataset().validate()
