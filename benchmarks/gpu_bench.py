"""A "GPU-like" UDF on fake GPUs: one batch at a time per device, with and without a resource profile.

Why: a UDF that asks ``num_gpus=1`` has its tasks scheduled one per GPU (a Spark stage-level
resource profile), so a device never has two batches queued on it, and its model is loaded once
per (Python worker, device), not once per task.  Without the ask, Spark runs as many tasks as
there are cores, and the UDF has to pick a device itself: calls pile up on a device and wait.

The UDF (a batch UDF class): ``__init__`` "loads a model" (sleeps ``--load-seconds``) on
``gp.task_device()`` and counts the load; a call holds its device's file lock (one batch at a time
per device, as a GPU would compute them) for ``--ms-per-batch``.  Without a profile it picks the
device ``pid % devices``, as code that does not know its task's GPU would.  The GPUs are fake
(``GENEVA_FAKE_GPUS``) on ``local_session("local[C]", gpus=N)``: a ``local-cluster`` of C cores.
Each device count runs in its own process (one SparkContext per process); in the 2-device run the
same UDF also runs without a profile, side by side.

Per run it prints rows/s, model loads against (worker, device) pairs and Spark tasks, the most
calls that were inside the UDF on one device at once (waiting included: 1 when the scheduling
is right), and the seconds calls spent waiting for their device's lock.  Expect: 2 devices about
twice the rows/s of 1; loads = (worker, device) pairs, far fewer than tasks; the unprofiled run
with several calls per device at once and lock waits.

Run ``python benchmarks/gpu_bench.py [--rows 100000] [--ms-per-batch 200] [--batch-rows 2000]``
(about a minute: two ~12 s session starts and a few seconds of "GPU" work each).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import geneva_provider as gp

RESULT = "GPU-BENCH-RESULT "


def gpu_like_udf(name: str, events: str, ms_per_batch: float, load_seconds: float, devices: int,
                 profiled: bool) -> gp.UDF:
    """The UDF: a model load per instance, then one batch at a time per device (a file lock per address)."""
    asks = {"num_gpus": 1} if profiled else {}

    @gp.udf(data_type=pa.int64(), input_columns=["x"], name=name, **asks)
    class Embed:
        def __init__(self) -> None:
            self.device = gp.task_device()
            if self.device == "cpu":  # no profile, so no GPU of its own: a device per worker process
                self.device = f"cuda:{os.getpid() % devices}"
            time.sleep(load_seconds)  # the model's load, to self.device
            Path(events, f"load-{os.getpid()}-{self.device}-{time.time_ns()}").touch()

        def __call__(self, batch: pa.RecordBatch) -> pa.Array:
            import fcntl

            import pyarrow.compute as pc

            asked = time.time()
            with open(Path(events, f"lock-{self.device.replace(':', '')}"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # the device computes one batch at a time
                got = time.time()
                time.sleep(ms_per_batch / 1000)
                done = time.time()
            with open(Path(events, f"calls-{os.getpid()}.jsonl"), "a") as out:
                out.write(json.dumps({"device": self.device, "asked": asked, "got": got, "done": done,
                                      "pid": os.getpid()}) + "\n")
            return pc.multiply(batch["x"], 2)

    return Embed


def _double(x: int) -> int:
    return 2 * x


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def measure(db: gp.Connection, spark: object, args: argparse.Namespace, devices: int, profiled: bool,
            work: Path) -> dict:
    name = f"d{devices}_{'profiled' if profiled else 'plain'}"
    events = work / name
    events.mkdir()
    rows = args.rows
    tbl = db.create_table(name, pa.table({"x": pa.array(range(rows), pa.int64())}),
                          max_rows_per_file=max(rows // 8, 1))
    tbl.add_columns({"y": gpu_like_udf(name, str(events), args.ms_per_batch, args.load_seconds, devices,
                                       profiled)})
    tasks = args.tasks
    t = time.perf_counter()
    res = tbl.backfill("y", spark=spark, task_size=-(-rows // tasks), concurrency=tasks,
                       checkpoint_size=args.batch_rows, progress=False)
    seconds = time.perf_counter() - t
    assert res.rows_computed == rows and tbl.count_rows("y != x * 2 OR y IS NULL") == 0
    calls = [json.loads(line) for p in events.glob("calls-*.jsonl") for line in p.read_text().splitlines()]
    loads = [p.name.split("-") for p in events.glob("load-*")]
    by_device: dict[str, list[dict]] = {}
    for c in calls:
        by_device.setdefault(c["device"], []).append(c)
    return {
        "run": f"{devices} device{'s' if devices > 1 else ''}, {'num_gpus=1' if profiled else 'no profile'}",
        "seconds": seconds, "rows_per_s": rows / seconds, "tasks": tasks, "batches": len(calls),
        "loads": len(loads), "worker_device_pairs": len({(pid, dev) for _, pid, dev, _ in loads}),
        "workers": len({c["pid"] for c in calls}),
        "most_on_a_device": max(most_at_once([(c["asked"], c["done"]) for c in cs]) for cs in by_device.values()),
        "lock_wait_s": sum(c["got"] - c["asked"] for c in calls),
    }


def child(args: argparse.Namespace) -> None:
    from geneva_provider.stages import local_session

    work = Path(args.work)
    spark = local_session(f"local[{args.cores}]", gpus=args.child)
    spark.sparkContext.setLogLevel("ERROR")
    db = gp.connect(str(work / f"db{args.child}"))
    for asks in ({"num_gpus": 1}, {}):  # warm-up (Python workers, imports, the profile): not measured
        warm = db.create_table(f"warm{len(asks)}", pa.table({"x": pa.array(range(64), pa.int64())}),
                               max_rows_per_file=8)
        warm.add_columns({"y": gp.udf(data_type=pa.int64(), name=f"warm{len(asks)}", **asks)(_double)})
        warm.backfill("y", spark=spark, task_size=8, concurrency=8, progress=False)
    runs = [True] if args.child == 1 else [True, False]
    for profiled in runs:
        print(RESULT + json.dumps(measure(db, spark, args, args.child, profiled, work)), flush=True)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch-rows", type=int, default=2_000, help="rows per UDF call (checkpoint_size)")
    parser.add_argument("--ms-per-batch", type=float, default=200.0, help="a device's time per batch")
    parser.add_argument("--load-seconds", type=float, default=1.0, help="a model load's time")
    parser.add_argument("--tasks", type=int, default=16, help="Spark tasks (and partitions)")
    parser.add_argument("--cores", type=int, default=4, help="the local-cluster's cores")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args)
        return
    work = Path(tempfile.mkdtemp(prefix="geneva-gpu-bench-"))
    results = []
    try:
        for devices in (1, 2):
            env = {**os.environ, "GENEVA_FAKE_GPUS": ",".join(str(d) for d in range(devices))}
            command = [sys.executable, __file__, "--child", str(devices), "--work", str(work)] + [
                f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("child", "work")]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                sys.exit(f"the {devices}-device run failed:\n{done.stderr[-3000:]}")
            results += [json.loads(line[len(RESULT):]) for line in done.stdout.splitlines()
                        if line.startswith(RESULT)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.rows:,} rows in batches of {args.batch_rows:,}, {args.ms_per_batch:g} ms per batch on a device, "
          f"{args.load_seconds:g} s per model load, {args.tasks} Spark tasks on {args.cores} cores\n")
    header = (f"{'run':<26}{'seconds':>8}{'rows/s':>9}{'tasks':>6}{'workers':>8}{'loads':>6}{'(worker,dev)':>13}"
              f"{'most calls on a device':>24}{'lock wait s':>12}")
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['run']:<26}{r['seconds']:>8.1f}{r['rows_per_s']:>9,.0f}{r['tasks']:>6}{r['workers']:>8}"
              f"{r['loads']:>6}{r['worker_device_pairs']:>13}{r['most_on_a_device']:>24}{r['lock_wait_s']:>12.1f}")
    profiled = {r["run"].split(",")[0]: r for r in results if "num_gpus" in r["run"]}
    if len(profiled) == 2:
        speedup = profiled["2 devices"]["rows_per_s"] / profiled["1 device"]["rows_per_s"]
        print(f"\n2 devices / 1 device (num_gpus=1): {speedup:.2f}x rows/s")
    for r in results:
        if "num_gpus" in r["run"]:
            ok = r["most_on_a_device"] == 1 and r["loads"] == r["worker_device_pairs"]
            print(f"{'PASS' if ok else 'MISS'}  {r['run']}: one call per device at a time, one load per "
                  f"(worker, device) ({r['loads']} loads for {r['tasks']} tasks)")


if __name__ == "__main__":
    main()
