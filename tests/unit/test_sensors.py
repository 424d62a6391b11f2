"""The sensors as a user meets them: what they count, how they fail, what they log.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/airflow/test_sensors.py.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

import geneva_provider as gp
from geneva_provider.sensors.table import GenevaColumnBackfilledSensor, GenevaTableChangedSensor
from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger
from tests.helpers import context, events_table, first_event


def logged(capfd) -> str:
    """What the sensors logged since the last call (Airflow's task logger writes to the process's stdout)."""
    out, err = capfd.readouterr()
    return out + err


def test_a_missing_table_is_waited_for(lance_db, capfd):
    changed = GenevaTableChangedSensor(task_id="later", table="later", min_rows=0, deferrable=False,
                                       poke_interval=0.01, timeout=0.05)
    seen = changed.poke(context())
    assert not seen.is_done and seen.xcom_value == {"table": "later", "exists": False}
    assert "Not yet: table 'later' does not exist (yet)" in logged(capfd)
    with pytest.raises(AirflowSensorTimeout, match=r"last seen: table 'later' does not exist \(yet\)"):
        changed.execute(context())
    filled = GenevaColumnBackfilledSensor(task_id="f", table="later", column="s", deferrable=False)
    assert not filled.poke(context()).is_done
    assert "later" not in lance_db.table_names()  # waiting created nothing

    lance_db.create_table("later", events_table(3))
    assert changed.execute(context())["rows"] == 3
    with pytest.raises(gp.ColumnError, match=r"column 's' not found in table 'later'"):
        filled.poke(context())  # once the table exists, a wrong column is an error again


def test_a_poke_mode_timeout_names_the_table_the_watermark_and_what_was_last_seen(team, capfd):
    version = team.version
    sensor = GenevaTableChangedSensor(task_id="p", table="team", min_rows=4_001, deferrable=False,
                                      poke_interval=0.01, timeout=0.05)
    with pytest.raises(AirflowSensorTimeout) as timed_out:
        sensor.execute(context())
    message = str(timed_out.value)
    log = logged(capfd)
    assert message.startswith("GenevaTableChangedSensor on table 'team' waiting for table 'team' to reach more "
                              "than 4001 rows: not met by the deadline ")
    assert message.endswith(f"; last seen: table 'team' at version {version}, 4001 rows in 3 fragments")
    assert f"Not yet: table 'team' at version {version}, 4001 rows in 3 fragments" in log
    assert re.search(r"Waiting for table 'team' to reach more than 4001 rows; poke mode, poking every 0.01s, "
                     r"deadline \d{4}-", log)
    assert f"Ended: {message}" in log

    soft = GenevaTableChangedSensor(task_id="soft", table="team", min_rows=4_001, deferrable=False,
                                    poke_interval=0.01, timeout=0.05, soft_fail=True)
    with pytest.raises(AirflowSkipException):
        soft.execute(context())
    log = logged(capfd)
    assert "Ended: GenevaTableChangedSensor on table 'team'" in log and "skipped (soft_fail)" in log
    assert team.version == version


def test_a_deferred_error_a_retry_cannot_fix_fails_once(team):
    version = team.version
    sensor = GenevaColumnBackfilledSensor(task_id="d", table="team", column="nope", deferrable=True)
    with pytest.raises(gp.ColumnError, match=r"column 'nope' not found in table 'team'") as failed:
        sensor.execute(context())  # the first poke, before deferring
    assert isinstance(failed.value, AirflowFailException)

    # An error the trigger meets (a column dropped while it waited): the resumed task fails once.
    event = asyncio.run(first_event(GenevaColumnBackfilledTrigger(table="team", column="nope", poll_interval=0.05)))
    assert event.payload["status"] == "error" and event.payload["retryable"] is False
    with pytest.raises(gp.ColumnError, match=r"on table 'team'.*column 'nope' not found in table 'team'") as failed:
        sensor.execute_complete(context(), event.payload)
    assert isinstance(failed.value, AirflowFailException)
    transient = {"status": "error", "message": "connection reset", "error": "OSError", "retryable": True}
    with pytest.raises(Exception, match="connection reset") as failed:
        sensor.execute_complete(context(), transient)
    assert not isinstance(failed.value, AirflowFailException | gp.GenevaError)
    assert team.version == version


