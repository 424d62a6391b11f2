"""GPU and resource-aware UDFs: ``@udf(num_gpus=, num_cpus=, memory=)`` scheduled by Spark, each task on its own GPU.

One Spark Connect server on a ``local-cluster`` of one 4-core executor with 2 fake GPUs (the
package's discovery script, told the addresses by ``GENEVA_FAKE_GPUS``) serves the module; the
test process is its client.  The UDFs record each call -- pid, the task's GPU addresses, start
and end -- to files, from which the tests read how many calls overlapped and on which GPUs.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import geneva_provider as gp
from tests.class_archive import every_jvm
from tests.helpers import events_table

ROWS = 8
SLEEP = 0.5


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory):
    """``geneva-connect-server start --gpus 2 --master local[4]`` (GENEVA_FAKE_GPUS=0,1) on a free port in a tmp
    ``--dir``; stopped (and checked gone) after the module's tests."""
    from geneva_provider.connect_server import _free_port, main

    directory = str(tmp_path_factory.mktemp("gpu-connect"))
    port = _free_port()
    with pytest.MonkeyPatch.context() as env:
        # The server, its worker and executor inherit both: the fake GPUs, and the suite's class archive (for the
        # executor too, which spark-submit does not start).
        for name, value in {"GENEVA_FAKE_GPUS": "0,1", **every_jvm()}.items():
            env.setenv(name, value)
        assert main(["start", "--gpus", "2", "--master", "local[4]", "--port", str(port), "--dir", directory]) == 0
        try:
            yield {"dir": directory, "url": f"sc://127.0.0.1:{port}"}
        finally:
            assert main(["stop", "--dir", directory]) == 0
            assert main(["status", "--dir", directory]) == 3  # not running


