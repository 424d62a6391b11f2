"""The DAGs over Spark Connect: the same operators, with the Spark connection switched to ``spark_connect``.

The stages run in the Airflow task as clients of a long-lived local Spark Connect server: no
spark-submit, no JVM started per task.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.airflow.test_example_dags import run, words_of
from tests.conftest import FAKE_SECRET
from tests.helpers import clear_calls, counting_double, events_table, read_calls
from tests.system.test_resume_kill import _checkpointed_rows, run_and_kill_after_checkpoints

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def over_connect(spark_default):
    """``spark_default`` is a ``spark_connect`` connection to the session's server (tests/airflow/conftest.py)."""
    return spark_default


def _task_logs(capfd, caplog) -> str:
    """What the tasks logged since the last call: printed task logs and records pytest captured."""
    out, err = capfd.readouterr()
    text = out + err + caplog.text
    caplog.clear()
    return text


@pytest.mark.slow
def test_backfill_dag_over_spark_connect(dagbag, lance_db, over_connect, connect_server, capfd, caplog):
    ingest, backfill = dagbag.get_dag("geneva_ingest_events"), dagbag.get_dag("geneva_backfill_after_ingest")
    assert run(ingest, run_conf={"rows": 8_000})[0].state == "success"

    dr, states, tis, first_s = run(backfill)
    assert dr.state == "success", states
    applied = tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")
    assert applied["rows_computed"] == 8_000
    tbl = lance_db.open_table("events")
    got = tbl.to_arrow(["text", "words"]).to_pydict()
    assert got["words"] == [words_of(t) for t in got["text"]] and len(got["words"]) == 8_000
    logs = _task_logs(capfd, caplog)
    assert "over Spark Connect (connection 'spark_default')" in logs and "Spark Connect session on" in logs
    assert "Reusing the job's Spark Connect session" in logs  # write+commit found apply's warm session
    assert "Spark-Submit cmd" not in logs and FAKE_SECRET not in logs  # no spark-submit, no secret in a log

    dr, states, _, noop_s = run(backfill)  # nothing new: the Spark tasks are skipped, no session opened
    assert dr.state == "success" and states["backfill_words.apply"] == "skipped", states
    assert "Spark Connect session on" not in _task_logs(capfd, caplog)

    assert run(ingest, run_conf={"rows": 2_000})[0].state == "success"
    dr, states, tis, _ = run(backfill)
    assert dr.state == "success", states
    assert tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")["rows_computed"] == 2_000
    got = tbl.to_arrow(["text", "words"]).to_pydict()
    assert got["words"] == [words_of(t) for t in got["text"]] and len(got["words"]) == 10_000
    tbl.dataset().validate()
    # The server logs the plans it runs, pickled task functions included: the storage options
    # reached the executors as a session artifact, so their values are in no log line there.
    server_log = connect_server.log_path.read_text(errors="replace")
    assert "geneva-options-" in server_log and FAKE_SECRET not in server_log
    with capfd.disabled():
        print(f"\nbackfill DAG over Spark Connect: first run {first_s:.1f}s, no-op run {noop_s:.1f}s")


@pytest.mark.slow
def test_view_refresh_dags_over_spark_connect(dagbag, lance_db, over_connect, capfd, caplog):
    from geneva_provider.examples import sample

    src = lance_db.create_table("events", sample(6_000), max_rows_per_file=2_000)
    dr, states, tis, _ = run(dagbag.get_dag("geneva_hourly_view_refresh"))
    assert dr.state == "success", states
    view = lance_db.open_table("events_even")
    got = view.to_arrow(["id", "text", "n_words"]).to_pydict()
    assert sorted(got["id"]) == list(range(0, 6_000, 2))
    assert got["n_words"] == [len(t.split()) for t in got["text"]]

    src.add(sample(1_000, start=6_000))
    dr, states, tis, _ = run(dagbag.get_dag("geneva_hourly_view_refresh"))
    assert dr.state == "success", states
    assert tis["refresh.apply"].xcom_pull(task_ids="refresh.apply")["rows_computed"] == 500
    dr, states, _, _ = run(dagbag.get_dag("geneva_chained_view_refresh"))
    assert dr.state == "success", states
    child = lance_db.open_table("events_even_short").to_arrow(["id", "n_words"]).to_pydict()
    want = [r["id"] for r in view.to_arrow(["id", "n_words"]).to_pylist() if r["n_words"] <= 2]
    assert sorted(child["id"]) == sorted(want)
    view.dataset().validate()
    logs = _task_logs(capfd, caplog)
    assert "over Spark Connect" in logs and "Spark-Submit cmd" not in logs


