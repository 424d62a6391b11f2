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
from pathlib import Path

import pyarrow as pa

import geneva_provider as gp
from geneva_provider.pipeline.columns.plan_backfill import plan_backfill
from geneva_provider.sensors.table import GenevaColumnBackfilledSensor, GenevaTableChangedSensor
from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger, GenevaTableChangedTrigger
from tests.helpers import context, double, events_table, first_event


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
                     rf"at version {version}, 20 rows in 1 fragment", out)
    assert team.version == version
