"""A long-lived local Spark Connect server for the embedded default, from the pyspark wheel alone.

``python -m geneva_provider.connect_server start`` starts it (bound to 127.0.0.1) and returns once
its process listens on the port; ``stop`` stops it; ``status`` says whether it runs, with its open
sessions and its Python worker processes.  Its pid, port and log live in ``--dir`` (default
``~/.geneva/connect``), so any shell can stop what another started.  ``start`` refuses a port that
another process holds (before starting a JVM), and fails -- with the log's last lines, leaving no
state behind -- when its server exits or never listens; ``status`` and ``stop`` act only on the
process ``start`` started (its pid and start time), never on whatever else listens on the port.
Airflow then reaches it through a ``spark_connect`` connection, e.g.
``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}'``,
and every Spark stage runs in the Airflow worker as a Connect client: no JVM starts per task.
``start --gpus N`` gives it N GPUs for UDFs that ask for them (``@udf(num_gpus=1)``): its master
becomes a ``local-cluster`` of the ``--master``'s cores whose executor finds the GPUs with the
script the package ships (nvidia-smi, or the addresses in ``GENEVA_FAKE_GPUS``), as
``local_session(gpus=N)`` does; ``status`` lists them.

The server is ``SparkConnectServer`` run by the wheel's ``spark-submit`` on ``local[*]``; its
Python workers run this interpreter, so they have the same packages as the Airflow worker, and
their daemon is :mod:`geneva_provider.worker_daemon`, so a released session's workers go with it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from geneva_provider.core.docstrings import plain_text
from geneva_provider.core.errors import InvalidArgumentError, ResourceUnavailableError
from geneva_provider.pipeline.spark.runner import LOCAL_JVM_OPTIONS, gpu_cluster, gpus_found

DEFAULT_PORT = 15002  # Spark Connect's own default port
DEFAULT_DIR = Path.home() / ".geneva" / "connect"
START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 30.0


class ConnectServerError(RuntimeError):
    """The local server could not start (its log's last lines say why) or could not be stopped."""


class PortTakenError(ConnectServerError):
    """Another process holds the port (found before any JVM starts); ``held`` says so without the way out, which
    depends on how the server was asked for (``--port`` here, ``SPARK_CONN`` for ``make demo``)."""

    def __init__(self, held: str, port: int) -> None:
        super().__init__(f"{held}: stop it, or start on another --port")
        self.held, self.port = held, port


class LocalConnectServer:
    """A Spark Connect server on 127.0.0.1:``port``; ``with LocalConnectServer() as server:`` starts and stops it.

    ``port=0`` picks a free port.  ``start()`` returns at once when this directory's server is
    already running.  ``conf`` adds Spark settings (``spark.executor.memory``...).  ``gpus=N`` runs it
    on a ``local-cluster`` of ``master``'s cores with N GPUs
    (see :func:`~geneva_provider.pipeline.spark.runner.gpu_cluster`).
    """

    def __init__(self, port: int = DEFAULT_PORT, *, master: str = "local[*]", directory: str | Path = DEFAULT_DIR,
                 conf: dict[str, str] | None = None, gpus: int | None = None) -> None:
        self.directory = Path(directory)
        self.port = port or _free_port()
        self.gpus = gpus
        if gpus is not None:
            master, conf = gpu_cluster(master, gpus, conf)
        self.master = master
        self.conf = conf or {}
        self.started_here = False  # True once start() launched the server (not found it running)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def _state_path(self) -> Path:
        return self.directory / "server.json"

    def _tracked(self) -> dict[str, Any] | None:
        """The state file's server if its pid is still the process ``start`` launched (same start time): a pid the
        system has since given to another process, or a state file without that identity, is not taken for it."""
        try:
            state = json.loads(self._state_path.read_text())
            started = _process_start(state["pid"])
            if started is None or started != state["started"]:
                return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return dict(state)

    def running(self) -> dict[str, Any] | None:
        """The running server's state (pid, port, url), or None when none runs from this directory: the process
        ``start`` launched is alive and itself listens on the port (whatever else may listen there)."""
        state = self._tracked()
        return state if state is not None and _listens(state["pid"], state["port"]) else None

    def start(self) -> str:
        """Starts the server (or finds it running) and returns its ``sc://`` URL once it accepts sessions.

        ConnectServerError, before any JVM starts, when another process holds the port; and, with the log's last
        lines, when the server exits (e.g. someone took the port meanwhile) or does not listen in time.
        """
        state = self.running()
        if state is not None:
            self.port = state["port"]
            return self.url
        if not _bindable(self.port):
            raise PortTakenError(f"port {self.port} on 127.0.0.1 is held by another process (not a Spark Connect "
                                 f"server started from {self.directory})", self.port)
        import pyspark

        addresses = self._check_gpus()
        home = Path(pyspark.__file__).parent
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.pyspark.python": sys.executable,
            "spark.driver.extraJavaOptions": LOCAL_JVM_OPTIONS,
            # A client that dies (a killed Airflow task) leaves its query running until the server
            # gives up waiting for it to reattach: keep that short, so a retry does not race it long.
            "spark.connect.execute.manager.detachedTimeout": "15s",
            "spark.connect.execute.manager.maintenanceInterval": "5s",
            # A job's session is kept open between its apply and write+commit tasks; one whose DAG
            # never reached write+commit is released after this long without a client.
            "spark.connect.session.manager.defaultSessionTimeout": "20m",
            **self.conf,
        }
        if conf["spark.pyspark.python"] == sys.executable:  # an interpreter with this package installed
            # Spark keeps a Python daemon per Connect session until the server stops; this one exits
            # when its session is released (see geneva_provider.worker_daemon).
            conf.setdefault("spark.python.daemon.module", "geneva_provider.worker_daemon")
        command = [str(home / "bin" / "spark-submit"), "--class",
                   "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", self.master,
                   "--name", "geneva-connect-server"]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        command.append("spark-internal")
        # Spark Connect runs Python workers with $PYSPARK_PYTHON, whatever spark.pyspark.python says.
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": conf["spark.pyspark.python"],
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        with open(self.log_path, "w") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.directory)
        self._state_path.unlink(missing_ok=True)  # a dead server's: none claims this one before it listens
        started = _process_start(proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        # Ready when OUR process listens on the port: another process that took the port meanwhile accepts
        # connections there too, while our JVM fails to bind it (BindException) and exits.
        while not _listens(proc.pid, self.port):
            code = proc.poll()
            if code is not None or time.monotonic() > deadline:
                _stop_group(proc.pid)
                why = (f"exited (code {code})" if code is not None
                       else f"did not listen within {START_TIMEOUT_SECONDS:.0f}s; stopped it")
                raise ConnectServerError(f"the Spark Connect server did not start on port {self.port}: it {why} "
                                         f"(log {self.log_path}):\n{self._log_tail()}")
            time.sleep(0.25)
        state = {"pid": proc.pid, "started": started, "port": self.port, "url": self.url, "master": self.master}
        if addresses is not None:
            state["gpus"] = addresses
        self._state_path.write_text(json.dumps(state))
        self.started_here = True
        return self.url

    def _check_gpus(self) -> list[str] | None:
        """The GPU addresses a ``gpus=N`` server's executor will get; ConnectServerError, before any JVM, when
        fewer than N are found."""
        if self.gpus is None:
            return None
        try:
            return gpus_found(self.gpus, f"--gpus {self.gpus}")
        except ResourceUnavailableError as exc:
            raise ConnectServerError(str(exc)) from None

    def status(self) -> dict[str, Any] | None:
        """The running server's state plus its open ``sessions`` and ``python_daemons`` / ``python_workers``.

        Sessions are counted from the server's log (opened, not yet released or expired); Python
        processes from the process tree under the server: one daemon per session that ran Python
        work, and the workers it forked.
        """
        state = self.running()
        if state is None:
            return None
        daemons, workers = python_processes(state["pid"])
        return {**state, "sessions": len(self.open_sessions()), "python_daemons": daemons,
                "python_workers": workers}

    def open_sessions(self) -> set[str]:
        """Ids of the sessions the server's log shows opened and not closed since it started."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return set()
        return set(_SESSION_SEEN.findall(text)) - set(_SESSION_CLOSED.findall(text))

    def stop(self) -> bool:
        """Stops this directory's server (the process ``start`` launched, listening or not); False when none was
        running.  A state file whose pid is no longer that process is removed, and nothing is signalled."""
        state = self._tracked()
        self._state_path.unlink(missing_ok=True)
        return state is not None and _stop_group(state["pid"])

    def _log_tail(self, lines: int = 30) -> str:
        """The log's last lines, after its first ERROR line and the one below it (the exception that stopped the
        server, e.g. ``java.net.BindException``, which its shutdown lines would push out of the tail)."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        first = next((i for i, line in enumerate(text) if " ERROR " in line), len(text))
        cause = text[first:min(first + 2, len(text) - lines)]
        return "\n".join([*cause, *(["..."] if cause else []), *text[-lines:]])

    def __enter__(self) -> LocalConnectServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started_here:
            self.stop()


