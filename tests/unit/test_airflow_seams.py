"""The seams under the Airflow surface: probes apart from waiting, and a Spark stage as submit / poll / result.

What a sensor or trigger looks at is a probe (``pipeline/table_probes.py``): plain pydantic data
that runs on a Lance dataset without Airflow, so an event trigger for an ``AssetWatcher`` can reuse
it.  A trigger is rebuilt by Airflow from its serialized kwargs, so the same kwargs must make the same
trigger, whenever they are read.  A Spark stage is submitted, polled and read back from the
checkpoint store by ids alone (``pipeline/stage_reports.py``), on either backend.  Real Lance tables,
real spark-submit, a real Spark Connect server.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from collections import defaultdict
from types import SimpleNamespace

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import TaskDeferred

import geneva_provider as gp
from geneva_provider.pipeline.table_probes import (
    PROBE,
    AnyOf,
    ColumnBackfilled,
    ColumnPending,
    RowsAbove,
    VersionAbove,
    table_changed,
)
from geneva_provider.sensors.table import GenevaColumnBackfilledSensor, GenevaTableChangedSensor
from geneva_provider.triggers.table import GenevaColumnBackfilledTrigger, GenevaTableChangedTrigger
from tests.conftest import FAKE_SECRET
from tests.helpers import events_table


def import_string(path: str):
    """The class a trigger's path names, as the triggerer imports it."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def context():
    return {"outlet_events": defaultdict(lambda: SimpleNamespace(extra=None))}


# ------------------------------------------------------------------------------------------------------- probes
_PROBES_WITHOUT_AIRFLOW = '''
import json, sys

import lance
import pyarrow as pa

from geneva_provider.pipeline.table_probes import PROBE

path, probes = sys.argv[1], json.loads(sys.argv[2])
lance.write_dataset(pa.table({"x": list(range(10))}), path, max_rows_per_file=4)
ds = lance.write_dataset(pa.table({"x": [10, 11]}), path, mode="append")
looks = [PROBE.validate_python(probe).check(ds, "t") for probe in probes]
print(json.dumps({"looks": [[done, seen.to_dict()] for done, seen in looks],
                  "airflow": sorted(m for m in sys.modules if m.partition(".")[0] == "airflow")}))
'''


def test_probes_run_on_a_real_lance_table_in_a_process_without_airflow(tmp_path):
    probes = [VersionAbove(version=1), VersionAbove(version=2), RowsAbove(rows=11), RowsAbove(rows=12),
              AnyOf(probes=[VersionAbove(version=2), RowsAbove(rows=11)]),
              AnyOf(probes=[VersionAbove(version=2), RowsAbove(rows=12)])]
    argv = [sys.executable, "-c", _PROBES_WITHOUT_AIRFLOW, str(tmp_path / "t.lance"),
            json.dumps([p.model_dump(mode="json") for p in probes])]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["airflow"] == []  # nothing of Airflow was imported to look at the table
    status = {"version": 2, "rows": 12, "fragments": 4}  # 10 rows by 4, then 2 appended
    assert got["looks"] == [[True, status], [False, status], [True, status], [False, status],
                            [True, status], [False, status]]


def test_a_probe_is_the_same_probe_after_a_json_round_trip():
    nested = AnyOf(probes=[VersionAbove(version=3), AnyOf(probes=[RowsAbove(rows=0), ColumnPending(column="c")]),
                           ColumnBackfilled(column="d")])
    for probe in (nested, *nested.probes):
        assert PROBE.validate_json(json.dumps(probe.model_dump(mode="json"))) == probe
    assert table_changed(min_rows=5) == RowsAbove(rows=5)  # one watermark: no AnyOf around it
    assert table_changed(4, None, "c") == AnyOf(probes=[VersionAbove(version=4), ColumnPending(column="c")])
    with pytest.raises(gp.InvalidArgumentError, match="min_version, min_rows or column"):
        table_changed()
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        VersionAbove(version=-1)


