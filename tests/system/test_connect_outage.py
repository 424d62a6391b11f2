"""A Spark Connect server that dies under a running stage, and one that serves many jobs.

The stage fails within its outage bound (not pyspark's ten minutes of back-off), with the
retryable error naming the server, its progress lines say the server is unreachable, and after
the server comes back the task's retry resumes from the checkpoints -- checked with one kill under running
jobs of every entry point at once (each server restart costs seconds).  A long-lived server keeps one warm
session and Python daemon for all its jobs, not one per job.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import clear_calls, counting_double, counting_split, events_table, kill_session, read_calls
from tests.system.test_resume_kill import _checkpointed_rows

# The stages' clients here retry a lost server for 6 s (GENEVA_CONNECT_OUTAGE_SECONDS), not the default ~35 s
# (tests/unit/test_connect_outage_bound.py checks the default policy): what is checked is that the bound, not
# pyspark's ten minutes, decides when a stage fails -- within it and some seconds of progress polling.
OUTAGE_SECONDS = 6
STAGE_FAILS_WITHIN_SECONDS = OUTAGE_SECONDS + 30


@pytest.fixture(autouse=True)
def _short_outage_bound(monkeypatch):
    monkeypatch.setenv("GENEVA_CONNECT_OUTAGE_SECONDS", str(OUTAGE_SECONDS))


@pytest.fixture
def slow_flag(tmp_path) -> Path:
    """While this file exists, the tests' UDFs are slow (so a kill lands mid-stage); a test removes it after the
    kill, so the rerun that resumes is not slow too."""
    flag = tmp_path / "slow"
    flag.touch()
    return flag


def _server(port: int, directory) -> object:
    from geneva_provider.connect_server import LocalConnectServer

    conf = {"spark.connect.execute.manager.detachedTimeout": "2s",
            "spark.connect.execute.manager.maintenanceInterval": "1s"}
    return LocalConnectServer(port, master="local[4]", directory=directory, conf=conf)


def _run_in_thread(operator) -> dict:
    """Runs ``operator.execute`` in a thread, as the Airflow task would; the outcome lands in the dict."""
    return _in_thread(lambda: operator.execute({}))


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _kill_server(server) -> float:
    """SIGKILLs the server's JVM and its Python workers (as a crashed machine would); returns when."""
    pid = server.running()["pid"]
    killed = time.monotonic()
    kill_session(pid)  # the server was started in a session of its own: the JVM leads it
    return killed


def _assert_failed_retryably_naming_the_server(outcome: dict, killed: float, server, capfd, caplog) -> None:
    import geneva_provider as gp

    outcome["thread"].join(STAGE_FAILS_WITHIN_SECONDS + 30)
    assert "ended" in outcome, "the stage was still running"
    assert outcome["ended"] - killed < STAGE_FAILS_WITHIN_SECONDS, outcome["ended"] - killed
    logs = _logs(capfd, caplog)
    with capfd.disabled():
        print(f"\nthe stage failed {outcome['ended'] - killed:.1f}s after the server was killed")
    error = outcome.get("error")
    assert isinstance(error, gp.SparkEnvironmentError), repr(error)
    assert error.retryable
    assert f"lost the Spark Connect server sc://127.0.0.1:{server.port}" in str(error), str(error)
    # The stage's last progress line says why, however soon it failed (and so do the lines while the client was
    # retrying, instead of a healthy-looking RUNNING).
    assert re.search(rf"FAILED, but the Spark Connect server sc://127\.0\.0\.1:{server.port} is unreachable "
                     rf"\(.*\) for \d+s; giving up", logs), logs[-3000:]