_SESSION_SEEN = re.compile(r"sessionId: ([0-9a-f-]{36}) accessed")
_SESSION_CLOSED = re.compile(r"Closing session with userId: .*? and sessionId: ([0-9a-f-]{36})")


def python_processes(server_pid: int) -> tuple[int, int]:
    """``(daemons, workers)``: the server JVM's Python child processes and the workers they forked."""
    children: dict[int, list[int]] = {}
    python: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0]
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        if os.path.basename(argv0).startswith(b"python"):
            python.add(int(entry))
    daemons = [pid for pid in children.get(server_pid, []) if pid in python]
    workers = [pid for daemon in daemons for pid in children.get(daemon, []) if pid in python]
    return len(daemons), len(workers)


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, /proc/<pid>/stat): with the pid, it names one
    process, so a recorded pid that the system has given to another process is not taken for the server."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself holds a socket listening on TCP ``port``: one of the port's listening
    sockets (/proc/net/tcp, tcp6) is among its open files.  (The server's pid is its JVM: spark-submit execs it.)"""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl local_address rem_address st ... inode
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                sockets.add(f"socket:[{fields[9]}]")
    if not sockets:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                return True
        except OSError:
            continue
    return False


def free_port_from(port: int, tries: int = 100) -> int | None:
    """The first port from ``port`` on that 127.0.0.1 can bind now (None when none of ``tries`` can)."""
    return next((p for p in range(port, min(port + tries, 65536)) if _bindable(p)), None)


def _bindable(port: int) -> bool:
    """Whether 127.0.0.1:``port`` is free for the server, tried as its JVM binds it (SO_REUSEADDR, so a closed
    connection's TIME_WAIT does not count): False while any other socket listens on it or holds it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_group(pid: int) -> bool:
    """SIGTERM to the server's process group (JVM and Python workers), SIGKILL if it lingers."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        _reap(pid)
        time.sleep(0.2)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    """Collects the exit status when this process started the server (else it lingers as a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m geneva_provider.connect_server", description=plain_text(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"gRPC port on 127.0.0.1 ({DEFAULT_PORT})")
    parser.add_argument("--master", default="local[*]", help="Spark master of the server (local[*])")
    parser.add_argument("--dir", default=str(DEFAULT_DIR), help=f"state and log directory ({DEFAULT_DIR})")
    parser.add_argument("--gpus", type=int, default=None,
                        help="give the server's executor N GPUs for @udf(num_gpus=...) UDFs (a local-cluster "
                             "master of the --master's cores; GPUs found by nvidia-smi or GENEVA_FAKE_GPUS)")
    args = parser.parse_args(argv)
    try:
        server = LocalConnectServer(args.port, master=args.master, directory=args.dir,
                                    gpus=args.gpus if args.action == "start" else None)
    except InvalidArgumentError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.action == "start":
        already = server.running()
        started = time.perf_counter()
        try:
            url = server.start()
        except ConnectServerError as exc:
            print(exc, file=sys.stderr)
            return 1
        gpus = (server.running() or {}).get("gpus")
        print(f"Spark Connect server {'already running' if already else 'started'} at {url} "
              f"({time.perf_counter() - started:.1f}s; log {server.log_path})"
              + (f" with GPUs {', '.join(gpus)} on {server.master}" if gpus else ""))
    elif args.action == "stop":
        print("Spark Connect server stopped" if server.stop() else "no Spark Connect server was running")
    else:
        state = server.status()
        gpus = f"; GPUs {', '.join(state['gpus'])} on {state['master']}" if state and "gpus" in state else ""
        print(f"running at {state['url']} (pid {state['pid']}): {state['sessions']} open sessions, "
              f"{state['python_daemons']} Python daemons with {state['python_workers']} workers{gpus}"
              if state else "not running")
        return 0 if state else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
