"""Sample data and UDFs used by the demo and the example DAGs (importable as ``geneva_provider.examples:<name>``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

import geneva_provider as gp

WORDS = ["lance", "spark", "airflow", "column", "vector", "table", "fragment", "backfill"]


@gp.udf(data_type=pa.int32())
def word_count(text: str) -> int:
    """A scalar UDF: called once per row."""
    return len(text.split())


@gp.udf(data_type=pa.list_(pa.float32(), 4), input_columns=["x"])
def embed(x: pa.Array) -> pa.Array:
    """An array UDF: a toy 4-d 'embedding' of x, computed a batch at a time."""
    xs = pc.cast(x, pa.float32())
    cols = [pc.sin(pc.multiply(xs, k)) for k in (0.1, 0.2, 0.3, 0.4)]
    flat = pa.concat_arrays([pa.array([c[i].as_py() for c in cols], pa.float32()) for i in range(len(x))]) \
        if len(x) else pa.array([], pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, 4)


def sample(n: int, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    text = [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + i % 5)) for i in range(start, start + n)]
    return pa.table({"id": ids, "x": ids, "text": text})
