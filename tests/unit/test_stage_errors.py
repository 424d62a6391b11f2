"""Errors of stage order and of listings: write+commit before apply, ColumnError's columns, VerificationError's
fragments, a refused object-store connection."""

from __future__ import annotations

import re

import pytest

import geneva_provider as gp
from geneva_provider.stages import plan_backfill
from tests.helpers import events_table, times


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


def _no_ambient_aws_credentials(monkeypatch, tmp_path):
    """No credentials from the environment, the AWS files or an instance's metadata endpoint (no traffic beyond
    127.0.0.1 and the resolver)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


def test_missing_credentials_and_an_unknown_host_are_the_packages_errors_naming_the_store_not_a_rust_dump(
        tmp_path, monkeypatch):
    """S3 storage options without credentials: StorageAccessError naming the database or table and the endpoint, in a
    short message, for every first contact; an endpoint whose host does not resolve (``.invalid`` never does):
    StorageUnreachableError saying the host is unknown.  No secret in either; nothing is changed."""
    from tests.s3_server import S3Server

    _no_ambient_aws_credentials(monkeypatch, tmp_path)
    with S3Server() as s3:
        db = gp.connect(f"s3://{s3.bucket}/db", storage_options=s3.storage_options)
        db.create_table("events", events_table(10))
        secret = s3.storage_options["aws_secret_access_key"]
        keyless = {k: v for k, v in s3.storage_options.items() if k not in ("aws_access_key_id",
                                                                             "aws_secret_access_key")}
        unknown = dict(s3.storage_options, aws_endpoint="http://no-such-host.invalid:9000")
        for options, error, said in [
                (keyless, gp.StorageAccessError, f"no credentials for the object store at {s3.endpoint}"),
                (unknown, gp.StorageUnreachableError,
                 "could not connect to the object store at http://no-such-host.invalid:9000"),
        ]:
            elsewhere = gp.connect(f"s3://{s3.bucket}/db", storage_options=options)
            for what, attempt in {
                "open_table": lambda elsewhere=elsewhere: elsewhere.open_table("events"),
                "table_names": elsewhere.table_names,
                "list_jobs": elsewhere.list_jobs,
                "create_table": lambda elsewhere=elsewhere: elsewhere.create_table("other", events_table(3)),
            }.items():
                with pytest.raises(error) as info:
                    attempt()
                message = str(info.value)
                assert said in message and f"s3://{s3.bucket}/db" in message, (what, message)
                assert len(message) < 400 and "rust" not in message.lower() and "location" not in message, message
                assert secret not in message and "thrott" not in message.lower(), (what, message)
                assert info.value.__cause__ is None and info.value.__suppress_context__, what
                if error is gp.StorageUnreachableError:
                    assert "the host 'no-such-host.invalid' is unknown" in message, (what, message)
                    assert info.value.retryable
                else:
                    assert "aws_access_key_id and aws_secret_access_key" in message and not info.value.retryable
                    assert isinstance(info.value, PermissionError)

        from geneva_provider.core.refs import TableRef

        with pytest.raises(gp.StorageAccessError, match=r"^table 'events': no credentials"):
            TableRef("events", db.open_table("events").uri, keyless).dataset()
        assert db.table_names() == ["events"] and db.open_table("events").count_rows() == 10  # nothing changed


def test_an_endpoint_that_is_not_a_url_or_an_http_one_without_allow_http_is_bad_input_naming_the_option(
        tmp_path, monkeypatch, capfd):
    """An endpoint without its scheme made the object-store client panic (a Rust backtrace on stderr, then
    ``PanicException``); an ``http://`` endpoint without ``allow_http`` gave a Rust error dump.  Both are the
    package's InvalidArgumentError naming the option, before any request."""
    _no_ambient_aws_credentials(monkeypatch, tmp_path)
    creds = {"aws_access_key_id": "k", "aws_secret_access_key": "s3cr3t-value", "aws_region": "us-east-1"}
    for endpoint in ("no-such-host.invalid:9000", "127.0.0.1:9000", "ftp://127.0.0.1:9000"):
        with pytest.raises(gp.InvalidArgumentError, match=r"storage option 'aws_endpoint' must be an http:// or "
                                                          r"https:// URL") as info:
            gp.connect("s3://lake/db", storage_options=dict(creds, aws_endpoint=endpoint, allow_http="true"))
        assert repr(endpoint) in str(info.value) and "s3cr3t-value" not in str(info.value)
    plain_http = gp.connect("s3://lake/db", storage_options=dict(creds, aws_endpoint="http://127.0.0.1:9"))
    for attempt in (plain_http.table_names, lambda: plain_http.open_table("events"),
                    lambda: plain_http.create_table("t", events_table(3))):
        with pytest.raises(gp.InvalidArgumentError, match=r"http://127\.0\.0\.1:9 is plain http: add "
                                                          r"allow_http='true'") as info:
            attempt()
        assert "s3://lake/db" in str(info.value) and len(str(info.value)) < 300, str(info.value)
    assert "panicked" not in capfd.readouterr().err


def test_a_task_meeting_a_cleaned_up_version_names_the_version_in_either_manifest_naming_scheme(db):
    """Lance names a manifest by its version (``_versions/2.manifest``) or, in a table with V2 manifest names, by
    ``2**64 - 1 - version`` in 20 digits: the package's error names the table's version either way."""
    from geneva_provider.pipeline.spark.pinned_versions import translate_gone
    from geneva_provider.stages import load_plan

    tbl = db.create_table("events", events_table(100))
    tbl.add_columns({"y": times(2)})
    summary = plan_backfill(tbl.ref, "y")
    job = load_plan(summary.plan_uri)[0].job()
    path = f"{tbl.ref.uri}/_versions"
    for name in (str(summary.read_version), f"{2**64 - 1 - summary.read_version:020d}"):
        lance_error = ValueError(f"Dataset at path {path}/{name}.manifest was not found: Not found: ...")
        gone = translate_gone(job, summary.job_id, lance_error)
        assert isinstance(gone, gp.TableVersionGoneError)
        assert f"version {summary.read_version} of table 'events' is gone" in str(gone), str(gone)
    assert translate_gone(job, summary.job_id, ValueError("some other failure")) is None