def _daemon_directories(server_pid: int) -> set[str]:
    """The working directories of the server's Python daemons: each one's session files directory."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == server_pid
                    and b"daemon" in (proc / "cmdline").read_bytes()):
                cwd = os.readlink(proc / "cwd")
                if not cwd.endswith(" (deleted)"):  # a released session's daemon, exiting
                    found.add(cwd)
        except OSError:
            continue
    return found


def _logs(capfd, caplog) -> str:
    out, err = capfd.readouterr()
    text = out + err + caplog.text
    caplog.clear()
    return text


@pytest.mark.slow
def test_a_long_lived_connect_server_keeps_one_warm_python_daemon_for_all_its_jobs(lance_db, monkeypatch, call_dir,
                                                                                   killable_server):
    """Backfill jobs through the operators, one server: every job's stages resume this worker's warm session, so
    the server keeps one session and one Python daemon for all of them (not one per job), and ``status`` shows it;
    with ``[geneva] reuse_connect_session = false`` each job's session goes with its daemon when the job ends."""
    from geneva_provider.connect_server import python_processes
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
    from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator

    warm_jobs, own_jobs, rows = 4, 2, 200
    tbl = lance_db.create_table("grow", events_table(rows))
    tbl.add_columns({"y": counting_double(call_dir)})
    server = killable_server.up()
    pid = server.running()["pid"]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": server.port}))

    def job(number: int) -> set[str]:
        """One backfill job of ``rows`` new rows; the session directories its apply's daemons worked in."""
        if number:
            tbl.add(events_table(rows, start=number * rows))
        plan = GenevaPlanBackfillOperator(task_id="plan", table="grow", column="y").execute({})
        assert plan["rows_to_compute"] == rows
        GenevaSparkApplyOperator(task_id="apply", plan=plan).execute({})
        assert python_processes(pid)[0] >= 1  # the session has its daemon while it lives
        used = _daemon_directories(pid)
        GenevaSparkWriteCommitOperator(task_id="write_commit", plan=plan).execute({})
        GenevaVerifyOperator(task_id="verify", plan=plan).execute({})
        return used

    warm_dirs, daemons = set(), []
    for number in range(warm_jobs):
        warm_dirs |= job(number)
        daemons.append(python_processes(pid)[0])
    # One warm session served every job: one session directory, one daemon all along, and it is still open.
    assert len(warm_dirs) == 1 and daemons == [1] * warm_jobs, (warm_dirs, daemons)
    status = server.status()
    assert status["python_daemons"] == 1 and status["sessions"] >= 1, status

    monkeypatch.setenv("AIRFLOW__GENEVA__REUSE_CONNECT_SESSION", "false")
    own_dirs = set()
    for number in range(warm_jobs, warm_jobs + own_jobs):
        own_dirs |= job(number) - warm_dirs
        # The job's own session went with its daemon; the warm one stays.
        _wait_for(lambda: python_processes(pid)[0] == 1, 30, "the job's own Python daemon to exit")
    assert len(own_dirs) == own_jobs and not any(os.path.exists(d) for d in own_dirs), own_dirs
    assert all(os.path.exists(d) for d in warm_dirs)
    with_jobs = warm_jobs + own_jobs
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and sorted(got["x"]) == list(range(with_jobs * rows))
    assert sorted(read_calls(call_dir)) == list(range(with_jobs * rows))  # each job computed only its new rows
    tbl.dataset().validate()


# ---------------------------------------------------------------- a caller's own Connect session
class _KillableServer:
    """One Spark Connect server the module's tests share: a kill test kills it, and :meth:`up` starts it again
    (on the same port) for the next step or test, so no test pays for a server start of its own first."""

    def __init__(self, directory) -> None:
        self.directory = directory
        self.port = 0
        self.server = None

    def up(self):
        if self.server is None or self.server.running() is None:
            self.server = _server(self.port, self.directory)
            self.server.start()
            self.port = self.server.port
        return self.server

    def kill(self) -> float:
        return _kill_server(self.server)

    def stop(self) -> None:
        if self.server is not None and self.server.running() is not None:
            self.server.stop()


@pytest.fixture(scope="module")
def killable_server(tmp_path_factory):
    holder = _KillableServer(tmp_path_factory.mktemp("killable"))
    try:
        yield holder
    finally:
        holder.stop()


