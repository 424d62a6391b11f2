"""The Airflow Spark operators on a real (loopback) Spark standalone cluster: master + 2 workers.

The Spark connection points at the standalone master, so ``spark-submit`` runs the driver in this
machine's client mode and every Spark task runs in an executor JVM that a worker launched.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

import geneva_provider as gp
from geneva_provider.stages import plan_backfill, verify
from tests.class_archive import short_lived
from tests.helpers import counting_double, events_table, read_calls
from tests.standalone_spark import EXECUTOR_CLASS, StandaloneSpark

ROWS = 20_000
FRAGMENTS = 4


@pytest.fixture(autouse=True)
def _short_lived_drivers(monkeypatch):
    """Each stage's spark-submit driver is a short-lived JVM (the cluster's daemons and executors are not)."""
    short_lived(monkeypatch)


@pytest.fixture(scope="module")
def standalone_spark(tmp_path_factory):
    with StandaloneSpark(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=1, memory="1g") as cluster:
        yield cluster


def find_app_id(cluster: StandaloneSpark, name: str) -> str:
    """The id of the one application named ``name``, from the master's log ("Registered app NAME with ID ...")."""
    text = cluster.master_log.read_text(errors="replace")
    found = [i for app, i in re.findall(r"Registered app (\S+) with ID (app-\S+)", text) if app == name]
    assert len(found) == 1, (name, found, text[-3000:])
    return found[0]


def finished_tasks(cluster: StandaloneSpark, app_id: str) -> dict[str, int]:
    """Worker -> number of tasks its executors of ``app_id`` finished, from the executors' stderr."""
    out = {}
    for i in range(1, cluster.n_workers + 1):
        logs = list((cluster.worker_dir(i) / app_id).glob("*/stderr"))
        out[f"worker{i}"] = sum(len(re.findall(r"Finished task \S+ in stage", p.read_text(errors="replace")))
                                for p in logs)
    return out


def assert_executor_on_every_worker(cluster: StandaloneSpark, app_id: str) -> None:
    """``app_id`` got an executor on every worker (SPARK_WORKER_DIR/<app id>/<executor id>/stderr)."""
    for i in range(1, cluster.n_workers + 1):
        assert list((cluster.worker_dir(i) / app_id).glob("*/stderr")), (app_id, i)