@gp.udf(data_type=pa.int64())
def triple(x: int) -> int:
    return 3 * x


def test_column_probes_count_the_rows_never_computed_and_refuse_a_plain_column(lance_db):
    tbl = lance_db.create_table("events", events_table(5_000), max_rows_per_file=2_000)
    tbl.add_columns({"t": triple})  # declared, never backfilled: every row is pending
    ds = tbl.dataset()
    assert ColumnPending(column="t").check(ds, "events") == (True, gp_seen(
        version=ds.version, rows=5_000, fragments=3, column="t", rows_pending=5_000, fragments_pending=3))
    assert ColumnBackfilled(column="t").check(ds, "events") == (False, gp_seen(
        version=ds.version, column="t", rows_pending=5_000, fragments_pending=3))
    # Any of them: done if one is; what was seen is what each saw, from one look at the table.
    done, seen = AnyOf(probes=[VersionAbove(version=ds.version), ColumnBackfilled(column="t")]).check(ds, "events")
    assert not done and seen.to_dict() == {"version": ds.version, "rows": 5_000, "fragments": 3, "column": "t",
                                           "rows_pending": 5_000, "fragments_pending": 3}
    for probe in (ColumnPending(column="x"), ColumnBackfilled(column="x"),
                  AnyOf(probes=[RowsAbove(rows=0), ColumnPending(column="x")])):  # an error is never hidden
        with pytest.raises(gp.ColumnError, match="column 'x' of table 'events' is not a UDF column"):
            probe.check(ds, "events")


def gp_seen(**fields):
    from geneva_provider.core.table_events import TableSeen

    return TableSeen(**fields)


# ----------------------------------------------------------------------------------------------------- triggers
@pytest.mark.parametrize("trigger", [
    GenevaTableChangedTrigger(table="events", min_version=3, min_rows=None, column="t", poll_interval=5),
    GenevaTableChangedTrigger(table="events", min_rows=7, poll_interval=0.5, deadline=1_900_000_000.5),
    GenevaColumnBackfilledTrigger(table="events", column="t", lance_conn_id="lake", deadline=1_900_000_000.0),
    GenevaColumnBackfilledTrigger(table="events", column="t"),
], ids=["changed-no-deadline", "changed-deadline", "backfilled-deadline", "backfilled-defaults"])
def test_a_trigger_built_from_its_own_serialized_kwargs_is_the_same_trigger_whenever_it_is_built(trigger):
    """What an AssetWatcher needs: Airflow identifies a trigger by class path and kwargs, and rebuilds it from them."""
    path, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs  # plain JSON, as the trigger table stores it
    cls = import_string(path)
    first = cls(**kwargs)
    time.sleep(0.05)  # built later from the same kwargs: no clock read makes it another trigger
    second = cls(**kwargs)
    assert first.serialize() == second.serialize() == (path, kwargs)
    assert first.probe() == second.probe() == trigger.probe()
    assert first.deadline == kwargs["deadline"]  # None stays None (an event trigger has no deadline)


def test_a_deferred_sensor_hands_its_trigger_an_absolute_deadline_and_no_secret(lance_db):
    lance_db.create_table("events", events_table(10))
    for sensor in (GenevaTableChangedSensor(task_id="s", table="events", min_rows=10, poke_interval=2, timeout=600),
                   GenevaColumnBackfilledSensor(task_id="b", table="events", column="t", poke_interval=2,
                                                timeout=600)):
        if isinstance(sensor, GenevaColumnBackfilledSensor):
            lance_db.open_table("events").add_columns({"t": triple})
        before = time.time()
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute(context())
        path, kwargs = deferred.value.trigger.serialize()
        assert before + 600 - 1 <= kwargs["deadline"] <= time.time() + 600  # the sensor's start + timeout
        time.sleep(0.05)
        assert import_string(path)(**kwargs).serialize() == (path, kwargs)
        assert FAKE_SECRET not in json.dumps(kwargs) and kwargs["lance_conn_id"] == "lance_default"