def _callers_session(url: str):
    """A Connect session as a notebook makes one: pyspark's own retry policies (ten minutes of back-off)."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    return RemoteSparkSession.builder.remote(url).create()


def _drop_session(spark) -> None:
    """Lets go of a session whose server died (``spark.stop()`` would wait through the caller's back-off)."""
    from geneva_provider.pipeline.spark.connect import close_session

    close_session(spark)


def _in_thread(call) -> dict:
    """Runs ``call()`` in a thread, as a notebook cell would; the outcome lands in the dict."""
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    outcome["thread"] = threading.Thread(target=run, daemon=True)
    outcome["thread"].start()
    return outcome


def _assert_lost_server_soon(outcome: dict, killed: float, port: int, capfd, what: str) -> Exception:
    import geneva_provider as gp

    outcome["thread"].join(STAGE_FAILS_WITHIN_SECONDS + 30)
    assert "ended" in outcome, f"{what} was still running {STAGE_FAILS_WITHIN_SECONDS + 30}s after the kill"
    seconds = outcome["ended"] - killed
    with capfd.disabled():
        print(f"\n{what} failed {seconds:.1f}s after the server was killed")
    assert seconds < STAGE_FAILS_WITHIN_SECONDS, seconds
    error = outcome.get("error")
    assert isinstance(error, gp.SparkServerUnreachableError), repr(error)
    assert error.retryable
    assert f"lost the Spark Connect server sc://127.0.0.1:{port}" in str(error), str(error)
    return error


def _slow_table(lance_db, call_dir, name: str, rows: int, fragments: int, slow_flag: Path):
    """A table whose UDF column takes 4 ms a row while ``slow_flag`` exists: over 30 s for its rows, so a job started
    beside others is still running when the slowest of them has its first checkpoints."""
    tbl = lance_db.create_table(name, events_table(rows), max_rows_per_file=rows // fragments)
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.004, slow_while=str(slow_flag))})
    return tbl


def _checkpointed_parents(store) -> set[int]:
    """The parents (row ids = doc_id of one fresh table) a chunker view's checkpoints hold."""
    from geneva_provider.core.store.layout import JobStore

    held: set[int] = set()
    for bk in JobStore(store).batches(""):
        held.update(range(bk.start, bk.end))
    return held


