"""The README demo: build a sample table, backfill two UDF columns on local Spark, append, backfill again.

Run with ``python -m geneva_provider.demo [--db DIR] [--rows N]``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time

import geneva_provider as gp
from geneva_provider.examples import embed, sample, word_count
from geneva_provider.spark import local_session


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default=".demo/lake", help="database directory (recreated)")
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    shutil.rmtree(args.db, ignore_errors=True)
    db = gp.connect(args.db)
    tbl = db.create_table("events", sample(args.rows), max_rows_per_file=max(args.rows // 8, 1))
    tbl.add_columns({"words": word_count, "embedding": embed})
    print(f"table {tbl.uri}: {tbl.count_rows()} rows in {len(tbl.dataset().get_fragments())} fragments")

    t = time.perf_counter()
    spark = local_session("local[*]", app_name="geneva-demo", conf={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - t
    rows = []
    try:
        for column in ("words", "embedding"):
            res = tbl.backfill(column, spark=spark)
            rows.append(("first backfill", column, res))
        appended = max(args.rows // 10, 1)
        tbl.add(sample(appended, start=args.rows))
        for column in ("words", "embedding"):
            res = tbl.backfill(column, spark=spark)
            rows.append((f"after appending {appended} rows", column, res))
    finally:
        spark.stop()

    print(f"\nSpark session start: {session_s:.1f}s")
    print(f"{'run':<28} {'column':<10} {'computed':>9} {'reused':>9} {'fragments':>9} {'version':>7} {'seconds':>8}")
    for label, column, res in rows:
        print(f"{label:<28} {column:<10} {res.rows_computed:>9} {res.rows_reused:>9} "
              f"{res.fragments_committed:>9} {res.version:>7} {res.seconds.get('total', 0):>8.2f}")
    print("\nfirst rows:")
    print(tbl.to_arrow(["id", "text", "words", "embedding"]).slice(0, 5).to_pandas().to_string(index=False))
    tbl.dataset().validate()
    missing = tbl.count_rows("words IS NULL OR embedding IS NULL")
    print(f"\n{tbl.count_rows()} rows, {missing} without values; table validated")


if __name__ == "__main__":
    main()
