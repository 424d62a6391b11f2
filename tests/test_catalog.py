"""Tables through the Lance namespace (directory implementation), on local disk and on an object store."""

from __future__ import annotations

import lance
import pytest

import geneva_provider as gp
from tests.helpers import events_table
from tests.s3_server import S3Server


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


def exercise(db: gp.Connection, storage_options: dict[str, str] | None) -> None:
    """Create, list, open, overwrite and drop, next to a table written without the package."""
    lance.write_dataset(events_table(5), f"{db.uri}/legacy.lance", storage_options=storage_options)
    assert db.table_names() == ["legacy"]
    t = db.create_table("events", events_table(10), max_rows_per_file=4)
    assert t.uri == f"{db.uri}/events.lance"
    assert len(t.dataset().get_fragments()) == 3 and t.dataset().has_stable_row_ids
    assert db.table_names() == ["events", "legacy"]
    with pytest.raises(gp.InvalidArgumentError, match="'events' already exists"):
        db.create_table("events", events_table(3))
    assert db.create_table("events", events_table(7), mode="overwrite").count_rows() == 7
    assert db.open_table("legacy").count_rows() == 5
    assert db.open_table("events").to_arrow(["x"]).column("x").to_pylist() == list(range(7))
    db.drop_table("legacy")
    assert db.table_names() == ["events"]
    with pytest.raises(gp.TableNotFoundError, match="table 'legacy' not found"):
        db.open_table("legacy")
    with pytest.raises(gp.TableNotFoundError, match="table 'legacy' not found"):
        db.drop_table("legacy")
    with pytest.raises(gp.InvalidArgumentError, match="invalid table name 'a/b'"):
        db.create_table("a/b", events_table(1))
    db.drop_table("events")
    assert db.table_names() == []


def test_directory_namespace_on_local_disk(tmp_path):
    exercise(gp.connect(str(tmp_path / "lake")), None)


def test_directory_namespace_on_an_object_store_passes_the_storage_options(s3):
    uri = f"s3://{s3.bucket}/db"
    db = gp.connect(uri, storage_options=s3.storage_options)
    assert repr(db) == f"Connection(uri='{uri}')" and "test-secret" not in repr(db.catalog)
    exercise(db, s3.storage_options)


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


def test_a_lance_connection_names_the_namespace_and_its_storage_options(s3, monkeypatch):
    import json

    from airflow.sdk.log import _secrets_masker

    from geneva_provider.hooks.lance import LanceHook

    db = gp.connect(f"s3://{s3.bucket}/hooked", storage_options=s3.storage_options)
    db.create_table("events", events_table(10))
    monkeypatch.setenv("AIRFLOW_CONN_LANCE_S3", json.dumps({
        "conn_type": "lance", "host": f"s3://{s3.bucket}/hooked",
        "extra": {"secret_storage_options": s3.storage_options, "namespace_impl": "dir",
                  "secret_namespace_properties": {"dir_listing_enabled": "true"}}}))
    hook = LanceHook("lance_s3")
    assert hook.database.table_names() == ["events"]
    assert hook.open_table("events").count_rows() == 10
    ok, message = hook.test_connection()
    assert ok and message.startswith("1 tables in s3://")
    secret = s3.storage_options["aws_secret_access_key"]
    assert secret not in repr(hook.database) and secret not in str(_secrets_masker().redact(f"key={secret}"))


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


def test_a_dag_run_on_an_object_store_with_credentials_only_in_the_connection(s3, dagbag, monkeypatch):
    import json

    monkeypatch.setenv("AIRFLOW_CONN_LANCE_S3", json.dumps({
        "conn_type": "lance", "host": f"s3://{s3.bucket}/dag",
        "extra": {"secret_storage_options": s3.storage_options}}))
    db = gp.connect(f"s3://{s3.bucket}/dag", storage_options=s3.storage_options)
    db.create_table("events", events_table(3_000), max_rows_per_file=1_000)
    dr = dagbag.get_dag("geneva_test_s3").test()
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert dr.state == "success", states
    got = db.open_table("events").to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and len(got["x"]) == 3_000
    (job,) = db.list_jobs("events")
    assert job.status == "DONE" and job.rows_committed == 3_000 and job.airflow_run_id == dr.run_id
