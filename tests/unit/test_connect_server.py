"""``geneva-connect-server`` with a port that another process holds: ``start`` refuses it before any JVM, and
``status`` / ``stop`` act only on the server the tool started, never on whatever listens on the port.

The JVM-starting half (a port grabbed while the server starts) is in tests/spark/test_connect_server.py.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geneva_provider.connect_server import free_port_from
from tests.unit.java_tripwire import JavaTripwire, java_descendants

# A process of its own that listens on a free port of 127.0.0.1, prints it, and answers every connection with "hi".
HOLDER = """
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
while True:
    conn, _ = s.accept()
    conn.sendall(b"hi")
    conn.close()
"""


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m geneva_provider.connect_server ARGS`` in a process of its own, as a shell runs the console script."""
    return subprocess.run([sys.executable, "-m", "geneva_provider.connect_server", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _answers(port: int) -> bool:
    """Whether the holder process still listens on ``port`` and serves a connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        return client.recv(2) == b"hi"


@pytest.fixture
def holder():
    """A plain Python process listening on a free port: ``(process, port)``; stopped by the test's end."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        yield proc, int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(30)


def test_start_refuses_a_port_another_process_listens_on_before_starting_a_jvm(tmp_path):
    wire = JavaTripwire(tmp_path / "wire")  # records any java this start would run
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        t0 = time.perf_counter()
        started = _cli("start", "--port", str(port), "--dir", str(tmp_path / "connect"), env=wire.env(os.environ))
        assert started.returncode == 1, started.stdout + started.stderr
        assert time.perf_counter() - t0 < 30  # it gave up at once, waiting for no server
        assert f"port {port} on 127.0.0.1 is held by another process" in started.stderr, started.stderr
        assert "started" not in started.stdout
        assert wire.calls() == [] and java_descendants() == []  # no JVM was started
        assert not (tmp_path / "connect" / "server.json").exists()
        status = _cli("status", "--dir", str(tmp_path / "connect"))
        assert (status.returncode, status.stdout.strip()) == (3, "not running")
        # The holder's socket is untouched: it still listens and accepts.
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = held.accept()
            conn.close()


@pytest.mark.parametrize("identity", [{}, {"started": 0}], ids=["earlier-version-state", "pid-reused"])
def test_status_and_stop_leave_alone_a_process_that_is_not_the_server_they_started(tmp_path, holder, identity):
    """The state file names a pid that is now another process listening on the server's port (the server died and
    its pid went to another program, or the state was written by a version that recorded no process identity):
    ``status`` says not running, ``stop`` stops nothing, ``start`` refuses the port, and that process lives on."""
    proc, port = holder
    directory = tmp_path / "connect"
    directory.mkdir()
    (directory / "server.json").write_text(json.dumps(
        {"pid": proc.pid, "port": port, "url": f"sc://127.0.0.1:{port}", "master": "local[*]", **identity}))

    status = _cli("status", "--dir", str(directory))
    assert (status.returncode, status.stdout.strip()) == (3, "not running"), status.stdout + status.stderr
    stop = _cli("stop", "--dir", str(directory))
    assert (stop.returncode, stop.stdout.strip()) == (0, "no Spark Connect server was running"), stop.stdout
    assert proc.poll() is None and _answers(port)
    start = _cli("start", "--port", str(port), "--dir", str(directory))
    assert start.returncode == 1 and f"port {port} on 127.0.0.1 is held by another process" in start.stderr
    assert proc.poll() is None and _answers(port)


def test_the_demo_stops_before_any_dag_when_another_process_holds_its_connect_port(tmp_path):
    """``make demo`` over Spark Connect on a port another process holds: it stops with the server's error, runs
    no DAG (so never runs on, nor stops, someone else's server), and the port's holder is untouched."""
    wire = JavaTripwire(tmp_path / "wire")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {**wire.env(os.environ), "AIRFLOW_HOME": str(tmp_path / "airflow"),
               "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark_connect", "host": "sc://127.0.0.1",
                                                          "port": port})}
        demo = subprocess.run([sys.executable, "-m", "geneva_provider.demo", "dags", "--rows", "10"], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert demo.returncode == 1, demo.stdout[-2000:] + demo.stderr[-2000:]
        assert f"demo: port {port} on 127.0.0.1 is held by another process" in demo.stderr, demo.stderr[-2000:]
        # the way out names the Makefile's own knob (SPARK_CONN), with a port free now; make demo has no --port
        hint = re.search(r"run the demo on another port, e\.g\. make demo SPARK_CONN='(\{.*\})'$", demo.stderr, re.M)
        assert hint is not None and "--port" not in demo.stderr, demo.stderr[-2000:]
        suggested = json.loads(hint[1])
        assert suggested["conn_type"] == "spark_connect" and suggested["host"] == "sc://127.0.0.1"
        assert suggested["port"] != port and free_port_from(suggested["port"]) == suggested["port"]
        makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
        assert re.search(r"^SPARK_CONN \?= ", makefile, re.M)
        assert "AIRFLOW_CONN_SPARK_DEFAULT='$(SPARK_CONN)'" in makefile
        assert "Spark stages run over Spark Connect" not in demo.stdout and not (tmp_path / ".demo" / "logs").exists()
        assert wire.calls() == [] and java_descendants() == []
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = held.accept()
            conn.close()
