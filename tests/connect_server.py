"""A Spark Connect server on 127.0.0.1 from the pyspark wheel alone, started and stopped by the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.s3_server import free_port


class ConnectServer:
    """``with ConnectServer() as server:`` -- ``server.url`` is ``sc://127.0.0.1:<port>``; its log on failure."""

    def __init__(self, master: str = "local[2]") -> None:
        import pyspark

        self.master = master
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.home = str(Path(pyspark.__file__).parent)
        self.log = Path(tempfile.mkdtemp(prefix="geneva-connect-")) / "server.log"
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> ConnectServer:
        env = {**os.environ, "SPARK_HOME": self.home, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        command = [os.path.join(self.home, "bin", "spark-submit"), "--class",
                   "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", self.master,
                   "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                   "--conf", f"spark.connect.grpc.binding.port={self.port}",
                   "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
                   "--conf", "spark.ui.enabled=false", "--conf", f"spark.pyspark.python={sys.executable}",
                   "spark-internal"]
        with open(self.log, "w") as out:
            self._proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"Spark Connect server did not start:\n{self.log.read_text()[-3000:]}"
                                       ) from None
                time.sleep(0.5)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=30)
