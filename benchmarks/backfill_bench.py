"""Backfill benchmark: what a Spark backfill costs next to doing the same work in one process.

Why this exists: ``Table.backfill`` pays for Spark (task scheduling, Python workers) and for
checkpointing every range before it writes and commits.  These figures answer three questions,
on one machine in one run:

1. Overhead on cheap work: a vectorised x*2 over 10M rows (20 fragments) through ``tbl.backfill``
   on a warm ``local[2]`` session, against pylance's single-process ``add_columns`` with a
   ``batch_udf``, in rotated rounds.  Target: backfill at most 1.1x pylance's time (median ratio).
2. Parallel gain on expensive work: a pure-Python scalar UDF costing ~200 us per row over 100k
   rows, against a plain Python loop in one process.  Target: speedup of at least 1.8x on 2 cores.
3. Driver memory stays flat: the Python driver's peak RSS for a 10M-row backfill is within 20% of
   a 1M-row one (no table data passes through the driver).  Each run is a fresh subprocess so
   ``ru_maxrss`` is per run; it counts the Python driver only, not the JVM or the Python workers.
   These runs go first, while this process is small, because a child's ``ru_maxrss`` starts at
   its spawner's peak RSS on Linux.

Every timing also reports how many cores other processes used meanwhile (from /proc): on a shared
machine that load, not the code, can decide whether a target is met.

Run ``python benchmarks/backfill_bench.py`` (``--quick`` for a smoke run with 10x smaller sizes, ``--only scalar``
for one part).
This prints figures; it is not a test and asserts nothing beyond the correctness of the results.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from machine_load import LoadMeter, MachineLoad

import geneva_provider as gp
from geneva_provider.stages import local_session

MASTER = "local[2]"
SPARK_CONF = {"spark.ui.showConsoleProgress": "false"}
TARGET_UDF_SECONDS = 200e-6
SCALAR_ROUNDS = 3
PARTS = ("memory", "vectorised", "scalar", "warm")
VEC_RATIO_TARGET = 1.1
VEC_ROUNDS = 3
WARM_ROUNDS = 3
WARM_FIRST_TARGET = 0.3  # seconds, issue 44
WARM_INCR_TARGET = 0.15
WARM_NOOP_TARGET = 0.02
SCALAR_SPEEDUP_TARGET = 1.8
MEMORY_GROWTH_TARGET = 0.20
OTHER_LOAD_WARNING = 0.25  # cores used by other processes during a timed phase
RESULT_MARK = "DRIVER_MEMORY_RESULT "


# ---------------------------------------------------------------------- UDFs
@gp.udf(data_type=pa.int64(), input_columns=["x"])
def double_vec(x: pa.Array) -> pa.Array:
    """The cheap, vectorised (array) UDF."""
    return pc.multiply(x, 2)


def burn(x: int, iters: int) -> int:
    """Pure-Python busy work: ``iters`` rounds of integer arithmetic, deterministic in ``x``."""
    acc = x
    for i in range(iters):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def make_burn_udf(iters: int) -> gp.UDF:
    """A scalar UDF calling :func:`burn` with a calibrated ``iters`` (captured by value when pickled)."""

    def burn_row(x: int) -> int:
        return burn(x, iters)

    return gp.udf(burn_row, data_type=pa.int64(), input_columns=["x"])


def calibrate(target_seconds: float) -> tuple[int, float]:
    """Iterations of :func:`burn` that take ``target_seconds`` per call, and the measured per-call cost.

    Uses the median of several ~0.2 s runs: sustained speed, not the best burst.
    """

    def per_call(iters: int, calls: int) -> float:
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            for x in range(calls):
                burn(x, iters)
            runs.append((time.perf_counter() - t) / calls)
        return statistics.median(runs)

    probe = 2_000
    iters = max(1, round(probe * target_seconds / per_call(probe, 200)))
    return iters, per_call(iters, 1_000)


def burn_all(xs: list[int], iters: int) -> list[int]:
    """The plain-Python loop over many rows (what one process of the no-Spark reference runs)."""
    return [burn(x, iters) for x in xs]


# ---------------------------------------------------------------------- measuring
@dataclass
class Timing(MachineLoad):
    """One timed call, with how busy the rest of the machine was meanwhile (Linux /proc; else None)."""

    wall: float
    cpu: float  # this Python process


def timed(fn: Callable[[], Any]) -> tuple[Any, Timing]:
    """Runs ``fn``; returns its result and a :class:`Timing`."""
    meter = LoadMeter()
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    timing = Timing(wall=time.perf_counter() - t, cpu=time.process_time() - c)
    timing.take(meter.load(timing.wall))
    return out, timing


# ---------------------------------------------------------------------- report
@dataclass
class Report:
    """Figures (name, value, unit) and target checks, printed as tables at the end."""

    figures: list[tuple[str, str, str]] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    busiest: tuple[float, str] | None = None  # the most other-process load seen during a timing

    def add(self, name: str, value: float | int | str, unit: str = "", fmt: str = ".3f") -> None:
        text = format(value, fmt) if isinstance(value, float) else (f"{value:,}" if isinstance(value, int) else value)
        self.figures.append((name, text, unit))
        print(f"  {name}: {text} {unit}".rstrip(), flush=True)

    def add_timing(self, name: str, timing: Timing) -> None:
        """The wall time, plus the load other processes put on the machine meanwhile."""
        self.add(f"{name} wall", timing.wall, "s")
        self.add(f"{name} machine load", timing.load_text())
        if timing.other_cores is not None and (self.busiest is None or timing.other_cores > self.busiest[0]):
            self.busiest = (timing.other_cores, name)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append((name, ok, detail))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def print(self) -> None:
        if self.busiest is not None and self.busiest[0] >= OTHER_LOAD_WARNING:
            self.note(f"LOAD: other processes used up to {self.busiest[0]:.2f} of {os.cpu_count()} cores during a "
                      f"timed phase ({self.busiest[1]}); timings under such load are distorted.")
        w_name = max(len(n) for n, _, _ in self.figures)
        w_val = max(len(v) for _, v, _ in self.figures)
        print("\n" + "=" * 100)
        print("FIGURES")
        print("-" * 100)
        for name, value, unit in self.figures:
            print(f"{name:<{w_name}}  {value:>{w_val}}  {unit}".rstrip())
        print("-" * 100)
        print("TARGETS")
        for name, ok, detail in self.checks:
            print(f"{'PASS' if ok else 'MISS'}  {name}: {detail}")
        if self.notes:
            print("-" * 100)
            print("NOTES")
            for text in self.notes:
                print(f"- {text}")
        print("=" * 100, flush=True)


def int_table(rows: int) -> pa.Table:
    """A table with one int64 column ``x`` = 0, 1, ..., rows - 1."""
    return pa.table({"x": np.arange(rows, dtype=np.int64)})


def new_session() -> Any:
    """The benchmark's ``local[2]`` session, without console progress bars or INFO logs."""
    spark = local_session(MASTER, app_name="geneva-bench", conf=SPARK_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def fmt_stages(seconds: dict[str, float]) -> str:
    """The unit column for a BackfillResult's stage seconds: "s (plan 0.01, apply 1.80, ...)"."""
    return "s (" + ", ".join(f"{k} {v:.2f}" for k, v in seconds.items() if k != "total") + ")"


def loadavg() -> str:
    """The 1/5/15-minute load averages, as ``uptime`` shows them."""
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


# ---------------------------------------------------------------------- benchmark parts
def warm_up(db: gp.Connection, spark: Any, report: Report) -> None:
    """A tiny backfill over 2 fragments, so the JVM, both Python workers and their imports are warm."""
    tbl = db.create_table("warmup", int_table(2_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": double_vec})
    _, t = timed(lambda: tbl.backfill("y", spark=spark))
    report.add_timing("warm-up backfill (2k rows, 2 fragments)", t)


def vectorised(db: gp.Connection, spark: Any, rows: int, frag_rows: int, rounds: int, report: Report) -> None:
    """Part 1: cheap array UDF, tbl.backfill vs pylance add_columns(batch_udf) in one process.

    ``rounds`` rounds, each on a new pair of tables, alternating which side runs first (the first pays for
    the machine's warming up: page cache, CPU frequency); the target is judged on the median ratio.
    """
    fragments = -(-rows // frag_rows)
    print(f"\n[vectorised x*2] {rows:,} rows in {fragments} fragments, {rounds} rounds", flush=True)

    @lance.batch_udf(output_schema=pa.schema([pa.field("y2", pa.int64())]))
    def lance_double(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch([pc.multiply(batch.column("x"), 2)], names=["y2"])

    ratios = []
    for r in range(rounds):
        data = int_table(rows)
        tbl = db.create_table(f"vec{r}", data, max_rows_per_file=frag_rows)
        copy = db.create_table(f"vec{r}_lance", data, max_rows_per_file=frag_rows)
        del data
        tbl.add_columns({"y": double_vec})
        ds = lance.dataset(copy.uri)
        run_lance = lambda ds=ds: ds.add_columns(lance_double, read_columns=["x"])  # noqa: E731
        run_geneva = lambda tbl=tbl: tbl.backfill("y", spark=spark)  # noqa: E731
        if r % 2 == 0:
            _, lt = timed(run_lance)
            res, bt = timed(run_geneva)
        else:
            res, bt = timed(run_geneva)
            _, lt = timed(run_lance)

        got = tbl.to_arrow(columns=["x", "y"])
        ok = (got.num_rows == rows and res.rows_computed == rows and got.column("y").null_count == 0
              and pc.all(pc.equal(got.column("y"), pc.multiply(got.column("x"), 2))).as_py())
        del got
        ref = lance.dataset(copy.uri).to_table(columns=["x", "y2"])
        lance_ok = ref.num_rows == rows and pc.all(pc.equal(ref.column("y2"), pc.multiply(ref.column("x"), 2))).as_py()
        del ref
        if not (ok and lance_ok):
            raise SystemExit(f"vectorised backfill gave wrong results (geneva ok={ok}, lance ok={lance_ok})")

        ratios.append(bt.wall / lt.wall)
        first = "pylance" if r % 2 == 0 else "backfill"
        label = f"vec {rows:,} rows, round {r + 1} ({first} first)"
        report.add_timing(f"{label}: pylance add_columns", lt)
        report.add(f"{label}: pylance add_columns CPU (its process, all threads)", lt.cpu, "s")
        report.add_timing(f"{label}: tbl.backfill ({MASTER}, warm)", bt)
        report.add(f"{label}: tbl.backfill stage seconds", res.seconds.get("total", 0.0), fmt_stages(res.seconds))
        if bt.tree_cpu is not None:
            report.add(f"{label}: tbl.backfill CPU (driver + JVM + workers)", bt.tree_cpu, "s")
        speeds = f"{rows / lt.wall / 1e6:.2f} / {rows / bt.wall / 1e6:.2f}"
        report.add(f"{label}: throughput pylance / backfill", speeds, "M rows/s")
        report.add(f"{label}: ratio backfill / pylance", ratios[-1], "x", ".2f")
    ratio = statistics.median(ratios)
    report.add(f"vec {rows:,} rows: result check (y == 2*x, all rows, no NULLs, every round)", "OK")
    report.add(f"vec {rows:,} rows: median ratio backfill / pylance", ratio, "x", ".2f")
    report.check(f"vectorised {rows:,} rows: backfill / pylance add_columns <= {VEC_RATIO_TARGET:g} (median of "
                 f"{rounds} rounds)", ratio <= VEC_RATIO_TARGET, " / ".join(f"{x:.2f}x" for x in ratios))


def warm(db: gp.Connection, spark: Any, rows: int, fragments: int, rounds: int, report: Report) -> None:
    """Part 4: the fixed cost of a job on a warm session (issue 44): first backfill, +10 % incremental, no-op.

    Each round makes a new table of ``rows`` rows in ``fragments`` fragments, backfills the vectorised x*2,
    appends 10 % more rows (one fragment) and backfills again, then backfills with nothing to do.  Beside
    each, in the same round, pylance's own reference on a copy: ``add_columns`` of the same function over
    the same fragments, and for the increment the append itself with the column computed in it (what one
    does without a backfill; pylance has no incremental ``add_columns``).  Round 1's first backfill meets a
    UDF this process has measured only on the warm-up table; the later rounds' meet one measured on a table
    of the size.  Targets on the medians: first <= 0.3 s, +10 % <= 0.15 s, no-op <= 0.02 s.
    """
    print(f"\n[warm] {rows:,} rows in {fragments} fragments, +10 %, no-op; {rounds} rounds", flush=True)
    frag_rows = -(-rows // fragments)

    @lance.batch_udf(output_schema=pa.schema([pa.field("y", pa.int64())]))
    def lance_double(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch([pc.multiply(batch.column("x"), 2)], names=["y"])

    runs: dict[str, list[float]] = {"first": [], "+10 %": [], "no-op": [], "pylance add_columns": [],
                                    "pylance append with y": []}
    rows_line = []
    for r in range(rounds):
        data, more = int_table(rows), pa.table({"x": np.arange(rows, rows + rows // 10, dtype=np.int64)})
        tbl = db.create_table(f"warm{r}", data, max_rows_per_file=frag_rows)
        copy = db.create_table(f"warm{r}_lance", data, max_rows_per_file=frag_rows)
        tbl.add_columns({"y": double_vec})
        first, ft = timed(lambda tbl=tbl: tbl.backfill("y", spark=spark))
        _, lt = timed(lambda copy=copy: lance.dataset(copy.uri).add_columns(lance_double, read_columns=["x"]))
        tbl.add(more)
        incr, it = timed(lambda tbl=tbl: tbl.backfill("y", spark=spark))
        with_y = more.append_column("y", pc.multiply(more.column("x"), 2))
        _, at = timed(lambda copy=copy, t=with_y: lance.write_dataset(t, copy.uri, mode="append"))
        noop, nt = timed(lambda tbl=tbl: tbl.backfill("y", spark=spark))
        total = rows + rows // 10
        got = tbl.to_arrow(columns=["x", "y"])
        ok = (got.num_rows == total and first.rows_computed == rows and incr.rows_computed == rows // 10
              and noop.rows_computed == 0 and got.column("y").null_count == 0
              and pc.all(pc.equal(got.column("y"), pc.multiply(got.column("x"), 2))).as_py())
        tbl.dataset().validate()
        if not ok:
            raise SystemExit("warm backfills gave wrong results")
        for name, t in (("first", ft), ("+10 %", it), ("no-op", nt), ("pylance add_columns", lt),
                        ("pylance append with y", at)):
            runs[name].append(t.wall)
        label = f"warm round {r + 1}"
        report.add_timing(f"{label}: first backfill", ft)
        report.add(f"{label}: first backfill stage seconds", first.seconds.get("total", 0.0), fmt_stages(first.seconds))
        report.add_timing(f"{label}: +10 % backfill", it)
        report.add(f"{label}: +10 % backfill stage seconds", incr.seconds.get("total", 0.0), fmt_stages(incr.seconds))
        report.add_timing(f"{label}: no-op backfill", nt)
        report.add(f"{label}: pylance add_columns / append with y", f"{lt.wall:.3f} / {at.wall:.3f}", "s")
        rows_line.append(f"{r + 1:>5}  {ft.wall:8.3f}  {it.wall:8.3f}  {nt.wall:8.3f}  {lt.wall:12.3f}  {at.wall:12.3f}"
                         f"  {ft.load_text()}")
    print("\nround  first s  +10 % s  no-op s  pylance add s  pylance app s  machine load (first backfill)")
    print("\n".join(rows_line), flush=True)
    med = {name: statistics.median(v) for name, v in runs.items()}
    report.add("warm: medians first / +10 % / no-op / pylance add_columns / pylance append with y",
               " / ".join(f"{med[n]:.3f}" for n in runs), "s")
    for name, target in (("first", WARM_FIRST_TARGET), ("+10 %", WARM_INCR_TARGET), ("no-op", WARM_NOOP_TARGET)):
        report.check(f"warm {rows:,} rows in {fragments} fragments: {name} backfill <= {target:g} s "
                     f"(median of {rounds})", med[name] <= target, " / ".join(f"{x:.3f} s" for x in runs[name]))


def scalar(db: gp.Connection, spark: Any, rows: int, fragments: int, rounds: int, report: Report) -> None:
    """Part 2: ~200 us/row pure-Python scalar UDF, tbl.backfill (default options) vs a single-process loop.

    Also runs the same loop split over 2 plain processes (no Spark): the speedup this machine
    allows at all, since a shared VM's 2 cores rarely give a clean 2x.  The three runs alternate
    over ``rounds`` rounds, in a rotated order, and the target is judged on the median of the
    per-round speedups: the machine's speed drifts by more than the effect being measured.
    """
    iters, per_call = calibrate(TARGET_UDF_SECONDS)
    report.add("scalar UDF: busy-loop iterations per call", iters)
    report.add("scalar UDF: calibrated cost per call (median of 5 runs)", per_call * 1e6, "us", ".1f")
    frag_rows = -(-rows // fragments)
    print(f"\n[scalar ~{per_call * 1e6:.0f} us/row] {rows:,} rows in {fragments} fragments, default backfill "
          f"options, {rounds} rounds", flush=True)
    fn = make_burn_udf(iters)
    data = int_table(rows)
    xs = data.column("x").to_pylist()
    halves = [xs[: rows // 2], xs[rows // 2:]]
    expected = pa.array([fn.func(x) for x in xs[:1_000]], pa.int64())

    def single_process() -> pa.Array:
        return pa.array([fn.func(x) for x in xs], pa.int64())

    def backfill(table: gp.Table) -> Callable[[], gp.BackfillResult]:
        return lambda: table.backfill("y", spark=spark)

    label = f"scalar {rows:,} rows"
    speedups, ceilings, rel = [], [], []
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(burn_all, [[0], [0]], [1, 1]))  # start both processes before timing
        for r in range(rounds):
            tbl = db.create_table(f"scalar_{r}", data, max_rows_per_file=frag_rows)
            tbl.add_columns({"y": fn})
            runs: dict[str, Callable[[], Any]] = {
                "single": single_process,
                "two": lambda: [v for part in pool.map(burn_all, halves, [iters, iters]) for v in part],
                "backfill": backfill(tbl),
            }
            order = list(runs)[r % 3:] + list(runs)[: r % 3]
            out, t = {}, {}
            for name in order:
                out[name], t[name] = timed(runs[name])
            got = tbl.to_arrow(columns=["y"]).column("y").combine_chunks()
            if (out["backfill"].rows_computed != rows or not got.equals(out["single"])
                    or out["two"] != out["single"].to_pylist() or not got.slice(0, 1_000).equals(expected)):
                raise SystemExit(f"round {r + 1}: scalar results disagree (backfill, 1 and 2 processes)")
            speedups.append(t["single"].wall / t["backfill"].wall)
            ceilings.append(t["single"].wall / t["two"].wall)
            rel.append(t["backfill"].wall / t["two"].wall)
            res = out["backfill"]
            name = f"{label} round {r + 1} ({', '.join(order)})"
            report.add_timing(f"{name}: single-process loop", t["single"])
            report.add_timing(f"{name}: same loop in 2 plain processes (no Spark)", t["two"])
            report.add_timing(f"{name}: tbl.backfill ({MASTER}, warm)", t["backfill"])
            report.add(f"{name}: tbl.backfill stage seconds", res.seconds.get("total", 0.0), fmt_stages(res.seconds))
            if t["backfill"].tree_cpu is not None:
                report.add(f"{name}: CPU single loop / backfill (driver + JVM + workers)",
                           f"{t['single'].cpu:.2f} / {t['backfill'].tree_cpu:.2f}", "s")
            report.add(f"{name}: speedup loop / backfill (2-process ceiling)",
                       f"{speedups[-1]:.2f} ({ceilings[-1]:.2f})", "x")
    speedup, ceiling = statistics.median(speedups), statistics.median(ceilings)
    report.add(f"{label}: result check (equals the loop in 1 and 2 processes, every round)", "OK")
    report.add(f"{label}: median speedup loop / backfill", speedup, "x", ".2f")
    report.add(f"{label}: median 2-process ceiling (machine)", ceiling, "x", ".2f")
    report.add(f"{label}: median backfill wall / 2-process wall", statistics.median(rel), "x", ".2f")
    report.check(f"scalar {rows:,} rows: speedup >= {SCALAR_SPEEDUP_TARGET:g}x", speedup >= SCALAR_SPEEDUP_TARGET,
                 f"median {speedup:.2f}x over {rounds} rounds ({', '.join(f'{v:.2f}' for v in speedups)}); "
                 f"plain 2-process ceiling {ceiling:.2f}x")
    if ceiling < SCALAR_SPEEDUP_TARGET:
        report.note(f"Scalar: 2 plain processes were only {ceiling:.2f}x faster than one, below the "
                    f"{SCALAR_SPEEDUP_TARGET:g}x target: this machine did not offer 2 full cores during the run.")


def _run_self(*args: str) -> str:
    """Runs this script in a fresh Python process with ``args``; returns its stdout."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"{' '.join(args)} failed (exit code {proc.returncode})")
    return proc.stdout


def measure_driver_memory(db_uri: str, sizes: tuple[int, int], frag_rows: int) -> dict[int, dict[str, Any]]:
    """Part 3: one fresh driver process per backfill, started while this process is still small.

    Linux carries the spawning process's peak RSS over into the child's ``ru_maxrss`` (vfork and
    exec keep it), so the children run before this process loads any data or starts a JVM, and
    their tables are written by helper processes.  The child's VmHWM (which exec resets) is
    reported alongside as a cross-check.
    """
    print(f"\n[driver memory] {sizes[0]:,} vs {sizes[1]:,} rows, fresh driver process each", flush=True)
    runs = {}
    for rows in sizes:
        name = f"mem_{rows}"
        _run_self("--make-table", name, "--db", db_uri, "--rows", str(rows), "--frag-rows", str(frag_rows))
        spawner_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = _run_self("--driver-memory-run", name, "--db", db_uri)
        lines = [ln for ln in out.splitlines() if ln.startswith(RESULT_MARK)]
        if not lines:
            raise SystemExit(f"driver-memory run for {rows:,} rows printed no result:\n{out}")
        runs[rows] = {**json.loads(lines[-1][len(RESULT_MARK):]), "spawner_peak_kib": spawner_kib}
    return runs


def report_driver_memory(db: gp.Connection, runs: dict[int, dict[str, Any]], frag_rows: int, report: Report) -> None:
    """Checks the driver-memory backfills' results and reports their peak RSS."""
    for rows, run in runs.items():
        got = db.open_table(f"mem_{rows}").to_arrow(columns=["x", "y"])
        if run["rows_computed"] != rows or got.num_rows != rows or got.column("y").null_count or not pc.all(
                pc.equal(got.column("y"), pc.multiply(got.column("x"), 2))).as_py():
            raise SystemExit(f"driver-memory run for {rows:,} rows gave wrong results")
        del got
        label = f"mem {rows:,} rows ({-(-rows // frag_rows)} fragments)"
        mib = 1024
        report.add(f"{label}: Python driver ru_maxrss before backfill (session up)", run["rss_before_kib"] / mib,
                   "MiB", ".1f")
        report.add(f"{label}: Python driver peak RSS (ru_maxrss)", run["rss_peak_kib"] / mib, "MiB", ".1f")
        if run["hwm_kib"] is not None:
            report.add(f"{label}: Python driver peak RSS (VmHWM, cross-check)", run["hwm_kib"] / mib, "MiB", ".1f")
        report.add(f"{label}: spawning process peak RSS (ru_maxrss floor)", run["spawner_peak_kib"] / mib, "MiB",
                   ".1f")
        if run["jvm_peak_kib"] is not None:
            report.add(f"{label}: JVM peak RSS (VmHWM, info only)", run["jvm_peak_kib"] / mib, "MiB", ".1f")
        report.add_timing(f"{label}: backfill (fresh session)", Timing(**run["timing"]))
        report.add(f"{label}: result check (y == 2*x, all rows)", "OK")
    small, large = sorted(runs)
    peak = {rows: run["rss_peak_kib"] for rows, run in runs.items()}
    growth = peak[large] / peak[small] - 1
    report.add("mem: driver peak RSS (ru_maxrss) growth, large vs small", growth * 100, "%", "+.1f")
    report.note("Driver memory: ru_maxrss counts the Python driver process only; the Spark JVM and the Python "
                "workers are separate processes (the JVM's VmHWM is shown for information only).")
    if any(run["rss_peak_kib"] <= run["spawner_peak_kib"] for run in runs.values()):
        report.note("Driver memory: a child's ru_maxrss did not exceed its spawner's peak RSS, so it may show the "
                    "inherited floor rather than the child's own peak; compare VmHWM.")
    report.check(f"driver peak RSS {large:,} rows within {MEMORY_GROWTH_TARGET:.0%} of {small:,} rows",
                 abs(growth) <= MEMORY_GROWTH_TARGET,
                 f"{growth * 100:+.1f}% ({peak[large] / 1024:.1f} MiB vs {peak[small] / 1024:.1f} MiB, ru_maxrss of "
                 "the Python driver process only)")


def make_table(db_uri: str, name: str, rows: int, frag_rows: int) -> None:
    """Helper mode: writes a table of ``rows`` with the x*2 UDF column declared, not yet backfilled."""
    tbl = gp.connect(db_uri).create_table(name, int_table(rows), max_rows_per_file=frag_rows)
    tbl.add_columns({"y": double_vec})


def driver_memory_run(db_uri: str, name: str) -> None:
    """Child mode: backfill one prepared table on a new session; print the peak RSS figures as JSON."""
    spark = new_session()
    try:
        tbl = gp.connect(db_uri).open_table(name)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        res, t = timed(lambda: tbl.backfill("y", spark=spark))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = {"rows_computed": res.rows_computed, "timing": asdict(t), "rss_before_kib": before,
               "rss_peak_kib": peak, "hwm_kib": vm_hwm_kib(os.getpid()), "jvm_peak_kib": jvm_peak_kib(spark)}
    finally:
        spark.stop()
    print(RESULT_MARK + json.dumps(out), flush=True)


def vm_hwm_kib(pid: int) -> int | None:
    """A process's peak RSS since its last exec (VmHWM in /proc), or None where unavailable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def jvm_peak_kib(spark: Any) -> int | None:
    """The Spark JVM's peak RSS, or None where that is unavailable."""
    try:
        pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # noqa: BLE001 - an informational figure only: never fail the run for it
        return None
    return vm_hwm_kib(pid)


# ---------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1M / 10k rows instead of 10M / 100k")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only this part (repeatable)")
    parser.add_argument("--rounds", type=int, default=SCALAR_ROUNDS, help="alternating rounds of the scalar part")
    parser.add_argument("--vec-rounds", type=int, default=VEC_ROUNDS, help="alternating rounds of the vectorised part")
    # Internal modes, run in fresh processes by the driver-memory part.
    parser.add_argument("--driver-memory-run", metavar="TABLE", help=argparse.SUPPRESS)
    parser.add_argument("--make-table", metavar="TABLE", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--frag-rows", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.make_table:
        make_table(args.db, args.make_table, args.rows, args.frag_rows)
        return
    if args.driver_memory_run:
        driver_memory_run(args.db, args.driver_memory_run)
        return

    vec_rows = 1_000_000 if args.quick else 10_000_000
    vec_frag_rows = vec_rows // 20
    scalar_rows = 10_000 if args.quick else 100_000
    parts = args.only or PARTS
    report = Report()
    print(f"backfill benchmark{' (--quick)' if args.quick else ''}: {os.cpu_count()} CPUs, master {MASTER}, "
          f"pyspark {__import__('pyspark').__version__}, pylance {lance.__version__}", flush=True)
    report.add("load average (1/5/15 min) at start", loadavg())
    tmp = tempfile.mkdtemp(prefix="geneva-bench-")
    spark = None
    try:
        db = gp.connect(tmp)
        # First, while this process holds no data and no JVM (see measure_driver_memory).
        if "memory" in parts:
            mem_runs = measure_driver_memory(db.uri, (vec_rows // 10, vec_rows), vec_frag_rows)
        if {"vectorised", "scalar", "warm"} & set(parts):
            spark, t = timed(new_session)
            report.add_timing(f"session start: local_session('{MASTER}')", t)
            warm_up(db, spark, report)
            if "vectorised" in parts:
                vectorised(db, spark, vec_rows, vec_frag_rows, args.vec_rounds, report)
            if "scalar" in parts:
                scalar(db, spark, scalar_rows, 4, args.rounds, report)
            if "warm" in parts:
                warm(db, spark, vec_rows // 10, 10, WARM_ROUNDS, report)
            spark.stop()
            spark = None
        if "memory" in parts:
            report_driver_memory(db, mem_runs, vec_frag_rows, report)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report.add("load average (1/5/15 min) at end", loadavg())
    report.print()


if __name__ == "__main__":
    main()
