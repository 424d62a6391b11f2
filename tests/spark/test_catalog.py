"""Tables through the Lance namespace (directory implementation), on local disk and on an object store.

The part that needs a Spark session; the rest is in tests/airflow/test_catalog.py, tests/unit/test_catalog.py.
"""

from __future__ import annotations

import geneva_provider as gp
from tests.helpers import events_table


def test_a_backfill_on_an_object_store_table(s3, spark):
    db = gp.connect(f"s3://{s3.bucket}/backfill", storage_options=s3.storage_options)
    tbl = db.create_table("events", events_table(3_000), max_rows_per_file=1_000)

    @gp.udf
    def double(x: int) -> int:
        return 2 * x

    tbl.add_columns({"y": double})
    assert tbl.backfill("y", spark=spark).rows_computed == 3_000
    got = db.open_table("events").to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]]
    assert tbl.checkpoint_store.uri == f"s3://{s3.bucket}/backfill/events.lance/_checkpoints"
    tbl.dataset().validate()


def test_a_view_refresh_and_an_error_store_on_an_object_store(s3, spark):
    db = gp.connect(f"s3://{s3.bucket}/views", storage_options=s3.storage_options)
    src = db.create_table("events", events_table(2_000), max_rows_per_file=500)

    @gp.udf(on_error=gp.skip_on_error())
    def checked(x: int) -> int:
        if x == 1_001:
            raise ValueError("x=1001 is refused")
        return x + 1

    view = db.create_materialized_view("odd", src.search(None).where("x % 2 = 1").select({"x": "x", "z": checked}))
    first = view.refresh(spark=spark)
    assert first.rows_computed == 1_000 and first.rows_failed == 1
    src.add(events_table(100, start=2_000))
    assert view.refresh(spark=spark).rows_computed == 50 + 1  # the new odd rows, and the failed one again
    got = view.to_arrow(["x", "z"]).to_pydict()
    assert sorted(got["x"]) == list(range(1, 2_100, 2))
    assert all(z == x + 1 for x, z in zip(got["x"], got["z"], strict=True) if x != 1_001)
    errors = view.get_errors(first.job_id)
    assert errors.column("message").to_pylist() == ["x=1001 is refused"]
    assert view.uri.startswith(f"s3://{s3.bucket}/views/") and db.get_job(first.job_id).status == "DONE"
    view.dataset().validate()


