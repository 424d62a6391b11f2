"""A real Airflow deployment on 127.0.0.1 runs the example DAGs by itself.

What the in-process ``dag.test()`` suites cannot show: the scheduler queues the Asset-scheduled
backfill on its own after the ingest DAG, LocalExecutor task processes reach the api-server's
Execution API, a deferrable sensor is handed to a separate triggerer process, and the REST API --
what the UI shows -- masks every storage option of the ``lance`` connection.

The deployment is the one ``airflow standalone`` would start (scheduler, dag-processor,
triggerer, api-server) on a SQLite metadata DB -- Airflow 3 accepts the LocalExecutor on SQLite --
each component a separate process group with its own log file, with a clean environment of its
own: the ``AIRFLOW_*`` variables conftest sets for the in-process suites never reach it.  The
api-server listens on 127.0.0.1; the log servers are switched off with ``--skip-serve-logs``
(they cannot be bound to loopback).  The tasks' Spark stages run on a Spark Connect server on
127.0.0.1, the README demo's embedded default.  The listening sockets of every process of the
deployment, task processes and the Spark server's JVM and Python workers included, are sampled at
each poll and must all be on loopback; the module's fixture stops every process it started and
checks that the port is closed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # not resolved: the venv's bin, where airflow and spark-submit live
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
# Fake credentials in the lance connection: none may come back from the API or reach a log.
STORAGE_SECRETS = {"azure_storage_account_key": "FAKE-AZURE-KEY-3b9d41c7",
                   "aws_access_key_id": "FAKEAKIA7Q2Z4W6X",
                   "aws_secret_access_key": "FAKE-AWS-SECRET-51e0a9"}
NAMESPACE_SECRET = "FAKE-NS-CREDENTIAL-c04f"
FAKE_VALUES = [*STORAGE_SECRETS.values(), NAMESPACE_SECRET]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<{exc}>"


class AirflowStack:
    """The four Airflow components as child processes, and a REST client for the api-server."""

    COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")

    def __init__(self, root: Path, spark_server: Any) -> None:
        self.root = root
        self.spark_server = spark_server  # the Spark Connect server the tasks' Spark stages run on
        self.home = root / "home"
        self.dags = root / "dags"
        self.logs = root / "logs"
        self.component_logs = root / "components"
        self.lake = root / "lake"
        for d in (self.home, self.dags, self.logs, self.component_logs):
            d.mkdir(parents=True)
        for src in (ROOT / "dags_examples" / "backfill_after_ingest.py", ROOT / "dags_examples" / "rag_ingest.py",
                    ROOT / "tests" / "dags" / "geneva_test_sensor.py"):
            shutil.copy(src, self.dags / src.name)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(16)
        (self.root / "passwords.json").write_text(json.dumps({"admin": self.password}))
        from cryptography.fernet import Fernet

        self.fernet_key = Fernet.generate_key().decode()
        self.env = self._environment()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client = httpx.Client(base_url=self.url, timeout=30, trust_env=False)
        self.startup_seconds = 0.0
        self.sockets_seen: set[tuple[str, str, int]] = set()  # (process name, ip, port), sampled at each poll

    def _environment(self) -> dict[str, str]:
        """Only what the components need, spelled out: nothing inherited from conftest's Airflow set-up."""
        keep = {k: os.environ[k] for k in ("HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "JAVA_HOME")
                if k in os.environ}
        return {
            **keep,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(ROOT),  # this checkout's package, whichever one the venv installed
            "SPARK_LOCAL_IP": "127.0.0.1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",  # else the Asset consumer is never queued
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__FERNET_KEY": self.fernet_key,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.root / "passwords.json"),
            # The masking under test must not depend on a deployment's extra sensitive names.
            "AIRFLOW__CORE__SENSITIVE_VAR_CONN_NAMES": "",
            "AIRFLOW__CORE__HIDE_SENSITIVE_VAR_CONN_FIELDS": "True",
            # The tests' tables are small: their Spark stages go to Spark, not the task's process (tests/conftest.py).
            "AIRFLOW__GENEVA__IN_PROCESS_ROWS": "0",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "tests.system.sqlite_args.CONNECT_ARGS",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "tests.system.sqlite_args.ASYNC_CONNECT_ARGS",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.logs),
            "AIRFLOW__LOGGING__DAG_PROCESSOR_CHILD_PROCESS_LOG_DIRECTORY": str(self.logs / "dag_processor"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(24),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            # Parse the DAG folder at once and rarely again (the files do not change).
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "60",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            # The embedded default of the README's demo: the Spark stages run on a Spark Connect server on
            # loopback (spark-submit from task processes has its own tests in tests/airflow and tests/system).
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark_connect", "host": "sc://127.0.0.1",
                                                      "port": self.spark_server.port}),
            # No AIRFLOW_CONN_LANCE_DEFAULT: the tasks use the connection created through the REST API.
        }

    # ---------------------------------------------------------------- processes
    def start(self) -> None:
        migrate = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=self.env, cwd=self.root,
                                 capture_output=True, text=True, timeout=300)
        assert migrate.returncode == 0, \
            f"airflow db migrate failed:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-3000:]}"
        commands = {
            "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"],
            "scheduler": ["scheduler", "--skip-serve-logs"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer", "--skip-serve-logs"],
        }
        for name in self.COMPONENTS:
            with open(self.log_of(name), "wb") as log:
                self.procs[name] = subprocess.Popen([str(VENV_BIN / "airflow"), *commands[name]], env=self.env,
                                                    cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def stop_component(self, name: str) -> None:
        """SIGTERM one component's process group and wait for it to exit (a restart's first half)."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)

    def start_component(self, name: str, *args: str) -> None:
        """Starts one component again (after :meth:`stop_component`), appending to its log."""
        with open(self.log_of(name), "ab") as log:
            self.procs[name] = subprocess.Popen([str(VENV_BIN / "airflow"), name, *args], env=self.env,
                                                cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def log_of(self, name: str) -> Path:
        return self.component_logs / f"{name}.log"

    def tree(self, spark: bool = True) -> list[psutil.Process]:
        """Every live process the components started, task processes (own process groups) included, and
        (``spark``) the Spark Connect server's: its JVM and the Python workers that ran the tasks' UDFs."""
        found: list[psutil.Process] = []
        server = self.spark_server.running() if spark else None
        for proc in [*self.procs.values(), *([psutil.Process(server["pid"])] if server else [])]:
            with contextlib.suppress(psutil.NoSuchProcess):
                top = psutil.Process(proc.pid)
                found += [top, *top.children(recursive=True)]
        return found

    def listening(self, spark: bool = True) -> list[tuple[str, str, int]]:
        """(process name, ip, port) of every listening TCP socket of the components' processes and
        their descendants (task processes), and (``spark``) of the Spark Connect server's JVM and Python
        workers; remembered in ``sockets_seen``."""
        out = []
        for proc in self.tree(spark):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                name = proc.name()
                out += [(name, c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                        if c.status == psutil.CONN_LISTEN]
        self.sockets_seen.update(out)
        return out

    def stop(self) -> tuple[list[psutil.Process], list[str]]:
        """SIGTERM each component's process group, and each descendant outside those groups; SIGKILL
        what is left after 30 s.

        Task processes run in process groups of their own, so they are signalled by pid, collected
        before anything dies (an orphan leaves the tree).  Nothing is signalled twice: a second
        SIGTERM makes the scheduler abandon its executor's shutdown (idle LocalExecutor workers,
        which ignore SIGTERM, would then be left behind) and the triggerer force its exit.
        Returns the processes signalled and those that needed SIGKILL.
        """
        procs = self.tree(spark=False)  # the Spark Connect server is the module fixture's to stop
        groups = {proc.pid for proc in self.procs.values()}
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                if os.getpgid(proc.pid) not in groups:
                    proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=30)
        killed = []
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                killed.append(f"{proc.pid} {' '.join(proc.cmdline())[:80]}")
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.client.close()
        return procs, killed

    # ---------------------------------------------------------------- diagnostics
    REPORT_MARK = "----- component logs"

    def report(self, message: str) -> str:
        """``message`` with the tail of each component's log and of the newest task logs."""
        if self.REPORT_MARK in message:
            return message
        parts = [message, self.REPORT_MARK]
        for name in self.COMPONENTS:
            proc = self.procs.get(name)
            code = proc.poll() if proc else "not started"
            parts.append(f"----- {name} (exit code {code}) {self.log_of(name)}\n{tail(self.log_of(name))}")
        task_logs = sorted((p for p in self.logs.rglob("*.log") if "dag_processor" not in p.parts),
                           key=lambda p: p.stat().st_mtime)[-3:]
        parts += [f"----- task log {p}\n{tail(p, 25)}" for p in task_logs]
        return "\n".join(parts)

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
        """Polls ``check`` until it returns a value; fails with the components' logs after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            assert not dead, self.report(f"while waiting for {what}: components exited {dead}")
            self.listening()
            try:
                value = check()
            except httpx.TransportError as exc:  # the api-server is still starting
                value, last = None, exc
            if value is not None:
                return value
            time.sleep(interval)
        raise AssertionError(self.report(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})"))

    # ---------------------------------------------------------------- REST
    def login(self) -> None:
        response = self.client.post("/auth/token", json={"username": "admin", "password": self.password})
        assert response.status_code == 201, self.report(f"login: {response.status_code} {response.text}")
        self.client.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def get(self, path: str, **kwargs: Any) -> Any:
        response = self.client.get(f"/api/v2{path}", **kwargs)
        assert response.status_code == 200, self.report(f"GET {path}: {response.status_code} {response.text}")
        return response.json()

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        response = self.client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        assert response.status_code == 200, self.report(f"trigger {dag_id}: {response.status_code} {response.text}")
        return response.json()["dag_run_id"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        tis = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti["state"] for ti in tis}

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> dict[str, str | None]:
        """Waits for the run to end; fails with its task states and the logs unless it succeeded."""

        def ended() -> str | None:
            state = self.get(f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
            return state if state in ("success", "failed") else None

        state = self.wait_for(f"{dag_id} run {run_id} to end", ended, timeout)
        states = self.task_states(dag_id, run_id)
        assert state == "success", self.report(f"{dag_id} run {run_id} {state}: {states}")
        return states


def assert_no_secret_in_logs(stack: AirflowStack) -> None:
    """The connection's storage options went through tasks and the triggerer: none may be in any log."""
    files = [p for p in (*stack.logs.rglob("*"), *stack.component_logs.rglob("*")) if p.is_file()]
    files.append(stack.spark_server.log_path)  # the Spark Connect server's log, where the stages' Spark work ran
    assert any(p.name.startswith("attempt=") for p in files), "no task log was written"
    leaked = {str(p): found for p in files if (found := [v for v in FAKE_VALUES if v in p.read_text(errors="replace")])}
    assert not leaked, leaked


