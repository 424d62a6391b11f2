"""A throw-away Spark standalone cluster on 127.0.0.1 for tests: one master and N workers.

The pip ``pyspark`` wheel has no ``sbin/start-master.sh``, so every daemon is started with
``$SPARK_HOME/bin/spark-class <main class>``; ``spark-class`` execs java, so the ``Popen`` pid is the
JVM pid.  Each daemon runs in its own session (``start_new_session=True``), so its process group
holds it and the executor JVMs a worker launches; PySpark's Python daemon moves itself to a new
group (``os.setpgid(0, 0)``), so stopping also kills every recorded descendant by PID.

Every port is chosen at runtime (never 7077/8080/8081), the REST submission server (6066) is
disabled, and every listener binds 127.0.0.1.  Logs, worker dirs and scratch dirs live under the
directory given to the constructor.

:class:`ProcessWatcher` samples the process trees below some root PIDs while a job runs: which
processes existed (with parent and command line) and which TCP ports they listened on.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.class_archive import every_jvm

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"

MASTER_ALIVE = "I have been elected leader"
WORKER_READY = "Successfully registered with master"


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: all sockets are held open until every port is picked."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------
# /proc helpers (Linux only)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str
    start: int  # start time in clock ticks since boot: (pid, start) names a process despite PID reuse
    cmdline: str = ""


def read_proc(pid: int, with_cmdline: bool = False) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    cmdline = ""
    if with_cmdline:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            pass
    return Proc(pid=pid, ppid=int(rest[1]), pgid=int(rest[2]), state=rest[0], start=int(rest[19]),
                cmdline=cmdline.strip())


def all_procs() -> dict[int, Proc]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            p = read_proc(int(entry))
            if p is not None:
                out[p.pid] = p
    return out


def descendants(roots: set[int], table: dict[int, Proc] | None = None) -> set[int]:
    """PIDs of every process below ``roots`` (roots excluded)."""
    table = table if table is not None else all_procs()
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def is_alive(pid: int, start: int | None = None) -> bool:
    """True while the process runs (zombies count as gone); ``start`` guards against PID reuse."""
    p = read_proc(pid)
    return p is not None and p.state != "Z" and (start is None or p.start == start)


def _decode_addr(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    # /proc/net/tcp{,6} prints each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    addr = ipaddress.IPv6Address(raw)
    return str(addr.ipv4_mapped) if addr.ipv4_mapped else str(addr)


def tcp_listeners() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket in this network namespace."""
    out = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] != "0A":  # TCP_LISTEN
                continue
            addr, port = cols[1].split(":")
            out[int(cols[9])] = (_decode_addr(addr), int(port, 16))
    return out


def socket_inodes(pid: int) -> set[int]:
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    out.add(int(target[8:-1]))
    return out


