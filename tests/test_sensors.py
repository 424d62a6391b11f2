"""The sensors as a user meets them: what they count, how they fail, what they log.

Real Lance tables, real backfills on the session's local Spark, real Airflow (``dag.test()`` on
the SQLite metadata DB) where retries and reschedules matter.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

import geneva_provider as gp
from geneva_provider.pipeline.plan_backfill import plan_backfill
from geneva_provider.sensors.table import GenevaColumnBackfilledSensor, GenevaTableChangedSensor
from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger, GenevaTableChangedTrigger
from tests.helpers import events_table


def context():
    return {"outlet_events": defaultdict(lambda: SimpleNamespace(extra=None))}


def logged(capfd) -> str:
    """What the sensors logged since the last call (Airflow's task logger writes to the process's stdout)."""
    out, err = capfd.readouterr()
    return out + err


async def first_event(trigger):
    async for event in trigger.run():
        return event
    return None


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return 2 * x


@pytest.fixture
def team(lance_db):
    """Table ``team`` (x = 0..4000, fragments of 1,500 rows) with the UDF column ``s = double(x)``."""
    tbl = lance_db.create_table("team", events_table(4_001), max_rows_per_file=1_500)
    tbl.add_columns({"s": double})
    return tbl


def sensors(**kwargs):
    return (GenevaTableChangedSensor(task_id="changed", table="team", column="s", deferrable=False, **kwargs),
            GenevaColumnBackfilledSensor(task_id="filled", table="team", column="s", deferrable=False, **kwargs))


def test_rows_a_filtered_backfill_left_out_are_pending_for_both_sensors(team, spark):
    team.backfill("s", where="x > 2000", spark=spark)
    version = team.version
    changed, filled = sensors()
    planned = plan_backfill(team.ref, "s").rows_to_compute
    assert planned == 2_001

    seen = changed.poke(context())  # the rows the where left NULL are new work for the column
    assert seen.is_done and seen.xcom_value["rows_pending"] == planned
    seen = filled.poke(context())
    assert not seen.is_done
    assert seen.xcom_value == {"table": "team", "column": "s", "version": version, "fragments_pending": 2,
                               "rows_pending": planned}
    event = asyncio.run(first_event(GenevaColumnBackfilledTrigger(table="team", column="s", poll_interval=0.05,
                                                                  deadline=time.time() + 0.2)))
    assert event.payload["status"] == "timeout"
    assert "table 'team' at version" in event.payload["message"]
    assert "2001 rows in 2 fragments never computed in column 's'" in event.payload["message"]
    assert team.version == version  # a sensor changes nothing

    team.backfill("s", spark=spark)
    assert filled.poke(context()).xcom_value["rows_pending"] == 0 and filled.poke(context()).is_done
    assert not changed.poke(context()).is_done
    event = asyncio.run(first_event(GenevaTableChangedTrigger(table="team", column="s", poll_interval=0.05,
                                                              deadline=time.time() + 0.2)))
    assert event.payload["status"] == "timeout" and "0 rows in 0 fragments never computed" in event.payload["message"]

    # Documented limit: a value whose inputs changed is found by the next plan, not by the sensors.
    team.dataset().update({"x": "x + 1"}, where="x < 10")
    assert plan_backfill(team.ref, "s").rows_to_compute == 10
    assert filled.poke(context()).is_done and not changed.poke(context()).is_done


def test_rows_an_error_policy_skipped_are_pending(lance_db, spark):
    @gp.udf(data_type=pa.int64(), on_error=gp.skip_on_error())
    def picky(x: int) -> int:
        if x % 1_000 == 7:
            raise ValueError(f"no {x}")
        return x

    tbl = lance_db.create_table("team", events_table(4_001), max_rows_per_file=1_500)
    tbl.add_columns({"s": picky})
    tbl.backfill("s", spark=spark)
    _, filled = sensors()
    seen = filled.poke(context())
    assert not seen.is_done and seen.xcom_value["rows_pending"] == 4  # x = 7, 1007, 2007, 3007
    assert plan_backfill(tbl.ref, "s").rows_to_compute == 4


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


DAG_FILE = "geneva_test_sensor_outcomes.py"
DAG_SOURCE = '''
from datetime import datetime, timedelta

from airflow.sdk import DAG

from geneva_provider.sensors.table import GenevaColumnBackfilledSensor, GenevaTableChangedSensor

with DAG(dag_id="geneva_test_sensor_outcomes", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         default_args={"retries": 2, "retry_delay": timedelta(0), "deferrable": False, "poke_interval": 0.1}):
    GenevaColumnBackfilledSensor(task_id="unknown_column", table="team", column="nope", timeout=30)
    GenevaTableChangedSensor(task_id="bad_watermark", table="team", min_rows="{{ 'abc' }}", timeout=30)
    GenevaColumnBackfilledSensor(task_id="lost_files", table="broken", column="s", timeout=30)
    GenevaTableChangedSensor(task_id="rescheduled", table="team", min_rows=10**9, mode="reschedule",
                             poke_interval=1, timeout=2.5)
'''


def test_sensors_under_airflow_fail_once_on_bad_input_and_keep_their_deadline(dagbag, lance_db, spark, capfd):
    """dag.test(): bad input fails at the first try, a lost file is retried, a reschedule keeps the deadline."""
    import shutil

    from airflow.dag_processing.dagbag import DagBag

    team = lance_db.create_table("team", events_table(20))
    team.add_columns({"s": double})
    broken = lance_db.create_table("broken", events_table(20))
    broken.add_columns({"s": double})
    broken.backfill("s", spark=spark)
    shutil.rmtree(f"{str(broken.uri).removeprefix('file://')}/data")  # an I/O failure: a retry may help
    version = team.version
    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / DAG_FILE
    path.write_text(DAG_SOURCE)
    try:
        dag = DagBag(dag_folder=str(path)).get_dag("geneva_test_sensor_outcomes")
        dr = dag.test()
    finally:
        path.unlink()
    out = capfd.readouterr().out
    tis = {ti.task_id: ti for ti in dr.get_task_instances()}
    tries = {task: (ti.state, ti.try_number) for task, ti in tis.items()}
    assert tries == {"unknown_column": ("failed", 1), "bad_watermark": ("failed", 1), "lost_files": ("failed", 3),
                     "rescheduled": ("failed", 1)}, tries
    assert "ColumnError: column 'nope' not found in table 'team'" in out
    assert "InvalidArgumentError: GenevaTableChangedSensor 'bad_watermark' on table 'team': min_rows must be a " \
           "non-negative integer, got 'abc'" in out
    deadlines = re.findall(r"Waiting for table 'team' to reach more than 1000000000 rows; reschedule mode, poking "
                           r"every 1s, deadline (\S+)", out)
    # Airflow anchors a rescheduled sensor's timeout at its first reschedule record, written when the first
    # run ends: every rescheduled run shows that one deadline; the first run's (start + timeout) is earlier
    # by the first poke's duration, which may cross a second boundary.
    first, *later = (dt.datetime.fromisoformat(d) for d in deadlines)
    assert later and len(set(later)) == 1 and dt.timedelta(0) <= later[0] - first <= dt.timedelta(seconds=5), deadlines
    assert re.search(r"Ended: GenevaTableChangedSensor on table 'team' waiting for table 'team' to reach more than "
                     rf"1000000000 rows: not met by the deadline {re.escape(deadlines[-1])}; last seen: table 'team' "
                     rf"at version {version}, 20 rows in 1 fragments", out)
    assert team.version == version
