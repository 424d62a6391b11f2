"""Builds the fixture store of ``tests/{unit,spark}/test_store_layout.py``: a small lake written by the code of the day.

It was run once, on the unmodified tree of main before the store-layout module existed
(``python -m tests.store_fixture``), and its output is checked in under ``tests/fixtures/store_main``:
the lake itself (``db/``, a few KB) and the sorted list of every key the store holds (``keys.txt``).
The test reads that lake with today's code, so a store written by an older version stays readable.

Keys hash the table's URI, so the lake is written at a fixed absolute path (:data:`HOME`) and the test
copies it back there before reading it.  What it holds:

* ``events`` (20 rows, 4 fragments) with UDF column ``y``: a backfill with a filter, then a full one
  (plans, committed markers, job records, ledgers, batch checkpoints, staged-files records);
* a view ``doubled`` of it with a UDF column, refreshed (the refresh's keys in the view's store);
* a compaction of ``events`` (its plan and record);
* UDF column ``w`` planned and applied but never written: batch checkpoints a rerun must reuse (its
  process "died": the gap lease is one second, so whenever the fixture is read the job reads ABANDONED);
* the operators' keys beside that plan -- the Connect session id and the apply stage's report under
  the key the spark-submit path hands ``--result-key`` (written by the spark-submit program's runner).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HOME = "/tmp/geneva_store_fixture_main"  # where the lake lives while it is written and read (keys hash the URI)
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "store_main"
ROWS = 20


def build() -> None:
    import pyarrow as pa

    import geneva_provider as gp
    from geneva_provider.pipeline.stages.apply import run_apply
    from geneva_provider.pipeline.stages.job_records import GAP_LEASE_ENV
    from geneva_provider.spark_apps._runner import run_stage
    from geneva_provider.stages import local_session, plan_backfill

    @gp.udf(data_type=pa.int64(), name="double")
    def double(x: int) -> int:
        return 2 * x

    @gp.udf(data_type=pa.int64(), name="triple")
    def triple(x: int) -> int:
        return 3 * x

    @gp.udf(data_type=pa.int64(), name="plus one")  # a name with a space: keys hash it
    def plus_one(x: int) -> int:
        return x + 1

    os.environ[GAP_LEASE_ENV] = "1"  # the jobs' records, written by the code under test, say so
    shutil.rmtree(HOME, ignore_errors=True)
    spark = local_session("local[1]", app_name="store-fixture", conf={"spark.ui.showConsoleProgress": "false"})
    db = gp.connect(f"{HOME}/db")
    xs = pa.array(range(ROWS), pa.int64())
    events = db.create_table("events", pa.table({"id": xs, "x": xs}), max_rows_per_file=5)
    events.add_columns({"y": double})
    events.backfill("y", where="x < 10 AND x <> 3", spark=spark)
    events.backfill("y", spark=spark)
    view = db.create_materialized_view("doubled", events.search(None).select({"x": "x", "z": plus_one}))
    view.refresh(spark=spark)
    events.compact(target_rows_per_fragment=10, spark=spark)

    events.add_columns({"w": triple})
    summary = plan_backfill(events.ref, "w")
    plan_key = summary.plan_uri.rstrip("/").rsplit("/", 1)[1].removesuffix(".lance")
    # The keys operators/spark.py builds beside a plan, as it builds them.
    events.checkpoint_store.put_text(f"{plan_key}-connect-session", "00000000-0000-4000-8000-000000000000")
    spark.stop()  # the runner starts its own session, as a spark-submit program does
    code = run_stage("apply", run_apply, ["--plan-uri", summary.plan_uri, "--result-key", f"{plan_key}-apply-result"])
    assert code == 0, code

    shutil.rmtree(FIXTURE, ignore_errors=True)
    FIXTURE.mkdir(parents=True)
    shutil.copytree(f"{HOME}/db", FIXTURE / "db")
    keys = [f"{name} {key}" for name in ("events", "doubled")
            for key in db.open_table(name).checkpoint_store.list_keys()]
    (FIXTURE / "keys.txt").write_text("".join(f"{line}\n" for line in keys))
    shutil.rmtree(HOME, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(build())
