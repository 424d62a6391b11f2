"""UDFs that kill their Python worker (os._exit, a segfault, the Python memory limit) fail with a UDFExecutionError
naming the UDF, column, table, fragment and the cause; nothing is committed and a rerun with the fix works."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

import geneva_provider as gp
from tests.helpers import events_table

ROWS, PER_FRAGMENT = 400, 100  # four fragments; the UDF dies on x == 250 (fragment 2)


def _dying_udf(flag: str, how: str) -> gp.UDF:
    """x*2, except that it kills its worker (``how``) at x == 250 while the file ``flag`` exists."""

    @gp.udf(data_type=pa.int64(), name="explode")
    def explode(x: int) -> int:
        if x == 250 and os.path.exists(flag):
            if how == "exit":
                os._exit(3)
            elif how == "segfault":
                import ctypes

                ctypes.string_at(0)
            elif how == "memory":
                hog = bytearray(8 * 1024 ** 3)  # far beyond the worker's limit
                return len(hog)
        return x * 2

    return explode


def _table(db, tmp_path, how: str):
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=PER_FRAGMENT)
    flag = tmp_path / f"{how}.flag"
    flag.write_text("die")
    tbl.add_columns({"y": _dying_udf(str(flag), how)})
    return tbl, flag


def _assert_untouched_then_rerun(tbl, flag, spark, version_before: int) -> None:
    assert tbl.version == version_before  # nothing committed
    assert tbl.to_arrow(columns=["y"]).column("y").null_count == ROWS
    tbl.dataset().validate()
    flag.unlink()  # the UDF no longer dies
    result = tbl.backfill("y", spark=spark)
    assert result.rows_computed + result.rows_reused == ROWS
    rows = tbl.to_arrow(columns=["x", "y"]).to_pylist()
    assert all(r["y"] == r["x"] * 2 for r in rows) and len(rows) == ROWS
    tbl.dataset().validate()


@pytest.mark.parametrize("how, cause", [
    ("exit", r"os\._exit\(3\)"),
    ("segfault", r"Segmentation fault"),
])
def test_a_udf_that_kills_its_worker_is_named_with_its_rows_and_cause(db, tmp_path, spark, how, cause):
    tbl, flag = _table(db, tmp_path, how)
    before = tbl.version
    with pytest.raises(gp.UDFExecutionError) as info:
        tbl.backfill("y", spark=spark)
    message = str(info.value)
    assert "UDF 'explode'" in message and "column 'y'" in message and "table 'events'" in message
    assert "fragment 2" in message
    assert re.search(cause, message), message
    assert "Py4J" not in message and "\tat " not in message and len(message.splitlines()) == 1
    assert not [k for k in tbl.checkpoint_store.list_keys("running-")]  # no marker left behind
    _assert_untouched_then_rerun(tbl, flag, spark, before)


_OVER_MEMORY = """
import json, sys
sys.path.insert(0, {root!r})
import geneva_provider as gp
from geneva_provider.stages import local_session

spark = local_session("local[2]", conf={{"spark.executor.pyspark.memory": "1g",
                                         "spark.ui.showConsoleProgress": "false"}})
spark.sparkContext.setLogLevel("OFF")
tbl = gp.connect({db!r}).open_table("events")
try:
    tbl.backfill("y", spark=spark)
    print(json.dumps({{"error": None}}))
except Exception as exc:
    print(json.dumps({{"error": type(exc).__name__, "message": str(exc), "package": isinstance(exc, gp.GenevaError)}}))
spark.stop()
"""


def test_a_udf_over_the_python_memory_limit_is_named_with_the_limit(db, tmp_path, spark):
    """spark.executor.pyspark.memory caps each Python worker (an address-space limit): a UDF allocating far more fails
    with a UDFExecutionError naming the UDF, column, table, fragment and the limit (its own session: the limit is set
    when a SparkContext starts)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    tbl, flag = _table(db, tmp_path, "memory")
    before = tbl.version
    script = _OVER_MEMORY.format(root=str(Path(__file__).resolve().parents[2]), db=str(tmp_path / "db"))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert run.stdout.strip(), run.stderr[-3000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["error"] == "UDFExecutionError" and outcome["package"], outcome
    message = outcome["message"]
    assert "UDF 'explode'" in message and "column 'y'" in message and "table 'events'" in message
    assert "fragment 2" in message
    assert "spark.executor.pyspark.memory" in message and "1024 MiB" in message, message
    _assert_untouched_then_rerun(tbl, flag, spark, before)



def test_over_spark_connect_a_udf_calling_os_exit_is_named_too(db, tmp_path, connect_spark):
    """The same report through mapInArrow: Connect's SparkException becomes the package's error."""
    tbl, flag = _table(db, tmp_path, "exit")
    before = tbl.version
    with pytest.raises(gp.UDFExecutionError) as info:
        tbl.backfill("y", spark=connect_spark)
    message = str(info.value)
    assert "UDF 'explode'" in message and "column 'y'" in message and "table 'events'" in message
    assert "fragment 2" in message and "os._exit(3)" in message, message
    assert "SparkException" not in message and len(message.splitlines()) == 1
    _assert_untouched_then_rerun(tbl, flag, connect_spark, before)


def test_a_worker_that_dies_on_every_retry_stops_after_two_deaths(db, tmp_path):
    """With task retries (local[2,4]), a UDF that kills its worker on the same rows every time is reported once it
    has died twice on them, not after every attempt Spark allows (own session: retries are set at start-up)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    tbl, flag = _table(db, tmp_path, "exit")
    deaths = tmp_path / "deaths"
    deaths.mkdir()
    script = _RETRIES.format(root=str(Path(__file__).resolve().parents[2]), db=str(tmp_path / "db"),
                             deaths=str(deaths), flag=str(flag))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert run.stdout.strip(), run.stderr[-3000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    # UDFWorkerDiedError: a UDFExecutionError (it names the UDF) that a retry may get past
    assert outcome["error"] == "UDFWorkerDiedError" and outcome["udf_error"], outcome
    assert "fragment 2" in outcome["message"] and "os._exit(3)" in outcome["message"]
    assert "2 attempts died on the same rows" in outcome["message"], outcome["message"]
    assert len(list(deaths.iterdir())) == 2  # two workers died, not four
    tbl.dataset().validate()


_RETRIES = """
import json, os, sys
sys.path.insert(0, {root!r})
import pyarrow as pa
import geneva_provider as gp
from geneva_provider.core.errors import UDFExecutionError
from geneva_provider.stages import local_session

@gp.udf(data_type=pa.int64(), name="explode")
def explode(x: int) -> int:
    if x == 250 and os.path.exists({flag!r}):
        open(os.path.join({deaths!r}, str(os.getpid())), "w").close()
        os._exit(3)
    return x * 2

spark = local_session("local[2,4]", conf={{"spark.ui.showConsoleProgress": "false"}})
spark.sparkContext.setLogLevel("OFF")
tbl = gp.connect({db!r}).open_table("events")
tbl.drop_columns(["y"])
tbl.add_columns({{"y": explode}})
try:
    tbl.backfill("y", spark=spark, task_size=100)
    print(json.dumps({{"error": None}}))
except Exception as exc:
    print(json.dumps({{"error": type(exc).__name__, "udf_error": isinstance(exc, UDFExecutionError),
                      "message": str(exc)}}))
spark.stop()
"""
