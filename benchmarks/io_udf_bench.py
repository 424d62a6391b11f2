"""An I/O-bound UDF (a remote call of ~20 ms per row): calls in flight per Spark task.

Why: a UDF that waits on a remote model or API is limited by latency, not cores.  The same scalar
UDF backfills the same rows with ``@udf(concurrency=1)`` and ``@udf(concurrency=8)`` on a warm
``local[2]`` session, in one run.  Target: 8 calls in flight >= 6x faster than one at a time.

Run ``python benchmarks/io_udf_bench.py [--rows 20000] [--ms-per-row 20] [--concurrency 8]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import geneva_provider as gp
from geneva_provider.stages import local_session


def remote_udf(ms_per_row: float, concurrency: int) -> gp.UDF:
    @gp.udf(data_type=pa.int64(), concurrency=concurrency, name="remote_double")
    def remote_double(x: int) -> int:
        time.sleep(ms_per_row / 1000)  # waiting on the remote service
        return 2 * x

    return remote_double


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--ms-per-row", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="geneva-io-bench-"))
    try:
        spark = local_session("local[2]", conf={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        db = gp.connect(str(tmp / "db"))
        xs = pa.array(range(args.rows), pa.int64())
        seconds = {}
        for concurrency in (args.concurrency, 1):
            tbl = db.create_table(f"c{concurrency}", pa.table({"x": xs}), max_rows_per_file=max(args.rows // 4, 1))
            tbl.add_columns({"y": remote_udf(args.ms_per_row, concurrency)})
            t = time.perf_counter()
            res = tbl.backfill("y", spark=spark)
            seconds[concurrency] = time.perf_counter() - t
            assert res.rows_computed == args.rows and tbl.count_rows("y != x * 2 OR y IS NULL") == 0
            print(f"{args.rows:,} rows, ~{args.ms_per_row:g} ms/row, {concurrency} call(s) in flight per task: "
                  f"{seconds[concurrency]:.1f} s ({res.rows_computed / seconds[concurrency]:,.0f} rows/s)", flush=True)
        spark.stop()
        speedup = seconds[1] / seconds[args.concurrency]
        verdict = "PASS" if speedup >= 6 else "MISS"
        print(f"{verdict}  {args.concurrency} calls in flight >= 6x faster than one at a time: {speedup:.1f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
