"""Materialized-view figures: create, first refresh, and incremental refresh on a 1M-row source.

Why: an incremental refresh must cost the new rows, not the view.  This prints wall times and
how many rows the UDF actually ran on (counted in the Spark workers), on a warm local[2] session.
Run ``python benchmarks/view_refresh_bench.py [--rows N]``; it prints figures and asserts only
that the results are right.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from counting import counting_double, udf_rows

import geneva_provider as gp
from geneva_provider.stages import local_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="geneva-view-bench-"))
    calls = tmp / "calls"
    calls.mkdir()
    try:
        n = args.rows
        db = gp.connect(str(tmp / "db"))
        xs = pa.array(range(n), pa.int64())
        src = db.create_table("events", pa.table({"id": xs, "x": xs}), max_rows_per_file=max(n // 10, 1))
        t = time.perf_counter()
        spark = local_session("local[2]", conf={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        print(f"session start: {time.perf_counter() - t:.1f}s")
        query = src.search(None).where("x % 2 = 0").select({"id": "id", "x": "x", "y": counting_double(str(calls))})

        t = time.perf_counter()
        view = db.create_materialized_view("evens", query.shuffle(seed=7), max_rows_per_fragment=100_000)
        create_s = time.perf_counter() - t
        first = view.refresh(spark=spark)
        first_rows = udf_rows(calls)
        print(f"create: {create_s:.2f}s ({view.count_rows()} placeholder rows), first refresh: "
              f"{first.seconds['total']:.2f}s, UDF ran on {first_rows} rows")

        src.add(pa.table({"id": pa.array(range(n, n + n // 10), pa.int64()),
                          "x": pa.array(range(n, n + n // 10), pa.int64())}))
        inc = view.refresh(spark=spark)
        inc_rows = udf_rows(calls)
        print(f"incremental refresh after appending {n // 10} source rows: {inc.seconds['total']:.2f}s, "
              f"UDF ran on {inc_rows} rows ({inc.rows_reused} rows reused)")
        noop = view.refresh(spark=spark)
        print(f"refresh with no new rows: {noop.seconds['total']:.2f}s, UDF ran on {udf_rows(calls)} rows")

        got = view.to_arrow(["x", "y"])
        assert got.num_rows == (n + n // 10) // 2 and pc.all(pc.equal(got["y"], pc.multiply(got["x"], 2))).as_py()
        assert first_rows == n // 2 and inc_rows == n // 20
        view.dataset().validate()
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
