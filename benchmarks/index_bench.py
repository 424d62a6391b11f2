"""Index-build benchmark: the Spark IVF_PQ build beside pylance's single-process ``create_index``, in one run.

Why this exists (issue 43): the package builds a vector index as Spark tasks -- IVF centroids and a PQ codebook
trained once on the driver on a sample (``pipeline/indexes/training.py``), one segment per contiguous,
row-balanced fragment group encoded by a task (``segments.py``), the segments merged and committed once
(``build.py``) -- so that the encoding, which reads every row, runs on the cluster, and an append is indexed
add-only (``refresh_index``: only the new fragments, with the saved centroids and codebook).  This measures what
that costs against the obvious alternative, pylance's own ``create_index`` in one process with the same
parameters, and what an add-only refresh saves against a full rebuild.

The data: ``--rows`` (default 1,000,000) ``--dim``-d (128) float32 vectors drawn from ``CLUSTERS`` (256)
gaussian clusters (centres N(0, ``CENTRE_SCALE``²) per coordinate, unit noise; seeded), written as a Lance table of
``--fragments`` (20) fragments of equal rows (50,000 at the default size: a realistic layout, a few appends'
worth).  The same rows are written twice, one table per side, so neither index sees the other.  Queries: ``--queries``
(200) new points of the same mixture (another seed).  Ground truth: an exact scan in numpy -- squared L2
distances as ``|x|² - 2 x·q`` by a float32 matmul over blocks of 131,072 rows, the ``4k`` best per query kept,
then ranked again by exact float64 distances, so float32 rounding cannot reorder the top 10.

Both indexes: IVF_PQ, ``l2``, ``--partitions`` (256) partitions, ``--sub-vectors`` (16) sub-vectors of
``num_bits=8``, trained on the same sample sizes (pylance's ``sample_rate=256`` rows per partition / per code); IVF
k-means up to 50 iterations on both sides, run once by pylance and ``IVF_RESTARTS`` (3) times by the Spark build
(which keeps the centroids nearest to a sample of the rows), the PQ codebook's 50 in pylance and ``PQ_MAX_ITERS``
(15) in the Spark build (``training.py`` says why).  Both searched at ``k=10``, ``nprobes=--nprobes`` (20: at 256
partitions for 256 clusters, more probes found nothing more), ``refine_factor=--refine`` (50: these vectors'
neighbours are close together in all 128 dimensions, so PQ distances alone rank them poorly; at 10, recall@10 is
~0.55 on both sides), one query at a time through ``LanceDataset.to_table(nearest=...)`` on one opened dataset per
side (its index cache warm: every query runs once before the timed pass).  Figures, side by side:

1. build seconds (Spark: ``create_index(TableRef, IndexSpec.of(...), spark)`` on a warm ``local[2]`` session,
   default groups = the session's 2 cores; pylance: ``LanceDataset.create_index`` in this process, which uses
   every core through its own threads), recall@10 and the query p50 of each index, ``--rounds`` (3) times in
   alternating order (the Spark build first, or pylance's with ``--pylance-first``), each round a new index on
   each side: two trainings of the same index differ in recall@10 by up to ~0.02 (their random samples), so the
   targets are judged on the medians of the rounds: the Spark build at most ``BUILD_TARGET`` x pylance's seconds
   (aim ``BUILD_AIM``), its recall@10 at least pylance's - 0.01;
2. after appending 10 % more rows (new fragments of the same size), the add-only ``refresh_index`` against a full
   rebuild by the same Spark build (``replace=True``), with recall@10 after each (new ground truth over all
   rows); target: the refresh at most ``REFRESH_TARGET`` of the rebuild's seconds.

The Spark build's phases: plan + training (to the engine's 'trained' log line), its segment tasks' Spark job
(timed by a :class:`TimedRunner`), and the rest (merge of the segments, commit).
Every timing carries how busy the rest of the machine was (``machine_load.py``).

Run ``python benchmarks/index_bench.py`` (5 to 10 minutes at the default size on 2 cores; ``--rows 50000
--partitions 64 --rounds 1`` for a smoke run).  It prints figures; it asserts nothing beyond the indexes covering
every row.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import lance
import numpy as np
import pyarrow as pa
from machine_load import LoadMeter, MachineLoad
from report import ResultTable

from geneva_provider.core.contracts.index_models import IndexSpec
from geneva_provider.core.refs import TableRef
from geneva_provider.pipeline.indexes import create_index, index_stats, refresh_index
from geneva_provider.pipeline.indexes.training import IVF_RESTARTS, PQ_MAX_ITERS
from geneva_provider.pipeline.spark.task_runner import SparkRunner
from geneva_provider.stages import local_session

MASTER = "local[2]"
SPARK_CONF = {"spark.ui.showConsoleProgress": "false"}
CLUSTERS = 256
CENTRE_SCALE = 2.0
K = 10
BLOCK = 131_072  # rows per block of the exact scan
BUILD_TARGET = 1.0  # the Spark build at most this many times pylance's single call ...
BUILD_AIM = 0.8  # ... aiming for this on 2 cores
RECALL_SLACK = 0.01  # its recall@10 at least pylance's minus this
REFRESH_TARGET = 0.15  # the add-only refresh at most this share of a full rebuild


# ---------------------------------------------------------------------- the data
def centres(dim: int) -> np.ndarray:
    return np.random.default_rng(12345).normal(size=(CLUSTERS, dim)).astype(np.float32) * CENTRE_SCALE


def mixture(n: int, dim: int, seed: int) -> np.ndarray:
    """``n`` float32 points of the clustered mixture (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    return centres(dim)[rng.integers(0, CLUSTERS, n)] + rng.standard_normal((n, dim), dtype=np.float32)


def batches(start: int, n: int, dim: int, seed: int, rows_per_batch: int = 100_000) -> Iterator[pa.RecordBatch]:
    """Rows ``start .. start + n - 1`` (ids, vectors) in batches, each batch seeded by its position."""
    for i, lo in enumerate(range(0, n, rows_per_batch)):
        m = min(rows_per_batch, n - lo)
        x = mixture(m, dim, seed * 1_000_003 + i)
        yield pa.record_batch({"id": pa.array(np.arange(start + lo, start + lo + m), pa.int64()),
                               "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim)})


def schema(dim: int) -> pa.Schema:
    return pa.schema([("id", pa.int64()), ("vec", pa.list_(pa.float32(), dim))])


def write(uri: str, start: int, n: int, dim: int, seed: int, rows_per_fragment: int, mode: str = "create") -> None:
    reader = pa.RecordBatchReader.from_batches(schema(dim), batches(start, n, dim, seed))
    lance.write_dataset(reader, uri, mode=mode, max_rows_per_file=rows_per_fragment)


# ---------------------------------------------------------------------- ground truth and queries
def vectors_of(ds: lance.LanceDataset) -> tuple[np.ndarray, np.ndarray]:
    data = ds.to_table(columns=["id", "vec"])
    col = data.column("vec").combine_chunks()
    return data.column("id").to_numpy(), col.values.to_numpy().reshape(len(col), col.type.list_size)


def exact_top(ds: lance.LanceDataset, qs: np.ndarray, k: int = K) -> list[set[int]]:
    """The ids of each query's ``k`` nearest rows (squared L2) by an exact scan of every row."""
    ids, x = vectors_of(ds)
    keep = 4 * k
    cand_d = np.full((len(qs), 0), np.inf, np.float32)
    cand_i = np.zeros((len(qs), 0), np.int64)
    for lo in range(0, len(x), BLOCK):
        block = x[lo:lo + BLOCK]
        d = (block * block).sum(axis=1)[None, :] - 2.0 * (qs @ block.T)  # |q|² is the same for every row
        part = np.argpartition(d, min(keep, d.shape[1] - 1), axis=1)[:, :keep]
        cand_d = np.concatenate([cand_d, np.take_along_axis(d, part, axis=1)], axis=1)
        cand_i = np.concatenate([cand_i, part + lo], axis=1)
        best = np.argpartition(cand_d, min(keep, cand_d.shape[1] - 1), axis=1)[:, :keep]
        cand_d, cand_i = np.take_along_axis(cand_d, best, axis=1), np.take_along_axis(cand_i, best, axis=1)
    out = []
    for q, rows in zip(qs.astype(np.float64), cand_i, strict=True):
        exact = ((x[rows].astype(np.float64) - q) ** 2).sum(axis=1)
        out.append(set(ids[rows[np.argsort(exact, kind="stable")[:k]]].tolist()))
    return out


@dataclass
class Searched:
    recall: float
    p50_ms: float
    p90_ms: float


def search(ds: lance.LanceDataset, qs: np.ndarray, truth: list[set[int]], nprobes: int, refine: int) -> Searched:
    """Recall@10 and per-query latency at k=10: every query once to warm the index cache, then the timed pass."""
    def one(q: np.ndarray) -> set[int]:
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": K, "nprobes": nprobes, "refine_factor": refine},
                          columns=["id", "_distance"])
        return set(got.column("id").to_pylist())

    for q in qs:
        one(q)
    hits, times = 0, []
    for q, want in zip(qs, truth, strict=True):
        t = time.perf_counter()
        got = one(q)
        times.append(1000 * (time.perf_counter() - t))
        hits += len(got & want)
    times.sort()
    return Searched(hits / (K * len(qs)), statistics.median(times), times[int(0.9 * (len(times) - 1))])


# ---------------------------------------------------------------------- timing
@dataclass
class Timing(MachineLoad):
    wall: float
    phases: dict[str, float] = field(default_factory=dict)


class PhaseClock(logging.Handler):
    """The times of the index engine's log lines: where a Spark build's seconds went."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.marks: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.marks.append((time.perf_counter(), record.getMessage()))


CLOCK = PhaseClock()


def timed(fn: Callable[[], Any]) -> tuple[Any, Timing]:
    CLOCK.marks.clear()
    meter = LoadMeter()
    t0 = time.perf_counter()
    out = fn()
    timing = Timing(wall=time.perf_counter() - t0)
    timing.take(meter.load(timing.wall))
    trained = next((t for t, m in CLOCK.marks if ": trained " in m), None)
    if trained is not None:
        timing.phases["plan + training"] = trained - t0
    return out, timing


class TimedRunner(SparkRunner):
    """The package's Spark runner, keeping when each of its Spark jobs started and ended: the build's phases."""

    def __init__(self, spark: Any) -> None:
        super().__init__(spark)
        object.__setattr__(self, "jobs", [])  # (start, end) of each run_tasks

    def fresh(self) -> TimedRunner:
        self.jobs.clear()
        return self

    def run_tasks(self, tasks: Any, partition_fn: Any, **kwargs: Any) -> list[Any]:
        start = time.perf_counter()
        try:
            return super().run_tasks(tasks, partition_fn, **kwargs)
        finally:
            self.jobs.append((start, time.perf_counter()))

    def phases(self, timing: Timing) -> str:
        """Plan + training (to the engine's 'trained' line), the segment tasks' Spark job, the rest (the merge of
        the segments, the commit)."""
        parts = dict(timing.phases)
        if self.jobs:
            start, end = self.jobs[-1]
            parts["segment tasks"] = end - start
            parts["plan, merge, commit"] = timing.wall - sum(parts.values())
        return ", ".join(f"{k} {v:.1f} s" for k, v in parts.items())


# ---------------------------------------------------------------------- main
TABLE = ResultTable("run", "rows indexed", "build s", "recall@10", "p50 ms", "p90 ms", "machine load")


def row(label: str, rows: int, t: Timing, s: Searched | None) -> None:
    TABLE.add(label, f"{rows:,}", f"{t.wall:.1f}", f"{s.recall:.3f}" if s else "-", f"{s.p50_ms:.2f}" if s else "-",
              f"{s.p90_ms:.2f}" if s else "-", t.load_text())


def covers_all(ds: lance.LanceDataset, name: str, label: str) -> None:
    stats = index_stats(ds, name)
    if stats.num_unindexed_rows or stats.num_indexed_rows != ds.count_rows():
        raise SystemExit(f"{label}: the index covers {stats.num_indexed_rows:,} of {ds.count_rows():,} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--fragments", type=int, default=20, help="fragments of the table (equal rows)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=256, help="IVF partitions (num_partitions)")
    parser.add_argument("--sub-vectors", type=int, default=16, help="PQ sub-vectors (num_sub_vectors)")
    parser.add_argument("--nprobes", type=int, default=20)
    parser.add_argument("--refine", type=int, default=50, help="refine_factor")
    parser.add_argument("--rounds", type=int, default=3, help="builds of each side, in alternating order; the "
                        "targets are judged on the medians (two trainings' recall@10 differ by up to ~0.02)")
    parser.add_argument("--pylance-first", action="store_true", help="build pylance's index first in the first round")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    n, dim, extra = args.rows, args.dim, args.rows // 10
    per_fragment = -(-n // args.fragments)
    params = {"metric": "l2", "num_partitions": args.partitions, "num_sub_vectors": args.sub_vectors, "num_bits": 8}
    print(f"index benchmark: {n:,} x {dim}-d float32 ({CLUSTERS} clusters), {args.fragments} fragments of "
          f"{per_fragment:,} rows, +{extra:,} rows; IVF_PQ {params}; search k={K} nprobes={args.nprobes} "
          f"refine_factor={args.refine}; {args.queries} queries; IVF k-means runs: Spark build {IVF_RESTARTS}, "
          f"pylance 1; PQ k-means iterations: Spark build {PQ_MAX_ITERS}, pylance 50; {os.cpu_count()} CPUs, "
          f"master {MASTER}, pyspark "
          f"{__import__('pyspark').__version__}, pylance {lance.__version__}, load average "
          f"{' / '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    engine_log = logging.getLogger("geneva_provider.pipeline.indexes")
    engine_log.setLevel(logging.INFO)
    engine_log.addHandler(CLOCK)
    tmp = tempfile.mkdtemp(prefix="geneva-index-bench-")
    spark = None
    try:
        spark, t = timed(lambda: local_session(MASTER, app_name="geneva-index-bench", conf=SPARK_CONF))
        spark.sparkContext.setLogLevel("ERROR")
        print(f"session start: {t.wall:.1f} s", flush=True)
        runner = TimedRunner(spark)

        # Warm-up: the JVM, both Python workers and their lance imports, through the same build and search.
        warm = TableRef("warm", os.path.join(tmp, "warm.lance"))
        write(warm.uri, 0, 20_000, dim, 99, 5_000)
        create_index(warm, IndexSpec.of("vec", "IVF_PQ", **{**params, "num_partitions": 16}), runner)
        lance.dataset(os.path.join(tmp, "warm.lance")).create_index("vec", "IVF_PQ", name="w", **{
            **params, "num_partitions": 16})

        ours = TableRef("ours", os.path.join(tmp, "ours.lance"))
        theirs_uri = os.path.join(tmp, "theirs.lance")
        _, t = timed(lambda: [write(u, 0, n, dim, 1, per_fragment) for u in (ours.uri, theirs_uri)])
        print(f"tables written: {2 * n:,} rows in {t.wall:.1f} s ({len(lance.dataset(ours.uri).get_fragments())} "
              f"fragments each)", flush=True)
        qs = mixture(args.queries, dim, seed=777)
        truth, t = timed(lambda: exact_top(lance.dataset(ours.uri), qs))
        print(f"ground truth: exact scan of {n:,} rows for {len(qs)} queries in {t.wall:.1f} s", flush=True)

        spec = IndexSpec.of("vec", "IVF_PQ", **params)

        def spark_build(label: str) -> tuple[Timing, Searched]:
            result, t = timed(lambda: create_index(ours, spec, runner.fresh()))  # replace=True: a new index each round
            ds = lance.dataset(ours.uri)
            covers_all(ds, spec.index_name, "Spark build")
            s = search(ds, qs, truth, args.nprobes, args.refine)
            row(f"Spark build (local[2]){label}", n, t, s)
            print(f"    {result.segments_built} segment tasks ({len(result.segments_per_task)} groups), "
                  f"{result.segments_committed} segment committed; {runner.phases(t)}", flush=True)
            return t, s

        def pylance_build(label: str) -> tuple[Timing, Searched]:
            ds, t = timed(lambda: lance.dataset(theirs_uri).create_index("vec", "IVF_PQ", replace=True, **params))
            s = search(ds, qs, truth, args.nprobes, args.refine)
            row(f"pylance create_index (1 process){label}", n, t, s)
            return t, s

        rounds: list[tuple[Timing, Searched, Timing, Searched]] = []
        for r in range(args.rounds):
            pylance_first = (r % 2 == 1) != args.pylance_first
            label = f", round {r + 1}" if args.rounds > 1 else ""
            print(f"\n[build{label}: Spark tasks vs pylance's single call, {'pylance' if pylance_first else 'Spark'} "
                  "first]", flush=True)
            if pylance_first:
                (t_theirs, s_theirs), (t_ours, s_ours) = pylance_build(label), spark_build(label)
            else:
                (t_ours, s_ours), (t_theirs, s_theirs) = spark_build(label), pylance_build(label)
            rounds.append((t_ours, s_ours, t_theirs, s_theirs))

        print(f"\n[+10 %: {extra:,} rows appended]", flush=True)
        write(ours.uri, n, extra, dim, 2, per_fragment, mode="append")
        qs_truth = exact_top(lance.dataset(ours.uri), qs)
        refreshed, t_refresh = timed(lambda: refresh_index(ours, spec.index_name, runner.fresh()))
        ds_ours = lance.dataset(ours.uri)
        covers_all(ds_ours, spec.index_name, "add-only refresh")
        s_refresh = search(ds_ours, qs, qs_truth, args.nprobes, args.refine)
        row("Spark add-only refresh", extra, t_refresh, s_refresh)
        print(f"    fragments indexed {refreshed.fragments_indexed}, trained={refreshed.trained}, "
              f"{index_stats(ds_ours, spec.index_name).num_segments} segments now; "
              f"{runner.phases(t_refresh)}", flush=True)
        _, t_rebuild = timed(lambda: create_index(ours, spec.model_copy(update={"replace": True}), runner.fresh()))
        ds_ours = lance.dataset(ours.uri)
        covers_all(ds_ours, spec.index_name, "rebuild")
        s_rebuild = search(ds_ours, qs, qs_truth, args.nprobes, args.refine)
        row("Spark full rebuild (replace=True)", n + extra, t_rebuild, s_rebuild)
        print(f"    {runner.phases(t_rebuild)}", flush=True)
        ds_ours.validate()
        lance.dataset(theirs_uri).validate()

        TABLE.show()
        build = statistics.median(o.wall / t.wall for o, _, t, _ in rounds)
        ours_recall = statistics.median(s.recall for _, s, _, _ in rounds)
        theirs_recall = statistics.median(s.recall for _, _, _, s in rounds)
        gap = ours_recall - theirs_recall
        share = t_refresh.wall / t_rebuild.wall
        of = f" (medians of {len(rounds)} rounds)" if len(rounds) > 1 else ""
        print(f"build{of}: Spark / pylance = {build:.2f}x (target <= {BUILD_TARGET:.1f}x, aim {BUILD_AIM:.1f}x: "
              f"{'MET' if build <= BUILD_TARGET else 'NOT MET'}); recall@10 {ours_recall:.3f} vs "
              f"{theirs_recall:.3f}, difference {gap:+.3f} (target >= -{RECALL_SLACK}: "
              f"{'MET' if gap >= -RECALL_SLACK else 'NOT MET'}); query p50 "
              f"{statistics.median(s.p50_ms for _, s, _, _ in rounds):.2f} vs "
              f"{statistics.median(s.p50_ms for _, _, _, s in rounds):.2f} ms", flush=True)
        print(f"refresh: add-only {t_refresh.wall:.1f} s / full rebuild {t_rebuild.wall:.1f} s = {share:.1%} (target "
              f"<= {REFRESH_TARGET:.0%}: {'MET' if share <= REFRESH_TARGET else 'NOT MET'}); recall@10 after the "
              f"refresh {s_refresh.recall:.3f}, after the rebuild {s_rebuild.recall:.3f}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
