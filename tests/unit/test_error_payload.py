"""One error payload: every package error crosses a process boundary by its registered code, as itself."""

from __future__ import annotations

import pickle

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

import geneva_provider as gp
from geneva_provider.core import errors
from geneva_provider.core.contracts.error_payload import ErrorPayload
from geneva_provider.core.contracts.kinds import EventStatus
from geneva_provider.core.contracts.models import StageReport
from geneva_provider.core.errors import error_class, error_classes
from geneva_provider.core.table_events import ErrorEvent, SuccessEvent, TimeoutEvent, parse_event
from geneva_provider.hooks.errors import FAILS_ONCE, no_retry


def test_every_package_error_round_trips_through_its_payload_as_its_own_class():
    for cls in error_classes():
        payload = ErrorPayload.from_exc(cls("what went wrong"))
        again = ErrorPayload.model_validate_json(payload.model_dump_json()).to_exc()
        assert type(again) is cls and str(again) == "what went wrong"
        assert payload.code == cls.code and payload.retryable is cls.retryable
    assert error_class("SparkServerUnreachableError") is errors.SparkServerUnreachableError


def test_retryable_is_said_by_the_class_alone():
    assert errors.SparkServerUnreachableError.retryable and not errors.SparkEnvironmentError.retryable
    assert issubclass(errors.SparkServerUnreachableError, gp.SparkEnvironmentError)
    assert errors.ConcurrentOverwriteError.retryable is False and issubclass(errors.ConcurrentOverwriteError,
                                                                             gp.CommitError)
    assert gp.CommitError.retryable and gp.UDFWorkerDiedError.retryable and gp.StorageUnreachableError.retryable


def test_a_foreign_error_is_never_looked_up_by_name():
    payload = ErrorPayload.from_exc(OSError("connection reset"))
    assert (payload.code, payload.retryable) == ("OSError", True)
    exc = payload.to_exc("the stage failed: connection reset")
    assert type(exc) is RuntimeError and str(exc) == "the stage failed: connection reset"
    # A name of something in the errors module that is no registered error is no error class either.
    assert type(ErrorPayload(code="ErrorPayload", message="m").to_exc()) is RuntimeError


def test_a_second_class_with_a_taken_code_is_refused():
    with pytest.raises(TypeError, match="error code 'ColumnError' is taken"):
        type("ColumnError", (errors.GenevaError,), {"__module__": "elsewhere"})


def test_every_error_a_retry_cannot_fix_has_its_fail_once_twin():
    for cls in error_classes():
        if cls.retryable:
            continue
        failed = no_retry(cls("bad input"))
        assert isinstance(failed, cls) and isinstance(failed, AirflowFailException), cls
        assert type(failed).__name__ == cls.__name__ and str(failed) == "bad input"
        assert FAILS_ONCE[cls] is type(failed)
        assert ErrorPayload.from_exc(failed).code == cls.code  # a twin's payload names the package class
        assert type(pickle.loads(pickle.dumps(failed))) is type(failed)  # a twin is a class of its own module


def test_a_stage_report_carries_one_payload():
    report = StageReport.failed(gp.ColumnError("column 'y' not found"))
    read = StageReport.model_validate_json(report.model_dump_json())
    assert read.status == EventStatus.FAILED == "failed"
    assert read.error == ErrorPayload(code="ColumnError", message="column 'y' not found", retryable=False)
    assert read.error.describe() == "ColumnError: column 'y' not found"
    assert StageReport.model_validate_json('{"status": "success"}').to_xcom() == {"status": "success"}


def test_trigger_events_are_validated_on_arrival():
    event = ErrorEvent.of("team", gp.ColumnError("column 'nope' not found"))
    assert event.to_dict() == {"status": "error", "table": "team", "message": "column 'nope' not found",
                               "error": "ColumnError", "retryable": False}
    parsed = parse_event(event.to_dict(), "sensor 's'")
    assert isinstance(parsed, ErrorEvent) and type(parsed.payload.to_exc()) is gp.ColumnError
    assert isinstance(parse_event({"status": "success", "version": 3}, "s"), SuccessEvent)
    assert parse_event({"status": "success", "version": 3}, "s").seen() == {"version": 3}
    assert isinstance(parse_event({"status": "timeout", "message": "late"}, "s"), TimeoutEvent)
    for malformed, why in (({"status": "done"}, "status"), ({"status": "success", "version": "new"}, "version"),
                           ({"status": "timeout"}, "message"), ("success", "event")):
        with pytest.raises(errors.MalformedEventError, match=f"sensor 's' received a malformed trigger event.*{why}"):
            parse_event(malformed, "sensor 's'")


def test_a_malformed_event_fails_the_sensor_once():
    from geneva_provider.sensors.table import GenevaTableChangedSensor

    sensor = GenevaTableChangedSensor(task_id="s", table="events", min_version=1)
    with pytest.raises(errors.MalformedEventError, match="GenevaTableChangedSensor 's' on table 'events'") as failed:
        sensor.execute_complete({}, {"status": "success", "rows": "many"})
    assert isinstance(failed.value, AirflowFailException)
    with pytest.raises(AirflowException, match="boom") as failed:
        sensor.execute_complete({}, {"status": "error", "message": "boom", "error": "KeyError"})
    assert not isinstance(failed.value, AirflowFailException | gp.GenevaError)


def test_enum_fields_store_the_same_words():
    from geneva_provider.core.contracts.kinds import JobKind, Stage
    from geneva_provider.core.contracts.models import JobRecord

    record = JobRecord(job_id="j", kind=JobKind.BACKFILL, table="t", stage=Stage.WRITE_COMMIT, created_at="c",
                       updated_at="u")
    stored = record.model_dump(mode="json")
    assert (stored["kind"], stored["stage"]) == ("backfill", "write_commit")
    read = JobRecord.model_validate_json(record.model_dump_json())
    assert read.kind is JobKind.BACKFILL and read.stage is Stage.WRITE_COMMIT
    assert JobRecord.model_validate({**stored, "stage": "done"}).stage == "done"  # a finished job's record
    with pytest.raises(ValueError, match="stage"):
        JobRecord.model_validate({**stored, "stage": "apply2"})
