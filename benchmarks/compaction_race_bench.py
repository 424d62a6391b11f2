"""What a compaction planned before a backfill, and committed after its apply stage, costs that backfill.

Why (issue 20, point 4a): a compaction plans at version v, a backfill plans at v too and computes
its rows, then the compaction commits.  If the commit rewrote the backfill's fragments, the backfill's
commits would find them gone and its converging rerun would compute every row again.  The compaction
re-reads which fragments live jobs hold right before it commits and leaves those alone, so the
backfill lands as planned and its rerun computes nothing.

Run ``python benchmarks/compaction_race_bench.py [--rows N] [--fragments F]``; it prints the rows
the UDF ran on in the backfill and in its rerun, and what the compaction rewrote or left alone.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
from counting import counting_double, udf_rows

import geneva_provider as gp
from geneva_provider.core.errors import GenevaError
from geneva_provider.stages import (
    local_session,
    plan_backfill,
    plan_compaction,
    run_apply,
    run_compaction,
    run_write_commit,
    verify,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--fragments", type=int, default=20)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="geneva-compaction-race-"))
    calls = tmp / "calls"
    calls.mkdir()
    try:
        spark = local_session("local[2]", conf={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        db = gp.connect(str(tmp / "db"))
        xs = pa.array(range(args.rows), pa.int64())
        tbl = db.create_table("events", pa.table({"id": xs, "x": xs}),
                              max_rows_per_file=max(args.rows // args.fragments, 1))
        tbl.add_columns({"y": counting_double(str(calls))})
        compaction = plan_compaction(tbl.ref, {"target_rows_per_fragment": args.rows})  # nothing is live yet
        backfill = plan_backfill(tbl.ref, "y")
        run_apply(backfill.plan_uri, spark)
        computed = udf_rows(calls)
        result = run_compaction(compaction.plan_uri, spark)
        print(f"compaction: {result.fragments_removed} fragments rewritten into {result.fragments_added}; "
              f"left alone: {getattr(result, 'held_by', result.excluded)}")
        try:
            written = run_write_commit(backfill.plan_uri, spark)
            verify(backfill.plan_uri)
            outcome = f"landed ({written.fragments_committed} fragments, vanished {written.fragments_vanished})"
        except GenevaError as exc:
            outcome = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
        print(f"backfill: {computed:,} rows computed; {outcome}")
        rerun = tbl.backfill("y", spark=spark)
        print(f"converging rerun: {udf_rows(calls):,} of {args.rows:,} rows recomputed "
              f"(rows_computed={rerun.rows_computed})")
        assert tbl.count_rows("y IS NULL OR y != x * 2") == 0
        tbl.dataset().validate()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
