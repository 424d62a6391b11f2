"""Errors of stage order and of listings: write+commit before apply, ColumnError's columns, VerificationError's
fragments, a refused object-store connection."""

from __future__ import annotations

import re

import pytest

import geneva_provider as gp
from geneva_provider.pipeline.job_records import read_record
from geneva_provider.stages import plan_backfill, run_apply, run_write_commit
from tests.helpers import events_table, times


def _last_job_id(spark, group: str) -> int:
    """Runs a one-task probe job in its own group and returns its Spark job id (ids grow by one per job)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        sc.parallelize([1], 1).count()
        return max(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)


def test_write_commit_of_a_plan_whose_apply_never_ran_fails_before_any_spark_job(db, spark):
    tbl = db.create_table("events", events_table(400), max_rows_per_file=100)
    tbl.add_columns({"y": times(2)})
    summary = plan_backfill(tbl.ref, "y")
    store = tbl.checkpoint_store
    version, keys, record = tbl.version, store.list_keys(), read_record(store, summary.job_id)

    before = _last_job_id(spark, "probe-before")
    with pytest.raises(gp.CheckpointMissingError) as info:
        run_write_commit(summary.plan_uri, spark)
    after = _last_job_id(spark, "probe-after")
    assert after == before + 1  # no Spark job ran in between

    message = str(info.value)
    assert summary.job_id in message and "table 'events'" in message and "column 'y'" in message
    assert "run the apply stage first" in message and "400 of its 400 rows to compute" in message
    for fragment in range(4):
        assert f"fragment {fragment} has no checkpoint for 100 of its 100 planned rows" in message
    # Nothing changed: the table, the checkpoint store, the job's record.
    assert tbl.version == version and store.list_keys() == keys
    assert read_record(store, summary.job_id) == record
    tbl.dataset().validate()

    run_apply(summary.plan_uri, spark)  # in order, the same plan lands
    result = run_write_commit(summary.plan_uri, spark)
    assert result.rows_committed == 400
    assert all(r["y"] == 2 * r["x"] for r in tbl.to_arrow(columns=["x", "y"]).to_pylist())
    tbl.dataset().validate()


def test_write_commit_after_an_apply_that_failed_part_way_names_what_is_missing(db, spark, tmp_path):
    """An apply whose UDF failed on some rows left the other tasks' checkpoints: write+commit still refuses, at once."""
    import pyarrow as pa

    @gp.udf(data_type=pa.int64(), name="picky")
    def picky(x: int) -> int:
        if x == 350:
            raise ValueError("no 350")
        return x * 2

    tbl = db.create_table("events", events_table(400), max_rows_per_file=100)
    tbl.add_columns({"y": picky})
    summary = plan_backfill(tbl.ref, "y", gp.BackfillOptions(task_size=100))
    with pytest.raises(gp.UDFExecutionError):
        run_apply(summary.plan_uri, spark)
    version = tbl.version
    with pytest.raises(gp.CheckpointMissingError, match=r"\(100 of its 400 rows to compute have no checkpoint\): "
                                                        r"fragment 3 has no checkpoint for 100 of its 100 planned"):
        run_write_commit(summary.plan_uri, spark)
    assert tbl.version == version
    tbl.dataset().validate()


def test_column_errors_list_the_users_columns_not_the_fingerprint_columns(db):
    import pyarrow as pa

    tbl = db.create_table("events", events_table(10))
    tbl.add_columns({"y": times(2)})
    assert any(n.startswith("__geneva_fp") for n in tbl.schema.names)  # the table holds one
    listed = r"\(columns: \['id', 'x', 'y'\]\)"

    with pytest.raises(gp.ColumnError, match=r"column 'z' not found in table 'events' " + listed):
        tbl.backfill("z")
    with pytest.raises(gp.ColumnError, match=listed):
        tbl.to_arrow(columns=["id", "z"])
    with pytest.raises(gp.ColumnError, match=listed):
        tbl.drop_columns(["z"])
    with pytest.raises(gp.ColumnError, match=listed):
        tbl.get_errors(column="z")

    @gp.udf(data_type=pa.int64(), input_columns=["w"], name="needs_w")
    def needs_w(w: pa.Array) -> pa.Array:
        return w

    with pytest.raises(gp.ColumnError, match=r"reads \['w'\].*" + listed):
        tbl.add_columns({"v": needs_w})
    with pytest.raises(gp.ColumnError, match=r"column 'z' not found in table 'events' " + listed):
        tbl.search(None).select({"out": "z"})
    from geneva_provider.core.table_status import column_backlog  # what the sensors report

    with pytest.raises(gp.ColumnError, match=listed):
        column_backlog(tbl.dataset(), "z", "events")
    assert "v" not in tbl.schema.names  # the failed add_columns changed nothing


def test_a_verification_error_names_ten_fragments_and_counts_the_rest(db):
    """A job none of whose 30 fragments was committed (apply and write never ran): one short message, not 30 clauses."""
    from geneva_provider.stages import verify

    tbl = db.create_table("events", events_table(300), max_rows_per_file=10)
    tbl.add_columns({"y": times(2)})
    summary = plan_backfill(tbl.ref, "y")
    assert summary.fragments_to_compute == 30
    version = tbl.version
    with pytest.raises(gp.VerificationError) as info:
        verify(summary)
    message = str(info.value)
    assert "30 of its 30 planned fragments are not committed" in message
    named = [int(f) for f in re.findall(r"fragment (\d+): \d+ rows lack", message)]
    assert len(named) == 10 and set(named) < set(range(30))
    assert "and 20 more" in message and "table 'events'" in message and "column 'y'" in message
    assert len(message) < 1_000
    assert tbl.version == version
    tbl.dataset().validate()


def test_a_refused_object_store_connection_is_reported_as_such_not_as_throttling(tmp_path):
    """A table's storage options pointing at a closed port: the error says the connection failed, names the table and
    the endpoint, and shows no secret."""
    from tests.s3_server import S3Server, free_port

    with S3Server() as s3:
        db = gp.connect(f"s3://{s3.bucket}/db", storage_options=s3.storage_options)
        db.create_table("events", events_table(10))
        closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        wrong = dict(s3.storage_options, aws_endpoint=closed)
        elsewhere = gp.connect(f"s3://{s3.bucket}/db", storage_options=wrong)
        attempts = {
            "open_table": lambda: elsewhere.open_table("events"),
            "table_names": elsewhere.table_names,
            "create_table": lambda: elsewhere.create_table("other", events_table(3)),
        }
        for what, attempt in attempts.items():
            with pytest.raises(gp.StorageUnreachableError) as info:
                attempt()
            message = str(info.value)
            assert "thrott" not in message.lower(), (what, message)
            assert closed in message and "could not connect" in message, (what, message)
            assert s3.storage_options["aws_secret_access_key"] not in message
            assert isinstance(info.value, ConnectionError) and info.value.retryable
        with pytest.raises(gp.StorageUnreachableError, match=r"^table 'events' in s3://"):
            attempts["open_table"]()

        # A table reference (what the stages take) whose options point at the closed port: the same error.
        from geneva_provider.core.refs import TableRef

        with pytest.raises(gp.StorageUnreachableError, match=r"table 'events'.*could not connect"):
            TableRef("events", db.open_table("events").uri, wrong).dataset()
        assert db.open_table("events").count_rows() == 10  # nothing was changed
