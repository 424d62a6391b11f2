"""An S3-compatible server (moto) on 127.0.0.1 for object-store tests, started and stopped by the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """``with S3Server() as s3:`` -- a moto S3 server with one bucket; ``s3.storage_options`` reach it."""

    def __init__(self, bucket: str = "lake") -> None:
        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.storage_options = {"aws_endpoint": self.endpoint, "allow_http": "true", "aws_access_key_id": "test-key",
                                "aws_secret_access_key": "test-secret-4d2a", "aws_region": "us-east-1"}
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> S3Server:
        self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
                break
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.2)
        req = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
        urllib.request.urlopen(req, timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            self._proc.wait(timeout=30)
