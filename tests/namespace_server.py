"""``geneva-provider --db ROOT serve`` on a free port of 127.0.0.1, started and stopped by a test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa

from tests.s3_server import free_port

TOKEN = "serve-token-7f3e9a"


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class Server:
    """``geneva-provider --db root serve`` on a free port of 127.0.0.1; the token from ``env`` (GENEVA_SERVE_TOKEN)."""

    def __init__(self, root: Path, env: dict[str, str] | None = None, options: tuple[str, ...] = ()) -> None:
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "geneva_provider.cli", "--db", str(root), "serve", "--host", "127.0.0.1",
             "--port", str(self.port), *options], env=env or {**os.environ, "GENEVA_SERVE_TOKEN": TOKEN},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/v1/namespace/$/list", timeout=1)
            except urllib.error.HTTPError:
                return  # it answers (401 without a token)
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError(f"server did not start: {self.proc.communicate()[0]}") from None
                time.sleep(0.2)

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return self.proc.returncode, out