def with_logs(test: Callable[..., None]) -> Callable[..., None]:
    """Any failure of ``test`` carries the tail of every component's log (what failed is rarely in the test)."""

    @functools.wraps(test)
    def run(stack: AirflowStack, *args: Any, **kwargs: Any) -> None:
        try:
            test(stack, *args, **kwargs)
        except Exception as exc:
            raise AssertionError(stack.report(f"{type(exc).__name__}: {exc}")) from exc

    return run


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """The running deployment, with the lance connection created through the REST API."""
    from geneva_provider.connect_server import LocalConnectServer

    started = time.monotonic()
    root = tmp_path_factory.mktemp("scheduler")
    spark_server = LocalConnectServer(0, master="local[2]", directory=root / "spark-connect")
    spark_server.start()
    deployment = AirflowStack(root / "airflow", spark_server)
    try:
        deployment.start()

        def healthy() -> dict[str, Any] | None:
            response = deployment.client.get("/api/v2/monitor/health")
            if response.status_code != 200:
                return None
            health = response.json()
            ok = all(health.get(c, {}).get("status") == "healthy"
                     for c in ("metadatabase", "scheduler", "triggerer", "dag_processor"))
            return health if ok else None

        deployment.wait_for("every component to report healthy", healthy, timeout=180)
        deployment.login()
        extra = {"secret_storage_options": {**STORAGE_SECRETS, "aws_region": "us-east-1"},
                 "namespace_impl": "dir",
                 "secret_namespace_properties": {"dir_listing_enabled": "true", "client_credential": NAMESPACE_SECRET}}
        response = deployment.client.post("/api/v2/connections", json={
            "connection_id": "lance_default", "conn_type": "lance", "host": str(deployment.lake),
            "extra": json.dumps(extra)})
        assert response.status_code == 201, \
            deployment.report(f"create connection: {response.status_code} {response.text}")
        deployment.startup_seconds = time.monotonic() - started
        yield deployment
    finally:
        port = deployment.port
        seen = sorted(deployment.sockets_seen)
        t0 = time.monotonic()
        spark_stop = threading.Thread(target=spark_server.stop)  # the two stop side by side
        spark_stop.start()
        procs, killed = deployment.stop()
        spark_stop.join()
        left = []
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc.pid)
        listening = [c for c in psutil.net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        with socket.socket() as s:
            refused = s.connect_ex(("127.0.0.1", port)) != 0
        assert not left and not listening and refused, deployment.report(
            f"after stopping: processes left {left}, listening on {port}: {listening}, SIGKILLed {killed}")
        print(f"\nstopped {len(procs)} processes in {time.monotonic() - t0:.1f}s (SIGKILLed: {killed or 'none'}); "
              f"listening sockets seen while running: {seen}")
        assert all(ip in LOOPBACK for _, ip, _ in seen), f"a socket listening beyond loopback: {seen}"


@pytest.fixture(scope="module")
def parsed(stack: AirflowStack) -> None:
    """The example DAGs are parsed, unpaused, and none failed to import."""
    wanted = {"geneva_ingest_events", "geneva_backfill_after_ingest", "geneva_test_sensor", "geneva_rag_ingest"}

    def ready() -> set[str] | None:
        dags = {d["dag_id"]: d for d in stack.get("/dags", params={"limit": 100})["dags"]}
        errors = stack.get("/importErrors")
        assert errors["total_entries"] == 0, f"DAG import errors: {errors}"
        found = {d for d in wanted if d in dags and not dags[d]["is_paused"]}
        return found if found == wanted else None

    stack.wait_for("the DAGs to be parsed, unpaused", ready, timeout=120)


@pytest.fixture(scope="module")
def rag_run(stack: AirflowStack, parsed: None) -> tuple[str, float]:
    """A run of the RAG DAG, triggered when a test first asks for it: (run id, when).  The ingest test asks
    for it too, so the deployment runs both DAGs side by side, as it would any morning."""
    return stack.trigger("geneva_rag_ingest", {"docs": 40}), time.monotonic()


@with_logs
def test_api_masks_every_lance_storage_option(stack: AirflowStack) -> None:
    """GET /connections/{id} and the list show the connection with every option value masked; a UI-style
    round trip (PATCH back the masked body) keeps the stored values."""
    one = stack.client.get("/api/v2/connections/lance_default")
    listed = stack.client.get("/api/v2/connections")
    assert one.status_code == listed.status_code == 200, f"{one.text}\n{listed.text}"
    for body in (one.text, listed.text):
        assert not [v for v in FAKE_VALUES if v in body], f"a storage option in clear: {body}"
    (from_list,) = [c for c in listed.json()["connections"] if c["connection_id"] == "lance_default"]
    for conn in (one.json(), from_list):
        extra = json.loads(conn["extra"])
        assert extra["secret_storage_options"] == dict.fromkeys(
            [*STORAGE_SECRETS, "aws_region"], "***"), extra
        assert extra["secret_namespace_properties"] == {"dir_listing_enabled": "***", "client_credential": "***"}
        assert extra["namespace_impl"] == "dir" and conn["host"] == str(stack.lake)

    # The UI's edit form sends back what it was shown: the masked values must not overwrite the real ones.
    patched = stack.client.patch("/api/v2/connections/lance_default", json=one.json())
    assert patched.status_code == 200, f"PATCH: {patched.status_code} {patched.text}"
    with contextlib.closing(sqlite3.connect(stack.home / "airflow.db")) as db:
        (stored, encrypted), = db.execute(
            "SELECT extra, is_extra_encrypted FROM connection WHERE conn_id = 'lance_default'").fetchall()
    from cryptography.fernet import Fernet

    assert encrypted and NAMESPACE_SECRET not in stored  # encrypted at rest with the deployment's Fernet key
    extra = json.loads(Fernet(stack.fernet_key.encode()).decrypt(stored.encode()))
    assert extra["secret_storage_options"] == {**STORAGE_SECRETS, "aws_region": "us-east-1"}
    assert extra["secret_namespace_properties"]["client_credential"] == NAMESPACE_SECRET


@with_logs
def test_the_scheduler_runs_the_backfill_after_ingest_by_itself(stack: AirflowStack,
                                                              rag_run: tuple[str, float]) -> None:
    """Trigger the ingest DAG only (while the RAG DAG runs); the Asset-scheduled backfill must start by itself and
    fill the column."""
    import geneva_provider as gp
    from geneva_provider.examples import sample

    t0 = time.monotonic()
    ingest_run = stack.trigger("geneva_ingest_events", {"rows": 2_000})
    assert stack.wait_for_run("geneva_ingest_events", ingest_run, timeout=180) == {"ingest": "success"}
    ingest_s = time.monotonic() - t0

    def asset_run() -> dict[str, Any] | None:
        runs = stack.get("/dags/geneva_backfill_after_ingest/dagRuns")["dag_runs"]
        return runs[0] if runs else None

    run = stack.wait_for("the Asset-scheduled backfill run to be created", asset_run, timeout=60)
    assert run["run_type"] == "asset_triggered", run
    states = stack.wait_for_run("geneva_backfill_after_ingest", run["dag_run_id"], timeout=400)
    backfill_s = time.monotonic() - t0 - ingest_s
    assert states == {"add_columns": "success", "backfill_words.plan": "success", "backfill_words.apply": "success",
                      "backfill_words.write_commit": "success", "backfill_words.verify": "success",
                      "backfill_words.plan_indexes": "success", "backfill_words.index": "skipped"}, states
    events = stack.get("/assets/events", params={"limit": 100})["asset_events"]
    assert any(e["extra"].get("rows_added") == 2_000 for e in events), events

    table = gp.connect(str(stack.lake)).open_table("events")
    ds = table.dataset()
    assert ds.count_rows() == 2_000 and ds.count_rows(filter="words IS NULL") == 0
    got = table.to_arrow(["id", "text", "words"]).to_pydict()
    rows = sorted(zip(got["id"], got["text"], got["words"], strict=True))
    assert [r[0] for r in rows] == list(range(2_000))
    assert [r[1] for r in rows] == sample(2_000).column("text").to_pylist()
    assert [r[2] for r in rows] == [len(r[1].split()) for r in rows]  # geneva_provider.examples:word_count
    ds.validate()
    assert_no_secret_in_logs(stack)
    print(f"\nscheduler stack up in {stack.startup_seconds:.0f}s; ingest run {ingest_s:.0f}s; "
          f"asset-scheduled backfill {backfill_s:.0f}s")


@with_logs
def test_the_scheduler_runs_the_rag_ingest(stack: AirflowStack, rag_run: tuple[str, float]) -> None:
    """One run of the RAG DAG: documents appended, chunked by the chunker view's refresh, chunks embedded."""
    import geneva_provider as gp
    from geneva_provider.examples import hashed_embedding, split_text

    run_id, t0 = rag_run
    states = stack.wait_for_run("geneva_rag_ingest", run_id, timeout=400)
    # No index yet when the embedding backfill ends (its index stage skips its Spark task); then it is built.
    assert states.pop("embed_chunks.index") == "skipped", states
    assert set(states.values()) == {"success"} and len(states) == 14, states
    db = gp.connect(str(stack.lake))
    docs = db.open_table("docs").to_arrow(["doc_id", "text"]).to_pydict()
    wanted = sorted((d, c.start, c.chunk) for d, t in zip(docs["doc_id"], docs["text"], strict=True)
                    for c in split_text(t))
    view = db.open_table("doc_chunks")
    got = view.to_arrow(["doc_id", "start", "chunk", "embedding"]).to_pylist()
    assert sorted(docs["doc_id"]) == list(range(40))
    assert sorted((r["doc_id"], r["start"], r["chunk"]) for r in got) == wanted
    assert all(r["embedding"] == pytest.approx(hashed_embedding(r["chunk"])) for r in got)
    stats = view.index_stats("embedding_idx")  # built by the run over every chunk; its search task found the chunk
    assert (stats.num_indexed_rows, stats.num_unindexed_rows) == (len(wanted), 0)
    view.dataset().validate()
    assert_no_secret_in_logs(stack)
    print(f"\nRAG ingest run {time.monotonic() - t0:.0f}s ({len(wanted)} chunks of 40 documents)")


@with_logs
def test_a_deferrable_sensor_waits_in_the_triggerer(stack: AirflowStack, parsed: None) -> None:
    """The sensor task is deferred (no worker slot), its trigger runs in the triggerer process, and the
    task succeeds once rows are appended.  (Last in the module: the runs of the tests before it have ended, so
    the pool's counts are the sensor's alone.)"""
    import geneva_provider as gp
    from geneva_provider.examples import sample

    db = gp.connect(str(stack.lake))
    table = db.create_table("sensed", sample(100))
    run_id = stack.trigger("geneva_test_sensor", {"table": "sensed", "min_rows": 100})
    path = f"/dags/geneva_test_sensor/dagRuns/{run_id}/taskInstances/wait_for_rows"

    def deferred() -> dict[str, Any] | None:
        ti = stack.get(path)
        assert ti["state"] in (None, "scheduled", "queued", "running", "deferred"), f"sensor: {ti}"
        return ti if ti["state"] == "deferred" and ti["trigger"] and ti["triggerer_job"] else None

    ti = stack.wait_for("the sensor task to be deferred and its trigger claimed by the triggerer", deferred,
                        timeout=120)
    assert ti["trigger"]["classpath"] == "geneva_provider.triggers.table.GenevaTableChangedTrigger", ti
    job = ti["triggerer_job"]
    assert job["job_type"] == "TriggererJob" and job["state"] == "running", job
    # The triggerer writes what the trigger logs beside the task's log, suffixed with the triggerer's job id.
    (task_log,) = stack.logs.glob(f"dag_id=geneva_test_sensor/run_id={run_id}/task_id=wait_for_rows/attempt=1.log")
    trigger_log = task_log.with_name(f"{task_log.name}.trigger.{job['id']}.log")
    starting = f"(ID {ti['trigger']['id']}) starting"

    def trigger_running() -> bool | None:
        return True if trigger_log.is_file() and starting in trigger_log.read_text(errors="replace") else None

    stack.wait_for(f"the triggerer's log {trigger_log.name} to show the trigger starting", trigger_running,
                   timeout=60)
    listening = stack.listening(spark=False)  # while the sensor waits, of Airflow's: the api-server's socket only
    assert {(ip, port) for _, ip, port in listening} == {("127.0.0.1", stack.port)}, listening
    time.sleep(3)  # a poll or two with the condition still false: the task stays deferred ...
    assert stack.get(path)["state"] == "deferred"
    pool = stack.get("/pools/default_pool")  # ... and holds no worker slot
    assert (pool["deferred_slots"], pool["running_slots"], pool["occupied_slots"]) == (1, 0, 0), pool

    table.add(sample(50, start=100))
    stack.wait_for_run("geneva_test_sensor", run_id, timeout=90)
    xcom = stack.get(f"{path}/xcomEntries/return_value")["value"]
    value = json.loads(xcom) if isinstance(xcom, str) else xcom
    assert value["table"] == "sensed" and value["rows"] == 150, value
    assert "Trigger fired event" in trigger_log.read_text(errors="replace"), trigger_log.read_text()
    assert_no_secret_in_logs(stack)
