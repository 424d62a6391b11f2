"""A UDF that counts the rows it runs on, across Spark's Python workers (shared by the benchmarks)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import geneva_provider as gp


def counting_double(call_dir: str, us_per_row: float = 0.0) -> gp.UDF:
    """``x * 2`` (array UDF) costing ``us_per_row`` microseconds per row; each call logs its row count."""

    @gp.udf(data_type=pa.int64(), input_columns=["x"], name="double")
    def double(x: pa.Array) -> pa.Array:
        if us_per_row:
            time.sleep(len(x) * us_per_row * 1e-6)
        with open(os.path.join(call_dir, f"{os.getpid()}-{time.time_ns()}"), "w") as f:
            f.write(str(len(x)))
        return pc.multiply(x, 2)

    return double


def udf_rows(call_dir: Path) -> int:
    """Rows the UDF ran on since the last call (the count is reset)."""
    n = sum(int(p.read_text()) for p in call_dir.iterdir())
    for p in call_dir.iterdir():
        p.unlink()
    return n
