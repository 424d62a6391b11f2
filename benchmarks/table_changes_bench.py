"""What a table change costs the next backfill and the next view refresh, on 1M rows.

Why: computed values must follow their rows through compaction, updates and deletes, so the next
job costs the rows that really changed -- not every row of every touched fragment.  The UDF costs
``--us-per-row`` microseconds per row (a stand-in for an embedding model), so the wall times show
what a recompute would cost; the UDF rows are counted in the Spark workers.

Run ``python benchmarks/table_changes_bench.py [--rows N] [--us-per-row U]``; it prints a table
and checks only that the values are right.
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--us-per-row", type=float, default=20.0)
    args = parser.parse_args()
    n = args.rows
    tmp = Path(tempfile.mkdtemp(prefix="geneva-changes-bench-"))
    calls = tmp / "calls"
    calls.mkdir()
    figures: list[tuple[str, str, int, float]] = []

    def step(job: str, change: str, fn) -> None:
        t = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t
        figures.append((job, change, udf_rows(calls), seconds))
        print(f"  {job:<13} after {change:<40} {figures[-1][2]:>9,} rows computed {seconds:>7.2f} s", flush=True)

    try:
        spark = local_session("local[2]", conf={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        udf = counting_double(str(calls), args.us_per_row)
        db = gp.connect(str(tmp / "db"))
        warm = db.create_table("warm", pa.table({"x": pa.array(range(2_000), pa.int64())}), max_rows_per_file=1_000)
        warm.add_columns({"y": udf})
        warm.backfill("y", spark=spark)  # the Python workers and their imports are warm before any timing
        udf_rows(calls)
        xs = pa.array(range(n), pa.int64())
        tbl = db.create_table("events", pa.table({"id": xs, "x": xs}), max_rows_per_file=max(n // 100, 1))
        tbl.add_columns({"y": udf})
        print(f"{n:,} rows in {len(tbl.dataset().get_fragments())} fragments, UDF ~{args.us_per_row:g} us/row, "
              "local[2]", flush=True)

        step("backfill", "nothing (first, full backfill)", lambda: tbl.backfill("y", spark=spark))
        step("backfill", "compact_files 100 -> 10 fragments",
             lambda: (tbl.dataset().optimize.compact_files(target_rows_per_fragment=n // 10),
                      tbl.backfill("y", spark=spark)))
        step("backfill", "appending 10 % + tbl.compact on Spark",
             lambda: (tbl.add(pa.table({"id": pa.array(range(n, n + n // 10), pa.int64()),
                                        "x": pa.array(range(n, n + n // 10), pa.int64())})),
                      tbl.compact(target_rows_per_fragment=n // 5, spark=spark), tbl.backfill("y", spark=spark)))
        step("backfill", "update of 1 % of the input column",
             lambda: (tbl.dataset().update({"x": "x + 1"}, where="id % 100 = 7"), tbl.backfill("y", spark=spark)))
        step("backfill", "delete of 5 % of the rows",
             lambda: (tbl.delete("id % 20 = 3"), tbl.backfill("y", spark=spark)))
        assert tbl.count_rows("y IS NULL OR y != x * 2") == 0

        view = db.create_materialized_view("v", tbl.search(None).select({"x": "x", "z": udf}))
        step("view refresh", "nothing (first, full refresh)", lambda: view.refresh(spark=spark))
        step("view refresh", "delete of 5 % of the source rows",
             lambda: (tbl.delete("id % 20 = 4"), view.refresh(spark=spark)))
        step("view refresh", "update of 1 % of a column the view reads",
             lambda: (tbl.dataset().update({"x": "x + 1"}, where="id % 100 = 8"), view.refresh(spark=spark)))
        step("view refresh", "compaction of the source",
             lambda: (tbl.dataset().optimize.compact_files(target_rows_per_fragment=n // 2),
                      view.refresh(spark=spark)))
        step("view refresh", "compaction of the view",
             lambda: (view.compact(target_rows_per_fragment=n // 2, spark=spark), view.refresh(spark=spark)))
        got = view.to_arrow(["x", "z"])
        assert got.num_rows == tbl.count_rows() and pc.all(pc.equal(got["z"], pc.multiply(got["x"], 2))).as_py()
        spark.stop()

        full = {job: s for job, change, _, s in figures if change.startswith("nothing")}
        print(f"\n| job | after | rows computed | wall | vs a full {'recompute'} |")
        print("|---|---|---|---|---|")
        for job, change, rows, seconds in figures:
            print(f"| {job} | {change} | {rows:,} | {seconds:.2f} s | {seconds / full[job]:.0%} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