def listeners_of(pids: set[int]) -> set[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket the given processes listen on."""
    listening = tcp_listeners()
    return {(pid, *listening[ino]) for pid in pids for ino in socket_inodes(pid) if ino in listening}


# ---------------------------------------------------------------------------------------------


@dataclass
class ProcessWatcher:
    """Samples, in a background thread, the processes below ``roots`` and their TCP listeners.

    ``seen`` maps (pid, start time) to the last :class:`Proc` observed (command line included),
    ``under`` maps (pid, start time) to the root it was found below, and ``listeners`` collects
    (pid, command line, address, port).  Use as a context manager around the job.
    """

    roots: dict[str, int]  # label -> root pid
    interval: float = 0.1
    seen: dict[tuple[int, int], Proc] = field(default_factory=dict)
    under: dict[tuple[int, int], str] = field(default_factory=dict)
    listeners: set[tuple[int, str, str, int]] = field(default_factory=set)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: BaseException | None = None

    def sample(self) -> None:
        table = all_procs()
        root_of = {pid: label for label, pid in self.roots.items()}
        pids = descendants(set(root_of), table) | {pid for pid in root_of if pid in table}
        for pid in pids:
            p = table[pid]
            key = (pid, p.start)
            # Re-read the command line every time: a fresh child shows its parent's until it execs.
            fresh = read_proc(pid, with_cmdline=True)
            if (fresh is not None and fresh.cmdline) or key not in self.seen:
                self.seen[key] = fresh if fresh is not None and fresh.start == p.start else p
            if key in self.under:
                continue
            # Label a process with its nearest root: the cluster daemons are themselves children of
            # the process that started them, so "nearest" keeps a worker's executors out of its label.
            up = pid
            while up not in root_of and up in table:
                up = table[up].ppid
            self.under[key] = root_of.get(up, "?")
        for pid, addr, port in listeners_of(pids):
            p = table[pid]
            self.listeners.add((pid, self.seen[(pid, p.start)].cmdline, addr, port))
        self.samples += 1

    def alive(self) -> list[Proc]:
        """Processes seen by this watcher that still run."""
        return [p for (pid, start), p in self.seen.items() if is_alive(pid, start)]

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(self.interval)
        except BaseException as exc:  # noqa: BLE001 - re-raised by __exit__ in the test thread
            self._error = exc

    def __enter__(self) -> ProcessWatcher:
        self._thread = threading.Thread(target=self._run, name="process-watcher", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise RuntimeError("process watcher failed") from self._error

    def ancestors(self, pid: int) -> list[Proc]:
        """The recorded chain pid, parent, grandparent ... (as far as it was observed)."""
        by_pid = {k[0]: v for k, v in self.seen.items()}
        chain = []
        while pid in by_pid and len(chain) < 64:
            chain.append(by_pid[pid])
            pid = by_pid[pid].ppid
        return chain


class StandaloneSpark:
    """A Spark standalone master plus ``workers`` workers on 127.0.0.1, started and stopped by PID.

    ``with StandaloneSpark(tmp_dir) as cluster: ... cluster.master_url ...``
    """

    def __init__(self, base_dir: str | os.PathLike[str], *, workers: int = 2, cores: int = 1,
                 memory: str = "1g", timeout: float = 120.0, stop_timeout: float = 30.0) -> None:
        self.base_dir = Path(base_dir)
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.timeout = timeout
        self.stop_timeout = stop_timeout
        self.log_dir = self.base_dir / "logs"
        self.work_root = self.base_dir / "work"
        self.local_dir = self.base_dir / "local"
        self.conf_dir = self.base_dir / "conf"
        self.master_port, self.master_ui_port, *ports = free_ports(2 + 2 * workers)
        self.worker_ports = ports[:workers]
        self.worker_ui_ports = ports[workers:]
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self._starts: dict[int, int] = {}  # pid -> start time of every daemon we launched
        self._logs: dict[int, Path] = {}
        self._files: list[IO[bytes]] = []
        self.watchers: list[ProcessWatcher] = []
        self.killed: list[Proc | None] = []  # stragglers stop() had to SIGKILL

    # -- paths --------------------------------------------------------------------------------

    @property
    def master_log(self) -> Path:
        return self.log_dir / "master.log"

    def worker_log(self, i: int) -> Path:
        return self.log_dir / f"worker{i}.log"

    def worker_dir(self, i: int) -> Path:
        """SPARK_WORKER_DIR of worker ``i``: holds ``app-*/<executor id>/{stdout,stderr}``."""
        return self.work_root / f"worker{i}"

    @property
    def pids(self) -> dict[str, int]:
        out = {f"worker{i}": p.pid for i, p in enumerate(self.workers, 1)}
        if self.master is not None:
            out["master"] = self.master.pid
        return out

    def watch(self, **extra_roots: int) -> ProcessWatcher:
        """A :class:`ProcessWatcher` over the cluster daemons (plus ``extra_roots``, e.g. the driver's parent).

        :meth:`stop` also checks that every cluster process it saw (executors included) is gone.
        """
        watcher = ProcessWatcher({**self.pids, **extra_roots})
        self.watchers.append(watcher)
        return watcher

    def env(self) -> dict[str, str]:
        # No spark-defaults.conf from elsewhere: the wheel's conf directory, which it does not have (so the
        # class path is the one the suite's class archive was made with, and the daemons and the executors
        # they launch map it: JAVA_TOOL_OPTIONS reaches both), else an empty one of the cluster's own.
        default_conf = Path(spark_home()) / "conf"
        return {
            **os.environ,
            "SPARK_HOME": spark_home(),
            "SPARK_CONF_DIR": str(self.conf_dir if default_conf.exists() else default_conf),
            **every_jvm(),
            "SPARK_LOG_DIR": str(self.log_dir),
            "SPARK_LOCAL_DIRS": str(self.local_dir),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1",  # advertise the IP, never a name that may resolve elsewhere
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    # -- start --------------------------------------------------------------------------------

    def _launch(self, name: str, args: list[str], log: Path, extra_env: dict[str, str] | None = None
                ) -> subprocess.Popen:
        out = open(log, "ab")  # closed in stop()
        self._files.append(out)
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), *args]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env={**self.env(), **(extra_env or {})}, cwd=self.base_dir,
                                start_new_session=True)
        info = read_proc(proc.pid)
        if info is not None:
            self._starts[proc.pid] = info.start
        self._logs[proc.pid] = log
        return proc

    def start(self) -> StandaloneSpark:
        for d in (self.log_dir, self.work_root, self.local_dir, self.conf_dir):
            d.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            self.master = self._launch("master", [
                MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.master_port),
                "--webui-port", str(self.master_ui_port)], self.master_log)
            self._wait_for(self.master, self.master_log, MASTER_ALIVE, t0)
            for i in range(1, self.n_workers + 1):
                wdir = self.worker_dir(i)
                wdir.mkdir(parents=True, exist_ok=True)
                self.workers.append(self._launch(f"worker{i}", [
                    WORKER_CLASS, self.master_url, "--host", "127.0.0.1",
                    "--port", str(self.worker_ports[i - 1]), "--webui-port", str(self.worker_ui_ports[i - 1]),
                    "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(wdir)],
                    self.worker_log(i), {"SPARK_WORKER_DIR": str(wdir)}))
            for i, proc in enumerate(self.workers, 1):
                self._wait_for(proc, self.worker_log(i), WORKER_READY, t0)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_for(self, proc: subprocess.Popen, log: Path, needle: str, t0: float) -> None:
        while True:
            if needle in log.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{log.stem} (pid {proc.pid}) exited with code {proc.returncode} before "
                                   f"logging {needle!r}:\n{self.log_tails()}")
            if time.monotonic() - t0 > self.timeout:
                raise TimeoutError(f"{log.stem} (pid {proc.pid}) did not log {needle!r} within "
                                   f"{self.timeout:.0f}s:\n{self.log_tails()}")
            time.sleep(0.2)

    def log_tails(self, lines: int = 30) -> str:
        logs = [self.master_log] + [self.worker_log(i) for i in range(1, self.n_workers + 1)]
        return "\n".join(f"--- {p.name} (last {lines} lines) ---\n{tail(p, lines)}" for p in logs if p.exists())

    # -- stop ---------------------------------------------------------------------------------

    def _ours(self, known: dict[int, int], groups: set[int]) -> dict[int, int]:
        """pid -> start time of every live cluster process: a member of one of the daemons' process
        groups (executors a worker launched, even orphaned ones), a process recorded in ``known``, or
        anything below those (PySpark's Python daemon moves itself to a group of its own)."""
        table = all_procs()
        roots = {pid for pid, p in table.items() if p.pgid in groups or known.get(pid) == p.start}
        return {pid: table[pid].start for pid in roots | descendants(roots, table) if table[pid].state != "Z"}

    def _terminate(self, procs: list[subprocess.Popen]) -> None:
        """SIGTERM to each daemon's process group (pgid == pid), wait, SIGKILL fallback."""
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def _sweep(self, known: dict[int, int], groups: set[int], grace: float = 10.0) -> dict[int, int]:
        """Waits for the cluster's remaining processes to exit, SIGKILLs those that do not (by PID,
        checking the start time), and returns whatever is still alive after that."""
        deadline = time.monotonic() + grace
        while (left := self._ours(known, groups)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid, start in left.items():
            if is_alive(pid, start):
                self.killed.append(read_proc(pid, with_cmdline=True))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while (left := self._ours(known, groups)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def stop(self) -> None:
        """Stops the workers (and their executors) first, then the master; raises if a process survives.

        An executor a worker launched while shutting down (the master reschedules the executors the
        first SIGTERM ended) can outlive its worker; the sweep kills such orphans and lists them in
        ``self.killed``.
        """
        worker_groups = {p.pid for p in self.workers}
        all_groups = worker_groups | ({self.master.pid} if self.master is not None else set())
        known: dict[int, int] = dict(self._starts)
        for watcher in self.watchers:
            known.update({pid: start for (pid, start) in watcher.seen
                          if watcher.under.get((pid, start)) in set(self.pids)})
        known.update(self._ours(known, all_groups))  # executors and Python daemons running now
        self._terminate(self.workers)
        left = self._sweep({p: s for p, s in known.items() if p != getattr(self.master, "pid", None)},
                           worker_groups)
        if self.master is not None:
            self._terminate([self.master])
        left.update(self._sweep(known, all_groups))
        for f in self._files:
            f.close()
        self._files.clear()
        if left:
            raise RuntimeError("processes of the standalone cluster survived stop(): "
                               f"{[read_proc(p, with_cmdline=True) for p in left]}")

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