@pytest.fixture(scope="module")
def gpu_spark(gpu_server):
    """A Connect client of that server: ``local-cluster[1,4,2048]`` whose executor has 2 (fake) GPUs."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    session = RemoteSparkSession.builder.remote(gpu_server["url"]).create()
    try:
        yield session
    finally:
        session.stop()


def test_the_connect_server_started_with_gpus_shows_them(gpu_server, gpu_spark, capsys):
    from geneva_provider.connect_server import main

    assert main(["status", "--dir", gpu_server["dir"]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"running at {gpu_server['url']}") and "GPUs 0, 1 on local-cluster[1,4,2048]" in out
    assert gpu_spark.conf.get("spark.executor.resource.gpu.amount") == "2"


def _recording_udf(log_dir: str, sleep: float = SLEEP, **resources):
    @gp.udf(data_type=pa.int64(), name="gpu_double", **resources)
    def gpu_double(x: int) -> int:
        start = time.time()
        gpus = gp.task_gpus()
        time.sleep(sleep)
        record = {"pid": os.getpid(), "gpus": gpus, "start": start, "end": time.time(), "x": x}
        Path(log_dir, uuid.uuid4().hex).write_text(json.dumps(record))
        return x * 2

    return gpu_double


def _calls(log_dir: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in Path(log_dir).iterdir()]


def _most_at_once(calls: list[dict]) -> int:
    """The largest number of calls running at one instant."""
    edges = sorted([(c["start"], 1) for c in calls] + [(c["end"], -1) for c in calls])
    running = most = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        running += step
        most = max(most, running)
    return most


def _backfill(db, name: str, fn, spark) -> tuple[gp.Table, gp.BackfillResult]:
    tbl = db.create_table(name, events_table(ROWS))
    tbl.add_columns({"y": fn})
    return tbl, tbl.backfill("y", spark=spark, task_size=1, concurrency=ROWS, progress=False)


def _values(tbl) -> list[tuple[int, int]]:
    t = tbl.dataset().to_table(columns=["x", "y"])
    return sorted(zip(t.column("x").to_pylist(), t.column("y").to_pylist(), strict=True))


def _logged_most_at_once(caplog) -> list[int]:
    """The "at most N tasks ran at once" figures the apply stage logged."""
    import re

    return [int(n) for n in re.findall(r"resource profile [^:]*: at most (\d+) tasks ran at once", caplog.text)]


def test_one_gpu_per_task_runs_as_many_tasks_at_once_as_there_are_gpus(db, gpu_spark, tmp_path, caplog):
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    tbl, result = _backfill(db, "one_gpu", _recording_udf(str(log_dir), num_gpus=1), gpu_spark)

    calls = _calls(str(log_dir))
    assert result.rows_computed == ROWS and len(calls) == ROWS
    assert _values(tbl) == [(x, 2 * x) for x in range(ROWS)]
    assert all(len(c["gpus"]) == 1 and c["gpus"][0] in ("0", "1") for c in calls), calls
    assert _most_at_once(calls) <= 2
    for a in calls:  # calls running at the same time never share a GPU
        for b in calls:
            if a is not b and a["start"] < b["end"] and b["start"] < a["end"]:
                assert a["gpus"] != b["gpus"], (a, b)
    assert {c["gpus"][0] for c in calls} == {"0", "1"}
    # The apply stage logs its profile and the most tasks that ran at once (from the partitions' own times).
    assert "resource profile 1 cpus, 1 gpu per task" in caplog.text
    logged = _logged_most_at_once(caplog)
    assert logged and all(1 <= n <= 2 for n in logged), caplog.text
    assert _most_at_once(calls) <= logged[-1]  # a partition's span holds its calls


def test_the_same_udf_without_gpus_runs_on_every_core(db, gpu_spark, tmp_path, caplog):
    """The control: on the same 4-core executor, a UDF that asks for nothing runs more than 2 calls at once.

    Its calls sleep longer than the others' (2 s): on a loaded 2-core machine the executor's Python workers
    start staggered by up to a second, which 0.5 s calls would not overlap."""
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    tbl, _ = _backfill(db, "no_gpu", _recording_udf(str(log_dir), sleep=4 * SLEEP), gpu_spark)

    calls = _calls(str(log_dir))
    assert _values(tbl) == [(x, 2 * x) for x in range(ROWS)]
    assert all(c["gpus"] == [] for c in calls)
    assert _most_at_once(calls) > 2
    assert _logged_most_at_once(caplog) == []  # no profile, nothing said about one


def test_half_a_gpu_per_task_shares_each_gpu_between_two_tasks(db, gpu_spark, tmp_path, caplog):
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    tbl, _ = _backfill(db, "half_gpu", _recording_udf(str(log_dir), num_gpus=0.5), gpu_spark)

    calls = _calls(str(log_dir))
    assert _values(tbl) == [(x, 2 * x) for x in range(ROWS)]
    assert all(len(c["gpus"]) == 1 for c in calls)
    assert 2 < _most_at_once(calls) <= 4
    assert all(n <= 4 for n in _logged_most_at_once(caplog)) and _logged_most_at_once(caplog)
    for address in ("0", "1"):
        assert _most_at_once([c for c in calls if c["gpus"] == [address]]) <= 2


def test_executor_cores_that_run_fewer_tasks_than_shared_gpus_hold_are_warned_about(db, gpu_spark, tmp_path, caplog):
    """``num_gpus=0.5`` on 2 GPUs would run 4 tasks at once, but with ``num_cpus=2`` the 4-core executor holds 2:
    Spark runs 2 (it says so only in the server's JVM log), and the package warns, naming the UDF and the fix."""
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    with pytest.warns(UserWarning, match=r"UDF 'gpu_double' \(column 'y'\) asks for num_cpus=2, num_gpus=0.5 per "
                      r"task: each executor's 2 GPUs could run 4 tasks at once, but its 4 cores "
                      r"\(spark.executor.cores\) run only 2 .*give executors at least 8 cores for 4 tasks at once"):
        tbl, _ = _backfill(db, "half_gpu_two_cores", _recording_udf(str(log_dir), num_gpus=0.5, num_cpus=2),
                           gpu_spark)

    calls = _calls(str(log_dir))
    assert _values(tbl) == [(x, 2 * x) for x in range(ROWS)]
    assert all(len(c["gpus"]) == 1 for c in calls)
    assert _most_at_once(calls) <= 2  # what the warning said
    assert any("could run 4 tasks at once" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_a_stateful_gpu_udf_is_built_per_device_and_never_called_on_another(db, gpu_spark, tmp_path):
    log_dir = str(tmp_path)

    @gp.udf(data_type=pa.int64(), num_gpus=1, concurrency=2)
    class OnDevice:
        def __init__(self) -> None:
            self.device = gp.task_device()  # where a model would be loaded: model.to(self.device)

        def __call__(self, x: int) -> int:
            record = {"instance": id(self), "pid": os.getpid(), "built_on": self.device, "called_on": gp.task_device()}
            Path(log_dir, uuid.uuid4().hex).write_text(json.dumps(record))
            time.sleep(0.05)
            return x + 1

    tbl = db.create_table("stateful", events_table(4 * ROWS))
    tbl.add_columns({"y": OnDevice})
    tbl.backfill("y", spark=gpu_spark, task_size=2, concurrency=2 * ROWS, progress=False)

    calls = [json.loads(p.read_text()) for p in Path(log_dir).iterdir() if p.is_file()]
    assert len(calls) == 4 * ROWS
    assert all(c["built_on"] in ("cuda:0", "cuda:1") for c in calls), calls
    assert all(c["called_on"] == c["built_on"] for c in calls), calls  # in the UDF's threads too
    t = tbl.dataset().to_table(columns=["x", "y"])
    assert t.column("y").to_pylist() == [x + 1 for x in t.column("x").to_pylist()]


def _fails_fast(db, name: str, spark, match: str, **resources) -> None:
    @gp.udf(data_type=pa.int64(), name="embed", **resources)
    def embed(x: int) -> int:
        return x

    tbl = db.create_table(name, events_table(ROWS))
    tbl.add_columns({"y": embed})
    version = tbl.version
    t0 = time.perf_counter()
    with pytest.raises(gp.ResourceUnavailableError, match=match) as caught:
        tbl.backfill("y", spark=spark, progress=False)
    assert time.perf_counter() - t0 < 15
    assert "UDF 'embed'" in str(caught.value) and "column 'y'" in str(caught.value)
    assert isinstance(caught.value, gp.SparkEnvironmentError)
    assert tbl.version == version
    tbl.dataset().validate()
    assert tbl.dataset().to_table(columns=["y"]).column("y").null_count == ROWS


def test_a_gpu_udf_on_a_plain_local_master_fails_before_any_work(db, spark):
    _fails_fast(db, "on_local", spark, r"num_gpus=1 .*master is 'local\[2\]'.*local_session\(gpus=N\)", num_gpus=1)


def test_local_session_refuses_gpus_a_running_session_lacks_and_warns_of_another_master(spark, caplog):
    """A process runs one SparkContext: ``local_session(gpus=1)`` while the suite's ``local[2]`` session runs
    would return that session, on which ``@udf(num_gpus=1)`` columns then fail; another master is warned about."""
    import warnings

    with pytest.raises(gp.SparkEnvironmentError, match=r"master 'local\[2\]'.*master 'local\[2\]' with gpus=1"
                       r".*spark\.stop\(\)"):
        gp.local_session("local[2]", gpus=1)
    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == "local[2]" and conf.get("spark.executor.resource.gpu.amount") is None
    assert spark.range(10).count() == 10  # the running session was left as it was

    with pytest.warns(UserWarning, match=r"that one \(master 'local\[2\]'\) is returned, not a new one with "
                      r"master 'local\[1\]'.*spark\.stop\(\)"):
        assert gp.local_session("local[1]", app_name="geneva-tests") is spark
    assert any("not a new one with master 'local[1]'" in r.getMessage() for r in caplog.records
               if r.levelname == "WARNING")

    caplog.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same master again: the running session, silently
        assert gp.local_session("local[2]", app_name="geneva-tests") is spark
    assert not [r for r in caplog.records if r.levelname == "WARNING" and "local_session" in r.getMessage()]
    assert spark.range(10).count() == 10


def test_more_gpus_than_an_executor_has_fails_before_any_work(db, gpu_spark):
    _fails_fast(db, "too_many", gpu_spark, r"num_gpus=4 .*executors have 2 GPUs", num_gpus=4)


def test_more_memory_than_an_executor_has_fails_before_any_work(db, gpu_spark):
    _fails_fast(db, "too_big", gpu_spark, r"memory=8g .*spark.executor.memory", memory="8g")


def test_a_view_refresh_runs_its_gpu_udf_column_one_task_per_gpu(db, gpu_spark, tmp_path):
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    src = db.create_table("src", events_table(ROWS))
    q = src.search(None).select({"x": "x", "y": _recording_udf(str(log_dir), num_gpus=1)})
    view = db.create_materialized_view("gpu_view", q)
    view.refresh(spark=gpu_spark, task_size=1, concurrency=ROWS)

    calls = _calls(str(log_dir))
    assert len(calls) == ROWS and all(len(c["gpus"]) == 1 for c in calls)
    assert _most_at_once(calls) <= 2
    assert _values(view) == [(x, 2 * x) for x in range(ROWS)]


def test_a_gpu_chunker_view_runs_one_task_per_gpu(db, gpu_spark, tmp_path):
    log_dir = str(tmp_path / "calls")
    os.mkdir(log_dir)

    @gp.chunker(output_schema={"y": int}, num_gpus=1)
    def gpu_split(x: int):
        start = time.time()
        gpus = gp.task_gpus()
        time.sleep(SLEEP)
        record = {"pid": os.getpid(), "gpus": gpus, "start": start, "end": time.time(), "x": x}
        Path(log_dir, uuid.uuid4().hex).write_text(json.dumps(record))
        yield from ({"y": x * 10 + k} for k in range(x % 3))

    src = db.create_table("src", events_table(ROWS))
    view = db.create_udtf_view("gpu_chunks", src.search(None).select(["x"]), udtf=gpu_split)
    view.refresh(spark=gpu_spark, checkpoint_size=1)

    calls = _calls(log_dir)
    assert len(calls) == ROWS and all(len(c["gpus"]) == 1 for c in calls)
    assert _most_at_once(calls) <= 2
    for a in calls:  # chunker calls running at the same time never share a GPU
        for b in calls:
            if a is not b and a["start"] < b["end"] and b["start"] < a["end"]:
                assert a["gpus"] != b["gpus"], (a, b)
    got = sorted(view.to_arrow(["x", "y"]).to_pylist(), key=lambda r: r["y"])
    assert got == [{"x": x, "y": x * 10 + k} for x in range(ROWS) for k in range(x % 3)]


_CLASSIC_GPU_SESSION = """
import json, os, sys, time
import pyarrow as pa
import geneva_provider as gp

LOG_DIR = sys.argv[2]  # read here: the UDF runs in Spark's workers, whose argv is not this script's


@gp.udf(data_type=pa.int64(), num_gpus=1)
def on_gpu(x: int) -> int:
    start = time.time()
    time.sleep(0.4)
    print(json.dumps({"gpus": gp.task_gpus(), "start": start, "end": time.time()}), file=open(
        os.path.join(LOG_DIR, str(x)), "w"))
    return x * 2

spark = gp.local_session("local[4]", gpus=2)  # the package-level switch
db = gp.connect(sys.argv[1])
tbl = db.create_table("t", pa.table({"x": pa.array(range(8), pa.int64())}))
tbl.add_columns({"y": on_gpu})
tbl.backfill("y", spark=spark, task_size=1, concurrency=8, progress=False)
spark.stop()
print(sorted(tbl.dataset().to_table().column("y").to_pylist()))
"""


def test_local_session_with_gpus_schedules_gpu_udfs_on_a_classic_session(tmp_path):
    """``local_session(gpus=2)`` (its own process: one SparkContext per process) runs the classic path's profile."""
    import subprocess
    import sys

    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    env = {**os.environ, "GENEVA_FAKE_GPUS": "0,1", **every_jvm()}  # the local-cluster's executor maps the archive too
    done = subprocess.run([sys.executable, "-c", _CLASSIC_GPU_SESSION, str(tmp_path / "db"), str(log_dir)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == str([2 * x for x in range(8)])
    calls = _calls(str(log_dir))
    assert len(calls) == 8 and all(len(c["gpus"]) == 1 for c in calls)
    assert _most_at_once(calls) <= 2


_CLASSIC_HALF_GPU_SESSION = """
import json, os, sys, time, uuid
import pyarrow as pa
import pyarrow.compute as pc
import geneva_provider as gp

LOG_DIR = sys.argv[2]


@gp.udf(data_type=pa.int64(), input_columns=["x"], num_gpus=0.5)
def half_gpu(x: pa.Array) -> pa.Array:
    start = time.time()
    time.sleep(1.0)  # per batch of 500 rows: 2 s per task, so that 4 tasks overlap despite staggered worker starts
    record = {"pid": os.getpid(), "gpus": gp.task_gpus(), "start": start, "end": time.time(), "rows": len(x)}
    with open(os.path.join(LOG_DIR, uuid.uuid4().hex), "w") as out:
        json.dump(record, out)
    return pc.multiply(x, 2)

spark = gp.local_session("local[4]", gpus=2)  # local-cluster[1,4,...]: one 4-core executor with 2 GPUs
db = gp.connect(sys.argv[1])
tbl = db.create_table("t", pa.table({"x": pa.array(range(8000), pa.int64())}))
tbl.add_columns({"y": half_gpu})
tbl.backfill("y", spark=spark, task_size=1000, checkpoint_size=500, concurrency=8, progress=False)
spark.stop()
y = tbl.dataset().to_table(columns=["x", "y"])
print(y.column("y").to_pylist() == [2 * x for x in y.column("x").to_pylist()])
"""


def test_half_a_gpu_per_task_runs_four_tasks_on_two_gpus_two_per_device_on_a_classic_session(tmp_path):
    """``@udf(num_gpus=0.5)`` with 2 GPUs and a 4-core executor: 8 tasks of 1,000 rows (2 batches each), up to 4
    running at once and never more, each told its GPU, no GPU serving more than 2 at once (its own process: one
    SparkContext per process)."""
    import subprocess
    import sys

    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    env = {**os.environ, "GENEVA_FAKE_GPUS": "0,1", **every_jvm()}
    done = subprocess.run([sys.executable, "-c", _CLASSIC_HALF_GPU_SESSION, str(tmp_path / "db"), str(log_dir)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
    assert "could run 4 tasks at once" not in done.stderr  # the cores hold the 4 tasks: no warning
    calls = _calls(str(log_dir))
    assert len(calls) == 16 and all(c["rows"] == 500 for c in calls)
    assert all(len(c["gpus"]) == 1 and c["gpus"][0] in ("0", "1") for c in calls), calls
    assert _most_at_once(calls) == 4, sorted((c["start"], c["end"], c["gpus"]) for c in calls)
    for address in ("0", "1"):
        assert _most_at_once([c for c in calls if c["gpus"] == [address]]) == 2
