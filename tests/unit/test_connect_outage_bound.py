"""How long a stage waits for a lost Spark Connect server: about 35 s, or ``GENEVA_CONNECT_OUTAGE_SECONDS``.

The bound is pyspark's own retry policy with fewer retries, so what is checked is the policy the client
really gets -- its waits added up as pyspark's ``RetryPolicyState`` draws them -- and a real client on a port
where no server listens (no JVM: the Connect client is Python and gRPC).
"""

from __future__ import annotations

import socket

import pytest

from geneva_provider.core.errors import InvalidArgumentError, SparkServerUnreachableError
from geneva_provider.pipeline.spark import connect


def _waits(policy) -> list[int]:
    state, waits = policy.to_state(), []
    while (wait := state.next_attempt()) is not None:
        waits.append(wait)
    return waits


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_by_default_a_stage_waits_about_35_seconds_and_a_first_contact_about_17(monkeypatch):
    monkeypatch.delenv(connect.OUTAGE_SECONDS_ENV, raising=False)
    waits = _waits(connect.stage_retry_policy())
    assert waits[:3] == [50, 200, 800] and len(waits) == 7  # pyspark's back-off (x4, jitter from 2 s), capped
    assert 3200 <= waits[3] <= 3700 and all(10_000 <= w <= 10_500 for w in waits[4:])
    assert 34_000 <= sum(waits) <= 36_000
    assert connect._first_contact_retries() == 5  # 0.05 + 0.2 + 0.8 + 3.2 + 12.8 s


@pytest.mark.parametrize("seconds", [1, 2, 5, 12, 35, 90, 600])
def test_the_setting_bounds_the_waits_of_a_stage(monkeypatch, seconds):
    monkeypatch.setenv(connect.OUTAGE_SECONDS_ENV, str(seconds))
    waits = _waits(connect.stage_retry_policy())
    total = sum(waits) / 1000
    # At least the setting but for a second; above it by at most the last wait (the 10 s cap) and the jitter
    # pyspark adds to each wait of 2 s or more (up to 0.5 s).
    assert seconds - 1 <= total <= seconds + 10 + 0.5 * len(waits), total
    assert connect._first_contact_retries() >= 1


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "1e9"])
def test_a_bad_setting_is_refused_naming_the_variable_before_any_contact(monkeypatch, value):
    monkeypatch.setenv(connect.OUTAGE_SECONDS_ENV, value)
    with pytest.raises(InvalidArgumentError, match=rf"GENEVA_CONNECT_OUTAGE_SECONDS .* got '{value}'"):
        connect.connect_session(f"sc://127.0.0.1:{_free_port()}")


def test_a_server_that_never_answers_is_unreachable_after_the_short_first_contact(monkeypatch):
    monkeypatch.setenv(connect.OUTAGE_SECONDS_ENV, "2")
    port = _free_port()
    with pytest.raises(SparkServerUnreachableError, match=rf"127\.0\.0\.1:{port}") as raised:
        connect.connect_session(f"sc://127.0.0.1:{port}/;token=s3cret")
    assert raised.value.retryable
    assert "s3cret" not in str(raised.value)
