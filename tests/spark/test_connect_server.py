"""``LocalConnectServer.start`` when another process takes its port while its JVM starts: ``start`` fails with
the server's log, leaves no state claiming a server and no JVM behind, and the other process keeps the port.

The JVM-free half (a port held before ``start``; ``status`` / ``stop`` on a pid that is another process) is in
tests/unit/test_connect_server.py.
"""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest


def _running_in(directory) -> list[str]:
    """The live processes whose working directory is ``directory`` (the server's JVM runs in its ``--dir``)."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cwd", "status"]):
        if proc.info["cwd"] == str(directory) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.info['pid']} {proc.info['name']}")
    return found


def test_start_fails_when_another_process_takes_the_port_while_the_server_starts(tmp_path, capsys):
    from geneva_provider.connect_server import ConnectServerError, LocalConnectServer, main

    server = LocalConnectServer(0, master="local[1]", directory=tmp_path / "connect")
    port = server.port
    with socket.socket() as holder:
        def take_the_port() -> None:
            """Binds the port once ``start`` has launched the JVM (it opens the server's log just before)."""
            while not server.log_path.exists():
                time.sleep(0.005)
            holder.bind(("127.0.0.1", port))
            holder.listen()

        taker = threading.Thread(target=take_the_port, daemon=True)
        taker.start()
        t0 = time.perf_counter()
        with pytest.raises(ConnectServerError) as failed:
            server.start()
        seconds = time.perf_counter() - t0
        taker.join(5)
        assert holder.getsockname() == ("127.0.0.1", port)  # the other process took the port during start
        message = str(failed.value)
        assert f"did not start on port {port}: it exited" in message, message
        assert "BindException" in message or "Address already in use" in message, message  # the log's tail
        assert seconds < 60  # it failed when its JVM exited, not at the start timeout
        assert not server.started_here and server.running() is None
        assert not (server.directory / "server.json").exists()
        assert _running_in(server.directory) == []  # no JVM of the failed start lingers
        capsys.readouterr()
        assert main(["status", "--dir", str(server.directory)]) == 3
        assert capsys.readouterr().out.strip() == "not running"
        # The port's holder is untouched: it still listens and accepts.
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = holder.accept()
            conn.close()
