"""What `pip install airflow-provider-geneva` (no extras) must run: a backfill, a view refresh, a compaction.

`make check-core` runs this in a fresh virtualenv holding the package and its base dependencies only,
from a temp directory (so the installed package is imported, not the source tree), with a real local
Spark session. It fails on any import the base dependencies lack (Airflow brings tenacity, pendulum...
along, so the test suite's venv cannot see a missing one) and checks the values each job leaves.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile

import pyarrow as pa

import geneva_provider as gp
from geneva_provider.stages import local_session


def say(msg: str) -> None:
    print(f"check-core: {msg}", flush=True)


@gp.udf
def double(x: int) -> int:
    return x * 2


def main() -> None:
    assert "site-packages" in gp.__file__, f"geneva_provider imported from {gp.__file__}, not the installed package"
    airflow = importlib.util.find_spec("airflow")
    assert airflow is None, f"this venv has Airflow ({airflow.origin}): it must hold the package without extras"
    say(f"python {sys.version.split()[0]}, geneva_provider from {gp.__file__}, no Airflow installed")

    spark = local_session("local[2]", app_name="geneva-check-core", conf={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory() as lake:
            db = gp.connect(lake)
            tbl = db.create_table("events", pa.table({"x": list(range(1000))}), max_rows_per_file=250)
            tbl.add_columns({"y": double})

            res = tbl.backfill("y", spark=spark)
            values = tbl.to_arrow(columns=["x", "y"]).to_pydict()
            assert res.rows_computed == 1000, res
            assert values["y"] == [x * 2 for x in values["x"]], "backfill left wrong values"
            say(f"backfill: {res.rows_computed} rows computed, {res.fragments_committed} fragments committed, "
                f"version {res.version}")

            view = db.create_materialized_view("evens", tbl.search(None).where("x % 2 = 0")
                                               .select({"x": "x", "y2": double}))
            first = view.refresh(spark=spark)
            tbl.add(pa.table({"x": list(range(1000, 1100))}))
            again = view.refresh(spark=spark)
            rows = view.to_arrow(columns=["x", "y2"]).to_pydict()
            assert first.rows_computed == 500 and again.rows_computed == 50, (first, again)
            assert sorted(rows["x"]) == list(range(0, 1100, 2)), "the view holds other rows than the query's"
            assert rows["y2"] == [x * 2 for x in rows["x"]], "view refresh left wrong values"
            say(f"view refresh: {first.rows_computed} rows, then {again.rows_computed} new rows incrementally; "
                f"{len(rows['x'])} rows in the view")

            tbl.backfill("y", spark=spark)
            before = tbl.dataset().get_fragments()
            comp = tbl.compact(target_rows_per_fragment=10_000, spark=spark)
            after = tbl.dataset().get_fragments()
            values = tbl.to_arrow(columns=["x", "y"]).to_pydict()
            assert comp.fragments_removed == len(before) == 5 and len(after) == 1, (comp, len(after))
            assert sorted(values["x"]) == list(range(1100)), "compaction lost or duplicated rows"
            assert values["y"] == [x * 2 for x in values["x"]], "compaction changed computed values"
            assert tbl.backfill("y", spark=spark).rows_computed == 0, "compaction made the column recompute"
            say(f"compaction: {comp.fragments_removed} fragments into {comp.fragments_added}, values kept, "
                f"nothing to recompute, version {comp.version}")
    finally:
        spark.stop()
    say("OK: backfill, view refresh and compaction ran without any extra")


if __name__ == "__main__":
    main()
