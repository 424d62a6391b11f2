"""The one user-function core under ``@udf``, ``@chunker`` and ``@udtf``: one annotation -> Arrow mapper,
one signature binder, one base (outputs, pickling, loading), and functions pickled before it still load.

All but the last test run without Spark; the last backfills inferred-type UDF columns on real local Spark.
Annotations here are evaluated as written (no ``from __future__ import annotations``), so functions and row
types defined inside a test are annotated with the real classes, as in a notebook.

The part that needs a Spark session; the rest is in tests/unit/test_function_core.py.
"""

from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

import geneva_provider as gp


@dataclass
class Point:
    x: float
    y: float


# ---------------------------------------------------------------------- must show: inferred UDF types


# ---------------------------------------------------------------------- one base


# ---------------------------------------------------------------------- pickles from before the core


# ---------------------------------------------------------------------- on Spark
def test_a_backfill_computes_the_inferred_list_optional_and_struct_columns(db, spark):
    @gp.udf
    def halves(x: int) -> list[float]:
        return [x / 2] * (x % 3)

    @gp.udf
    def odd_name(x: int) -> Optional[str]:  # noqa: UP045
        return f"odd {x}" if x % 2 else None

    @gp.udf
    def point(x: int) -> Point:
        return Point(float(x), -float(x))

    tbl = db.create_table("t", pa.table({"x": pa.array(range(10), pa.int64())}), max_rows_per_file=4)
    tbl.add_columns({"h": halves, "n": odd_name, "p": point})
    schema = tbl.dataset().schema
    assert (schema.field("h").type, schema.field("n").type) == (pa.list_(pa.float64()), pa.string())
    assert schema.field("p").type == pa.struct([("x", pa.float64()), ("y", pa.float64())])
    for column in ("h", "n", "p"):
        assert tbl.backfill(column, spark=spark).rows_computed == 10
    got = tbl.to_arrow(["x", "h", "n", "p"]).sort_by("x").to_pylist()
    assert got == [{"x": x, "h": [x / 2] * (x % 3), "n": f"odd {x}" if x % 2 else None,
                    "p": {"x": float(x), "y": -float(x)}} for x in range(10)]
