"""The @udf decorator: kinds, type inference, versions, metadata round trips, output checks.

The part that needs a Spark session; the rest is in tests/unit/test_udf.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp


def test_scalar_udf_returning_floats_for_int64_fails_the_backfill_instead_of_truncating(db, spark):
    @gp.udf(data_type=pa.int64())
    def plus_frac(x: int) -> int:
        return x + 0.7

    tbl = db.create_table("t", pa.table({"x": pa.array(range(8), pa.int64())}))
    tbl.add_columns({"f": plus_frac})
    v = tbl.version
    with pytest.raises(gp.UDFExecutionError) as exc:
        tbl.backfill("f", spark=spark, progress=False)
    msg = str(exc.value)
    for needle in ("UDF 'plus_frac'", "column 'f'", "declared type int64", "truncated"):
        assert needle in msg
    assert tbl.version == v and tbl.to_arrow(["f"]).column("f").null_count == 8


