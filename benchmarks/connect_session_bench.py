"""What a job's first Spark Connect stage pays for its session: a new one against the worker's warm one.

Why this exists: issue 44 asked for a warm Spark Connect session per server, reused across runs.  A job's stages
now resume the worker's warm session (``geneva_provider.pipeline.spark.warm_sessions``) instead of opening one of
their own.  This measures what that saves, on a local Spark Connect server (``local[2]``) started here: each round
is a fresh client process (as an Airflow task is) that either opens a new session -- the package uploaded, the
probe job, a new Python daemon on the server importing pyarrow and lance -- or resumes the session the round
before left open, then runs one small ``mapInArrow`` job whose task imports lance and this package (as a stage's
tasks do), and leaves the session open.  Printed per round: the client's imports, the seconds to a ready session,
the seconds of the job, and the cores other processes used meanwhile.

Run ``python benchmarks/connect_session_bench.py [--rounds N]`` (default 3).  Needs Java.  It prints figures and
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from machine_load import LoadMeter
from report import ResultTable

from geneva_provider.connect_server import LocalConnectServer

CHILD = r'''
import json, sys, time
t0 = time.monotonic()
from geneva_provider.spark_apps.package import package_zip
from geneva_provider.pipeline.spark.connect import close_session, connect_session, resume_session
url, session_id, mode = sys.argv[1:4]
t1 = time.monotonic()
pyfiles = [package_zip()]
if mode == "new":
    spark = connect_session(url, pyfiles=pyfiles, session_id=session_id)
else:
    spark, _ = resume_session(url, session_id, pyfiles=pyfiles, tag="bench")
t2 = time.monotonic()

def task(batches):
    import lance  # noqa: F401 - what a stage's task imports
    import geneva_provider.pipeline.stages.apply  # noqa: F401
    yield from batches

spark.range(8, numPartitions=2).mapInArrow(task, "id long").count()
t3 = time.monotonic()
close_session(spark, keep=True)
print(json.dumps({"imports": t1 - t0, "session": t2 - t1, "job": t3 - t2}))
'''


def run(url: str, session_id: str, mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, url, session_id, mode], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    table = ResultTable("round", "session", "client imports s", "session ready s", "first job s", "others' cores")
    seen: dict[str, list[tuple[float, float]]] = {"new": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalConnectServer(port=0, master="local[2]", directory=tmp)
        url = server.start()
        try:
            run(url, str(uuid.uuid4()), "new")  # the server's JVM warmed once, outside the timings
            for number in range(1, args.rounds + 1):
                session_id = str(uuid.uuid4())
                for mode, kind in (("new", "new"), ("resume", "warm")):
                    meter, started = LoadMeter(), time.monotonic()
                    got = run(url, session_id, mode)
                    load = meter.load(time.monotonic() - started)
                    seen[kind].append((got["session"], got["job"]))
                    table.add(str(number), kind, f"{got['imports']:.2f}", f"{got['session']:.2f}",
                              f"{got['job']:.2f}", "n/a" if load is None else f"{load.other_cores:.2f}")
        finally:
            server.stop()
    for kind, values in seen.items():
        table.add("median", kind, "", f"{statistics.median(v[0] for v in values):.2f}",
                  f"{statistics.median(v[1] for v in values):.2f}", "")
    table.show()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