@pytest.mark.slow
def test_operators_run_the_backfill_on_a_standalone_cluster(standalone_spark, tmp_path, monkeypatch):
    from geneva_provider.operators.spark import GenevaSparkApplyOperator
    from geneva_provider.stages import InProcessRunner, run_write_commit

    cluster = standalone_spark
    db_dir = tmp_path / "db"
    call_dir = tmp_path / "calls"
    call_dir.mkdir()
    tbl = gp.connect(str(db_dir)).create_table("events", events_table(ROWS), max_rows_per_file=ROWS // FRAGMENTS)
    assert len(tbl.dataset().get_fragments()) == FRAGMENTS
    tbl.add_columns({"y": counting_double(str(call_dir))})
    summary = plan_backfill(tbl.ref, "y")
    assert summary.rows_to_compute == ROWS and summary.tasks >= 2

    host, _, port = cluster.master_url.rpartition(":")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": host, "port": int(port), "extra": {"deploy-mode": "client"}}))
    monkeypatch.setenv("AIRFLOW_CONN_LANCE_DEFAULT", json.dumps({"conn_type": "lance", "host": str(db_dir)}))
    conf = {
        "spark.executor.cores": "1", "spark.executor.memory": "1g", "spark.cores.max": "2",
        "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.ui.showConsoleProgress": "false",
        # Start the job only once both executors have registered, so both take tasks (the default
        # ratio 0 lets the first executor to come up run everything).
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    }
    env_vars = {"SPARK_LOCAL_IP": "127.0.0.1"}

    t0 = time.monotonic()
    # The watcher samples (every 0.1 s) the process trees below the master, each worker and this
    # process, with every TCP port they listen on, while the Spark application runs.
    with cluster.watch(pytest=os.getpid()) as watcher:
        # ship_package: the package travels to the executors as a --py-files zip, as on a
        # cluster whose Python lacks it.
        applied = GenevaSparkApplyOperator(task_id="apply", plan=summary, conf=conf, env_vars=env_vars,
                                           ship_package=True).execute(context={})
    seconds = time.monotonic() - t0
    # The cluster's checkpoints are committed here, by the same stage (the write+commit operator on the cluster
    # is the example DAG's, in the test below).
    written = run_write_commit(summary.plan_uri, InProcessRunner())

    # -- the data -------------------------------------------------------------------------------
    assert applied["status"] == "success" and applied["rows_computed"] == ROWS, applied
    assert written.fragments_committed == FRAGMENTS, written
    assert verify(summary.plan_uri).rows_verified == ROWS
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert len(got["x"]) == ROWS and got["y"] == [2 * x for x in got["x"]]
    tbl.dataset().validate()
    assert sorted(read_calls(call_dir)) == list(range(ROWS))  # every row computed exactly once

    # -- the work ran on the cluster's executors ------------------------------------------------
    # Proof 1 (from the processes themselves): the UDF appends to <pid>.log in call_dir, so the
    # file names are the PIDs of the Python processes that ran it.  Every one of them was seen by
    # the watcher below a worker JVM, with a CoarseGrainedExecutorBackend JVM (an executor the
    # worker launched) among its ancestors -- and none below this process outside the cluster,
    # i.e. none in the spark-submit driver.  Both workers' executors ran UDF calls.
    labels = {f"worker{i}" for i in range(1, cluster.n_workers + 1)}
    call_pids = {int(p.stem) for p in call_dir.glob("*.log")}
    executors_used = {}
    for pid in call_pids:
        keys = [k for k in watcher.seen if k[0] == pid]
        assert keys, f"UDF process {pid} was never seen below the cluster or this process"
        assert all(watcher.under[k] in labels for k in keys), (pid, [watcher.under[k] for k in keys])
        chain = watcher.ancestors(pid)
        executor = next((p for p in chain if EXECUTOR_CLASS in p.cmdline), None)
        assert executor is not None, f"UDF process {pid} has no executor JVM above it: {chain}"
        assert executor.ppid in {cluster.pids[w] for w in labels}, executor
        executors_used[executor.pid] = watcher.under[(executor.pid, executor.start)]
    assert set(executors_used.values()) == labels, executors_used

    # Proof 2 (from Spark's own logs, which outlive the processes): the application got an
    # executor on every worker (SPARK_WORKER_DIR/<app id>/<executor id>/stderr), and its executors
    # finished exactly one Spark task per planned task, on both workers.
    apply_id = find_app_id(cluster, "geneva-apply-events-y")
    assert_executor_on_every_worker(cluster, apply_id)
    per_worker = finished_tasks(cluster, apply_id)
    assert sum(per_worker.values()) == summary.tasks and all(per_worker.values()), per_worker

    # -- loopback only --------------------------------------------------------------------------
    # Every port listened on by the master, the workers, the executors and their Python daemons,
    # and the spark-submit driver during both runs was bound to 127.0.0.1 (and REST 6066 was off).
    assert watcher.samples > 10
    listeners = sorted(watcher.listeners)
    assert any(EXECUTOR_CLASS in cmd for _, cmd, _, _ in listeners), listeners
    assert any("SparkSubmit" in cmd for _, cmd, _, _ in listeners), listeners
    assert [entry for entry in listeners if entry[2] != "127.0.0.1"] == [], listeners
    assert 6066 not in {port for _, _, _, port in listeners}

    print(f"\ncluster start {cluster.startup_seconds:.1f}s, apply {seconds:.1f}s, "
          f"{len(call_pids)} UDF processes in {len(executors_used)} executors, "
          f"{len({(a, p) for _, _, a, p in listeners})} loopback listeners")



@pytest.mark.slow
def test_example_dag_runs_on_the_cluster_by_changing_only_the_connection(standalone_spark, dagbag, lance_db,
                                                                         monkeypatch):
    from geneva_provider.examples import sample

    cluster = standalone_spark
    host, _, port = cluster.master_url.rpartition(":")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": host,
                                                                 "port": int(port)}))
    fragments = 4
    tbl = lance_db.create_table("events", sample(12_000), max_rows_per_file=12_000 // fragments)
    t0 = time.monotonic()
    dr = dagbag.get_dag("geneva_backfill_after_ingest").test()
    seconds = time.monotonic() - t0
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert dr.state == "success", states
    assert states["backfill_words.apply"] == states["backfill_words.write_commit"] == "success"
    got = tbl.to_arrow(["text", "words"]).to_pydict()
    assert len(got["words"]) == 12_000 and got["words"] == [len(t.split()) for t in got["text"]]
    tbl.dataset().validate()
    # Both Spark stages ran as applications of the standalone master, the apply's tasks in its executors.  The
    # write stage has at most 12,000 small values to write from checkpoints (the fragments no apply task wrote
    # whole): its driver writes them, cheaper than a Spark job (pipeline/stages/on_driver.py), so no executor task.
    for stage in ("apply", "write_commit"):
        assert_executor_on_every_worker(cluster, find_app_id(cluster, f"geneva-{stage}-events-words"))
    assert sum(finished_tasks(cluster, find_app_id(cluster, "geneva-apply-events-words")).values()) >= 1
    assert sum(finished_tasks(cluster, find_app_id(cluster, "geneva-write_commit-events-words")).values()) == 0
    print(f"\nexample DAG on the standalone cluster: {seconds:.1f}s")


# A driver of its own (this test process may hold the suite's local session, and a process runs one SparkContext):
# it imports a package that exists only in a temp dir on its own path, never on the executors'.
_CONTEXT_DRIVER = """
import sys
sys.path.insert(0, sys.argv[3])
import json, importlib
import pyarrow as pa
import geneva_provider as gp

mod = importlib.import_module(sys.argv[4])

@gp.udf(data_type=pa.int64())
def scaled(x: int) -> int:
    return mod.scale(x)

db = gp.connect(sys.argv[2])
tbl = db.create_table("t", [{"x": i} for i in range(60)], max_rows_per_file=20)
tbl.add_columns({"y": scaled})
cluster = gp.SparkCluster(sys.argv[1], conf=json.loads(sys.argv[5]))
out = {}
with db.context(cluster) as spark:
    try:
        tbl.backfill("y", progress=False)
    except gp.GenevaError as exc:
        out["without"] = [type(exc).__name__, str(exc)]
    with db.context(spark, manifest=gp.GenevaManifest(py_modules=[sys.argv[4]])):
        out["computed"] = tbl.backfill("y", progress=False).rows_computed
    out["master"] = spark.sparkContext.master
out["stopped"] = spark.sparkContext._jsc is None
out["y"] = tbl.to_arrow(["x", "y"]).sort_by("x").column("y").to_pylist()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_a_context_ships_a_driver_only_module_to_the_standalone_cluster(standalone_spark, tmp_path):
    import subprocess
    import sys

    from tests.helpers import driver_only_package

    cluster = standalone_spark
    name, path = driver_only_package(tmp_path)
    conf = {"spark.executor.cores": "1", "spark.executor.memory": "1g", "spark.cores.max": "2",
            "spark.app.name": "geneva-context-shipped", "spark.ui.showConsoleProgress": "false"}
    done = subprocess.run([sys.executable, "-c", _CONTEXT_DRIVER, cluster.master_url, str(tmp_path / "db"), path,
                           name, json.dumps(conf)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    out = json.loads(lines[0][len("RESULT "):])
    # Without the manifest the executors cannot load the UDF: the package's error names the module.
    assert out["without"][0] == "SparkEnvironmentError", out
    assert f"module '{name}' is not importable" in out["without"][1] and "GenevaManifest" in out["without"][1]
    # With it, every row computed on the cluster, exactly; the context stopped the session it started.
    assert out["master"] == cluster.master_url and out["computed"] == 60 and out["stopped"] is True
    assert out["y"] == [x * 7 + 1 for x in range(60)]
    app_id = find_app_id(cluster, "geneva-context-shipped")
    assert sum(finished_tasks(cluster, app_id).values()) >= 1