@pytest.mark.slow
def test_apply_killed_over_spark_connect_resumes_from_its_checkpoints(lance_db, over_connect, call_dir, capfd,
                                                                      caplog):
    """The Airflow worker running apply in the task (``durable=False``) over Connect is SIGKILLed mid-stage;
    its retry (same plan) stops the dead attempt's query on the server and computes only what no checkpoint
    holds."""
    from geneva_provider.operators.backfill import GenevaVerifyOperator
    from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator

    rows, checkpoint = 20_000, 500
    tbl = lance_db.create_table("slow", events_table(rows), max_rows_per_file=rows // 2)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.001)})
    v = tbl.version
    # Plan, then apply, in a process of its own, as an Airflow worker runs the tasks.
    script = textwrap.dedent(f"""
        import json
        from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
        from geneva_provider.operators.spark import GenevaSparkApplyOperator
        plan = GenevaPlanBackfillOperator(task_id="plan", table="slow", column="y",
                                          checkpoint_size={checkpoint}).execute({{}})
        print(json.dumps(plan), flush=True)
        GenevaSparkApplyOperator(task_id="apply", plan=plan, durable=False).execute({{}})  # in the task process
        print("FINISHED", flush=True)
    """)
    env = {**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": over_connect}
    store = tbl.checkpoint_store
    out = run_and_kill_after_checkpoints(script, store, 6, env)
    plan = json.loads(next(line for line in out if line.startswith('{"job_id"')))
    assert tbl.version == v and tbl.count_rows("y IS NOT NULL") == 0  # nothing committed
    checkpointed = _checkpointed_rows(store, rows // 2)
    assert 3_000 <= len(checkpointed) < rows
    clear_calls(call_dir)
    _task_logs(capfd, caplog)

    # The retry: the same plan, in this process.
    applied = GenevaSparkApplyOperator(task_id="apply", plan=plan, durable=False).execute({})
    rerun = read_calls(call_dir)
    logs = _task_logs(capfd, caplog)
    assert "Stopped the Spark work an earlier attempt of this apply stage left running" in logs
    assert not set(rerun) & checkpointed  # no row checkpointed before the kill was computed again
    assert applied["rows_computed"] <= rows - len(checkpointed)
    assert "stopped 1 Spark Connect operations left running by an earlier attempt" in logs  # the server's count
    time.sleep(3)
    assert len(read_calls(call_dir)) == len(rerun)  # nothing is still computing on the server
    GenevaSparkWriteCommitOperator(task_id="write_commit", plan=plan).execute({})
    GenevaVerifyOperator(task_id="verify", plan=plan).execute({})
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and len(got["x"]) == rows
    tbl.dataset().validate()


def test_a_server_whose_workers_cannot_run_the_stages_fails_before_any_work(tmp_path, lance_db, dagbag,
                                                                             monkeypatch, capfd, caplog):
    """Workers on an interpreter without pyarrow/pylance: the task fails once, naming what is missing."""
    from geneva_provider.connect_server import LocalConnectServer

    python = "/usr/bin/python3.11"
    assert subprocess.run([python, "-c", "import pyarrow"], capture_output=True).returncode != 0
    tbl = lance_db.create_table("slow", events_table(1_000), max_rows_per_file=500)
    tbl.add_columns({"y": counting_double(str(tmp_path))})
    with LocalConnectServer(0, master="local[1]", directory=tmp_path / "server",
                            conf={"spark.pyspark.python": python}) as server:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
            {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": server.port}))
        dr, states, tis, _ = run(dagbag.get_dag("geneva_test_slow"))
    assert dr.state == "failed" and states["backfill_y.apply"] == "failed", states
    assert tis["backfill_y.apply"].try_number == 1
    logs = _task_logs(capfd, caplog)
    line = next((x for x in logs.splitlines() if "SparkEnvironmentError: " in x and "the apply stage of plan" in x),
                logs[-3000:])
    assert "the apply stage of plan" in line and "pyarrow" in line, line
    assert "its Python workers cannot run the stages: ModuleNotFoundError" in line, line
    assert tbl.count_rows("y IS NOT NULL") == 0 and read_calls(tmp_path) == []


def test_an_unreachable_server_fails_the_task_soon_and_retryably_without_its_token(lance_db, monkeypatch):
    """No server on the port: the apply task fails in seconds (not pyspark's 10 minutes of back-off), as an
    error Airflow retries (the server may be restarting), and the connection's token is in no message."""
    import socket

    import geneva_provider as gp
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
    from geneva_provider.operators.spark import GenevaSparkApplyOperator

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": port, "password": "TOKEN-5be1c0de"}))
    tbl = lance_db.create_table("slow", events_table(100))
    tbl.add_columns({"y": counting_double(str(lance_db.uri))})
    plan = GenevaPlanBackfillOperator(task_id="plan", table="slow", column="y").execute({})
    with pytest.raises(gp.SparkEnvironmentError) as err:
        GenevaSparkApplyOperator(task_id="apply", plan=plan).execute({})
    from airflow.sdk.exceptions import AirflowFailException

    assert err.value.retryable and not isinstance(err.value, AirflowFailException)
    message = str(err.value)
    assert f"cannot open a Spark Connect session on sc://127.0.0.1:{port}" in message and "refused" in message
    assert "TOKEN-5be1c0de" not in message and "token" not in message
    assert tbl.count_rows("y IS NOT NULL") == 0


def test_a_udf_bug_fails_its_task_once_over_spark_connect(dagbag, lance_db, over_connect, capfd, caplog):
    lance_db.create_table("buggy", events_table(1_000), max_rows_per_file=500)
    dr, states, tis, _ = run(dagbag.get_dag("geneva_test_udf_bug"))
    assert dr.state == "failed" and states["backfill_y.apply"] == "failed", states
    assert tis["backfill_y.apply"].try_number == 1  # retries=2, yet not retried: a retry cannot fix a bug
    logs = _task_logs(capfd, caplog)
    line = next(x for x in logs.splitlines() if "UDFExecutionError: the apply stage" in x)
    assert re.search(r"the apply stage of plan \S+ failed: UDFExecutionError: UDF 'broken_double' failed computing "
                     r"column 'y' of table 'buggy'.*x=7", line), line
    assert "over Spark Connect" in logs
    assert lance_db.open_table("buggy").count_rows("y IS NOT NULL") == 0


@pytest.mark.slow
def test_a_stage_past_its_execution_timeout_stops_its_spark_work(dagbag, lance_db, over_connect, call_dir):
    """execution_timeout bounds a stage: the task fails at 6 s and the server stops computing for it."""
    rows = 20_000
    tbl = lance_db.create_table("slow", events_table(rows), max_rows_per_file=rows // 2)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.001)})
    started = time.monotonic()
    dr, states, _, _ = run(dagbag.get_dag("geneva_test_timeout"))
    assert dr.state == "failed" and states["backfill_y.apply"] == "failed", states
    assert time.monotonic() - started < 60
    time.sleep(3)  # the interrupted tasks' Python workers are stopped within Spark's kill timeout (2 s)
    done = len(read_calls(call_dir))
    time.sleep(3)
    assert len(read_calls(call_dir)) == done < rows  # nothing computes any more
    assert tbl.count_rows("y IS NOT NULL") == 0



def test_a_task_killed_while_its_connect_session_opens_runs_nothing_on_the_server(lance_db, over_connect, call_dir,
                                                                                   capfd, caplog):
    """``on_kill`` (a timeout, a task marked failed) while the stage's session is still opening: the stage never
    starts -- it used to run to its end in the background after its task had failed, as nothing was there yet to
    interrupt -- and the task fails saying so."""
    import threading

    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator
    from geneva_provider.operators.spark import GenevaSparkApplyOperator

    tbl = lance_db.create_table("slow", events_table(2_000))
    tbl.add_columns({"y": counting_double(call_dir)})
    plan = GenevaPlanBackfillOperator(task_id="plan", table="slow", column="y").execute({})
    apply = GenevaSparkApplyOperator(task_id="apply", plan=plan, durable=False)  # the stage in the task process
    outcome: dict = {}

    def run_task() -> None:
        try:
            apply.execute({})
        except Exception as exc:  # noqa: BLE001 - inspected below
            outcome["error"] = exc

    task = threading.Thread(target=run_task, daemon=True)
    task.start()
    deadline, logs = time.monotonic() + 60, ""
    while "Running the apply stage" not in logs:  # submitted: its session is opening (a Spark job's worth)
        assert time.monotonic() < deadline and task.is_alive(), logs[-2000:]
        time.sleep(0.01)
        logs += _task_logs(capfd, caplog)
    apply.on_kill()
    task.join(30)
    assert not task.is_alive()
    assert "its task was killed" in str(outcome.get("error")), repr(outcome.get("error"))
    time.sleep(2)
    assert read_calls(call_dir) == []  # no task of the stage ran, then or since
    assert tbl.count_rows("y IS NOT NULL") == 0


@pytest.mark.slow
def test_maintenance_dag_compacts_over_spark_connect(dagbag, lance_db, over_connect, call_dir, spark, capfd, caplog):
    """The compaction operator runs its rewrite tasks over Connect too; nothing is recomputed after it."""
    from geneva_provider.examples import sample

    tbl = lance_db.create_table("events", sample(6_000), max_rows_per_file=500)
    tbl.add_columns({"y": counting_double(call_dir)})
    tbl.backfill("y", spark=spark)
    before = tbl.to_arrow(["id", "y"]).sort_by("id")
    clear_calls(call_dir)
    dr, states, tis, _ = run(dagbag.get_dag("geneva_maintenance"), run_conf={"target_rows_per_fragment": 3_000})
    assert dr.state == "success", states
    compacted = tis["compaction.compact"].xcom_pull(task_ids="compaction.compact")
    assert compacted["status"] == "success" and compacted["fragments_removed"] == 12
    assert len(tbl.dataset().get_fragments()) == 2 and tbl.to_arrow(["id", "y"]).sort_by("id").equals(before)
    assert "Running the compact stage of plan" in _task_logs(capfd, caplog)
    assert tbl.backfill("y", spark=spark).rows_computed == 0 and read_calls(call_dir) == []
    tbl.dataset().validate()