@pytest.mark.slow
def test_a_server_killed_under_running_jobs_fails_each_soon_and_their_reruns_resume(
        lance_db, db, monkeypatch, tmp_path, capfd, caplog, killable_server, slow_flag):
    """One server, killed under running jobs of every entry point at once: the Airflow operators (a Connect
    session of their own), ``run_apply`` / ``run_write_commit`` with the caller's session, ``tbl.backfill`` and a
    chunker view's ``refresh`` with the caller's session.  Each fails within the outage bound (not pyspark's ten
    minutes) with the retryable error naming the server, its job FAILED with it, a caller's retry policies given
    back; a retry while the server is down fails too.  Once the server is back, each rerun computes only the rows
    no checkpoint holds; killed again under write+commit after its first commits, what was committed is whole,
    and the reruns commit the rest, computing nothing.  (One kill for all: each server restart costs seconds.)"""
    from airflow.sdk.exceptions import AirflowFailException

    import geneva_provider as gp
    from geneva_provider import stages
    from geneva_provider.core.contracts.models import JobStatus
    from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
    from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
    from geneva_provider.pipeline.stages import on_driver
    from geneva_provider.pipeline.stages.job_records import read_record
    from tests.spark.test_udtf_views import docs_table, expected_rows, view_rows

    rows, fragments, docs_n = 8_000, 32, 1_200
    calls = {name: tmp_path / f"calls-{name}" for name in ("operators", "api", "facade", "chunker")}
    for d in calls.values():
        d.mkdir()
    # The operators' table: one fragment per Spark job and commit, one at a time (write+commit runs long enough
    # to be killed after its first commits); the stage API's likewise; the facade's; a chunker view's source.
    op_tbl = _slow_table(lance_db, str(calls["operators"]), "slow", rows, fragments, slow_flag)
    api_tbl = _slow_table(lance_db, str(calls["api"]), "slow_api", rows, fragments, slow_flag)
    facade_tbl = _slow_table(lance_db, str(calls["facade"]), "slow_facade", rows, fragments, slow_flag)
    docs = db.create_table("docs", docs_table(range(docs_n)), stable_row_ids=True, max_rows_per_file=300)
    view = db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                               udtf=counting_split(str(calls["chunker"]), sleep=0.025, slow_while=str(slow_flag)))
    server = killable_server.up()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": server.port}))
    op_plan = GenevaPlanBackfillOperator(task_id="plan", table="slow", column="y", checkpoint_size=125,
                                         commit_granularity=1, concurrency=1).execute({})
    api_plan = stages.plan_backfill(api_tbl.ref, "y", stages.BackfillOptions(checkpoint_size=125, concurrency=1,
                                                                            commit_granularity=1))

    # 1. The server dies under four applies.
    sessions = {name: _callers_session(server.url) for name in ("api", "facade", "chunker")}
    policies = sessions["api"].client.get_retry_policies()
    try:
        running = {
            # the stage in the task process (durable=False), whose progress lines this test reads
            "operators": _run_in_thread(GenevaSparkApplyOperator(task_id="apply", plan=op_plan, durable=False)),
            "api": _in_thread(lambda: stages.run_apply(api_plan.plan_uri, sessions["api"],
                                                       api_tbl.ref.storage_options)),
            "facade": _in_thread(lambda: facade_tbl.backfill("y", spark=sessions["facade"], checkpoint_size=125,
                                                             concurrency=1)),
            "chunker": _in_thread(lambda: view.refresh(spark=sessions["chunker"], checkpoint_size=50, concurrency=1)),
        }
        for tbl in (op_tbl, api_tbl, facade_tbl):
            _wait_for(lambda t=tbl: len(_checkpointed_rows(t.checkpoint_store, rows // fragments)) >= 1_000, 120,
                      f"checkpoints of {tbl.name}")
        _wait_for(lambda: len(_checkpointed_parents(view.checkpoint_store)) >= 200, 120, "the chunker's checkpoints")
        assert not [name for name, outcome in running.items() if "ended" in outcome]  # the kill lands under all
        killed = killable_server.kill()
        slow_flag.unlink()
        _assert_failed_retryably_naming_the_server(running["operators"], killed, server, capfd, caplog)
        errors = {name: _assert_lost_server_soon(running[name], killed, server.port, capfd, what)
                  for name, what in (("api", "run_apply"), ("facade", "tbl.backfill"),
                                     ("chunker", "a chunker view's refresh"))}
        assert sessions["api"].client.get_retry_policies() == policies  # the caller's own, as they were
    finally:
        for spark in sessions.values():
            _drop_session(spark)
    assert not isinstance(running["operators"]["error"], AirflowFailException)  # Airflow retries it
    record = read_record(api_tbl.checkpoint_store, api_plan.job_id)
    assert record.status is JobStatus.FAILED and record.stage == "apply", record
    assert record.error.startswith(f"apply: SparkServerUnreachableError: {errors['api']}"[:200]), record.error
    for name, table in (("facade", "slow_facade"), ("chunker", "chunks")):
        [failed] = (lance_db if name == "facade" else db).list_jobs(table)
        assert failed.status == "FAILED" and failed.stage == "apply", failed
        assert "SparkServerUnreachableError" in failed.error and str(errors[name])[:100] in failed.error, failed.error
    checkpointed = {t.name: _checkpointed_rows(t.checkpoint_store, rows // fragments)
                    for t in (op_tbl, api_tbl, facade_tbl)}
    for name, held in checkpointed.items():
        assert 1_000 <= len(held) < rows, (name, len(held))
    assert op_tbl.count_rows("y IS NOT NULL") == api_tbl.count_rows("y IS NOT NULL") == 0
    assert view.count_rows() == 0
    parents_held = _checkpointed_parents(view.checkpoint_store)
    assert 0 < len(parents_held) < docs_n

    # A retry while the server is still down fails once its first contact gives up: it does not
    # fall back to opening a second session and wait through the same back-off again.
    with pytest.raises(gp.SparkEnvironmentError, match=f"on sc://127.0.0.1:{server.port}") as down:
        GenevaSparkApplyOperator(task_id="apply", plan=op_plan).execute({})
    assert down.value.retryable
    assert "cannot be reused" not in _logs(capfd, caplog)

    # 2. The server comes back on the same port: each rerun computes only what no checkpoint holds.
    server = killable_server.up()
    for d in calls.values():
        clear_calls(d)
    applied = GenevaSparkApplyOperator(task_id="apply", plan=op_plan).execute({})
    assert applied["rows_computed"] == rows - len(checkpointed["slow"])
    spark = _callers_session(server.url)
    policies = spark.client.get_retry_policies()
    try:
        api_applied = stages.run_apply(api_plan.plan_uri, spark, api_tbl.ref.storage_options)
        assert api_applied.rows_computed == rows - len(checkpointed["slow_api"])
        facade_result = facade_tbl.backfill("y", spark=spark, checkpoint_size=125)
        assert facade_result.rows_computed == rows - len(checkpointed["slow_facade"])
        chunked = view.refresh(spark=spark, checkpoint_size=50)
        assert chunked.rows_computed == docs_n - len(parents_held)
        for name, table in (("operators", "slow"), ("api", "slow_api"), ("facade", "slow_facade")):
            rerun = read_calls(calls[name])  # none twice, none checkpointed
            with capfd.disabled():
                print(f"{name}: the rerun computed {len(rerun)} rows; {len(checkpointed[table])} of {rows} were "
                      "checkpointed before the kill")
            assert sorted(rerun) == sorted(set(range(rows)) - checkpointed[table]), name
        rerun = read_calls(calls["chunker"])
        assert len(rerun) == len(set(rerun)), "a parent was expanded twice in the rerun"
        assert set(rerun) == set(range(docs_n)) - parents_held
        assert lance_db.get_job(facade_result.job_id).status == "DONE"
        facade_got = facade_tbl.to_arrow(["x", "y"]).to_pydict()
        assert facade_got["y"] == [2 * x for x in facade_got["x"]] and sorted(facade_got["x"]) == list(range(rows))
        facade_tbl.dataset().validate()
        assert view_rows(view) == expected_rows(docs)
        view.dataset().validate()

        # 3. The server dies under two write+commits (the operators', the stage API's), after their first commits.
        # Their few rows would be written by the driver without Spark (pipeline/stages/on_driver.py), which a
        # server's death does not stop: here they go to Spark, whose death is what this part checks.
        monkeypatch.setattr(on_driver, "DRIVER_WRITE_BYTES", 0)
        for d in calls.values():
            clear_calls(d)
        writing = {
            "operators": _run_in_thread(GenevaSparkWriteCommitOperator(task_id="write_commit", plan=op_plan,
                                                                       durable=False)),
            "api": _in_thread(lambda: stages.run_write_commit(api_plan.plan_uri, spark, api_tbl.ref.storage_options)),
        }
        for tbl, job_id in ((op_tbl, op_plan["job_id"]), (api_tbl, api_plan.job_id)):
            _wait_for(lambda t=tbl, j=job_id: getattr(read_record(t.checkpoint_store, j), "rows_committed", 0) > 0,
                      120, f"a first commit to {tbl.name}")
        assert not [name for name, outcome in writing.items() if "ended" in outcome]
        killed = killable_server.kill()
        _assert_failed_retryably_naming_the_server(writing["operators"], killed, server, capfd, caplog)
        _assert_lost_server_soon(writing["api"], killed, server.port, capfd, "run_write_commit")
        assert spark.client.get_retry_policies() == policies
    finally:
        _drop_session(spark)
    record = read_record(api_tbl.checkpoint_store, api_plan.job_id)
    assert record.status is JobStatus.FAILED and record.stage == "write_commit", record
    assert "SparkServerUnreachableError" in record.error, record.error
    for tbl in (op_tbl, api_tbl):
        committed = tbl.count_rows("y IS NOT NULL")
        assert 0 < committed < rows, (tbl.name, committed)
        tbl.dataset().validate()  # what was committed before the kill is whole

    # 4. Back again: each write+commit, run again, commits the rest and computes nothing.
    server = killable_server.up()
    GenevaSparkWriteCommitOperator(task_id="write_commit", plan=op_plan).execute({})
    assert GenevaVerifyOperator(task_id="verify", plan=op_plan).execute({})["rows_verified"] == rows
    spark = _callers_session(server.url)
    try:
        stages.run_write_commit(api_plan.plan_uri, spark, api_tbl.ref.storage_options)
    finally:
        spark.stop()
    assert stages.verify(api_plan, api_tbl.ref.storage_options).rows_verified == rows
    assert read_record(api_tbl.checkpoint_store, api_plan.job_id).status is JobStatus.DONE
    assert read_calls(calls["operators"]) == read_calls(calls["api"]) == []
    for tbl in (op_tbl, api_tbl):
        got = tbl.to_arrow(["x", "y"]).to_pydict()
        assert got["y"] == [2 * x for x in got["x"]] and sorted(got["x"]) == list(range(rows)), tbl.name
        tbl.dataset().validate()
    assert isinstance(errors["api"], gp.SparkEnvironmentError)  # what callers catching the broader class still get
    assert not isinstance(errors["facade"], gp.TableVersionGoneError)


# ---------------------------------------------------------------- versions cleaned up under a job
def _clean_up_old_versions(table) -> None:
    import datetime as dt

    table.dataset().cleanup_old_versions(older_than=dt.timedelta(0))


@pytest.mark.parametrize("kind", ["backfill", "view", "chunker"])
def test_versions_cleaned_up_between_plan_and_apply_fail_the_stage_naming_the_table_and_version(
        db, connect_spark, call_dir, kind):
    """The plan's pinned version is checked before Spark starts: the package's error naming the table and the
    version (not Lance's manifest path in a Spark stack trace), the record FAILED with it, and a new plan
    lands the exact table."""
    import geneva_provider as gp
    from geneva_provider import stages
    from geneva_provider.core.contracts.models import JobStatus
    from geneva_provider.pipeline.stages.job_records import read_record
    from tests.spark.test_udtf_views import docs_table, expected_rows, view_rows

    if kind == "backfill":
        target = src = db.create_table("events", events_table(2_000), max_rows_per_file=500)
        target.add_columns({"y": counting_double(call_dir)})
        summary = stages.plan_backfill(target.ref, "y")
    else:
        if kind == "view":
            src = db.create_table("events", events_table(2_000), max_rows_per_file=500)
            target = db.create_materialized_view("evens", src.search(None).where("x % 2 = 0").select(
                {"x": "x", "y": counting_double(call_dir)}))
        else:
            src = db.create_table("docs", docs_table(range(300)), stable_row_ids=True, max_rows_per_file=100)
            target = db.create_udtf_view("chunks", source=src.search(None).select(["doc_id", "text"]),
                                         udtf=counting_split(call_dir))
        summary = stages.plan_refresh(target.ref)
    pinned = src.version
    assert summary.rows_to_compute > 0
    src.add(events_table(10, start=10_000) if kind != "chunker" else docs_table(range(300, 310)))
    _clean_up_old_versions(src)

    with pytest.raises(gp.TableVersionGoneError) as gone:
        stages.run_apply(summary.plan_uri, connect_spark, target.ref.storage_options)
    message = str(gone.value)
    assert f"version {pinned} of table '{src.name}' is gone" in message, message
    assert "plan again" in message and len(message) < 400, message
    assert not gone.value.retryable
    assert read_calls(call_dir) == []  # no Spark task ran
    record = read_record(target.checkpoint_store, summary.job_id)
    assert record.status is JobStatus.FAILED and "TableVersionGoneError" in record.error, record

    # The next run plans again, from the current versions, and lands the exact table.
    if kind == "backfill":
        target.backfill("y", spark=connect_spark)
        got = target.to_arrow(["x", "y"]).to_pydict()
        assert got["y"] == [2 * x for x in got["x"]] and len(got["x"]) == 2_010
    elif kind == "view":
        target.refresh(spark=connect_spark)
        got = target.to_arrow(["x", "y"]).to_pydict()
        assert sorted(got["x"]) == [x for x in [*range(2_000), *range(10_000, 10_010)] if x % 2 == 0]
        assert got["y"] == [2 * x for x in got["x"]]
    else:
        target.refresh(spark=connect_spark)
        assert view_rows(target) == expected_rows(src)
    target.dataset().validate()


def test_a_version_cleaned_up_while_apply_runs_fails_it_naming_the_table_and_version(db, connect_spark, tmp_path):
    """A clean-up after the stage's check, while its tasks run (here: by the UDF's first call): the tasks that
    open the version then fail, and the stage reports the package's error, not Lance's in a Spark trace."""
    import datetime as dt

    import lance
    import pyarrow as pa

    import geneva_provider as gp
    from geneva_provider import stages

    tbl = db.create_table("events", events_table(4_000), max_rows_per_file=250)
    uri, flag = tbl.ref.uri, str(tmp_path / "clean-up-once")
    open(flag, "w").close()

    @gp.udf(data_type=pa.int64(), name="cleaning_double")
    def cleaning_double(x: int) -> int:
        if os.path.exists(flag):
            os.remove(flag)
            lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
        time.sleep(0.001)
        return 2 * x

    tbl.add_columns({"y": cleaning_double})
    # One task per fragment, each its own Spark task opening the plan's version: those after the first two start
    # after the clean-up.
    summary = stages.plan_backfill(tbl.ref, "y", stages.BackfillOptions(checkpoint_size=250, task_size=250))
    assert summary.tasks == 16
    tbl.add(events_table(10, start=10_000))  # the plan's version is now an old one
    with pytest.raises(gp.TableVersionGoneError) as gone:
        stages.run_apply(summary.plan_uri, connect_spark, tbl.ref.storage_options)
    assert f"version {summary.read_version} of table 'events' is gone" in str(gone.value), str(gone.value)
    assert len(str(gone.value)) < 400
    tbl.backfill("y", spark=connect_spark)
    got = tbl.to_arrow(["x", "y"]).to_pydict()
    assert got["y"] == [2 * x for x in got["x"]] and len(got["x"]) == 4_010
