"""UDFs and helpers shared by the tests.

Call counting works across Spark's Python workers: each UDF call appends the row's ``x``
to a per-process file in a directory captured by the UDF's closure.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional

import pyarrow as pa
import pyarrow.compute as pc

import geneva_provider as gp
from geneva_provider.core.store.layout import JobStore

ROOT = Path(__file__).resolve().parents[1]

# A Spark INFO line in a task log, as a spark-submit stage printed it: the JVM's, in Spark's log4j layout
# ("26/11/28 00:11:20 INFO SparkContext: ..."), or py4j's, through the stage program's Python logging.
SPARK_INFO_LINE = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO \S+:|INFO py4j\.")


def _log_calls(log_dir: str, xs: list[int]) -> None:
    with open(os.path.join(log_dir, f"{os.getpid()}.log"), "a") as f:
        f.write("".join(f"{x}\n" for x in xs))


def read_calls(log_dir: str | Path) -> list[int]:
    """Every x value a counting UDF was called on, across all worker processes."""
    out: list[int] = []
    for p in Path(log_dir).glob("*.log"):
        out.extend(int(line) for line in p.read_text().split())
    return out


def kill_session(sid: int, timeout: float = 30.0) -> None:
    """SIGKILLs every live process of session ``sid`` and waits until none is left.

    For a run started with ``start_new_session=True``: ``killpg`` alone misses Spark's Python workers,
    which move to process groups of their own and may finish a UDF call (and log it) after their
    driver died.  A killed machine leaves nothing running, so neither may a killed test run.
    """
    deadline = time.monotonic() + timeout
    while pids := _session_pids(sid):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, f"processes {pids} of the killed run are still alive"
        time.sleep(0.05)


def _session_pids(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) != sid:
                continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue
        if state != "Z":
            pids.append(int(entry))
    return pids


def run_and_kill_when(script: str, ready: Callable[[], bool], env: dict[str, str] | None = None,
                      poll: float = 0.05) -> list[str]:
    """Runs ``script`` in a session of its own, SIGKILLs it (and every process it started) once ``ready()``
    holds (looked at every ``poll`` seconds), and returns what it printed (it must not have finished)."""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 180
        while not ready():
            assert proc.poll() is None, "the process ended before it could be killed"
            assert time.monotonic() < deadline, "the process never got there"
            time.sleep(poll)
    finally:
        kill_session(proc.pid)
        proc.wait(timeout=30)
    out = proc.stdout.read().splitlines()
    assert "FINISHED" not in out, "the process finished before it was killed"
    return out


def run_and_kill_after_checkpoints(script: str, store, checkpoints: int, env: dict[str, str] | None = None
                                   ) -> list[str]:
    """:func:`run_and_kill_when` ``checkpoints`` range checkpoints exist in ``store``."""
    return run_and_kill_when(script, lambda: len(JobStore(store).batches("")) >= checkpoints, env)


def clear_calls(log_dir: str | Path) -> None:
    for p in Path(log_dir).glob("*.log"):
        p.unlink()


def counting_double(log_dir: str, fail_flag: str | None = None, fail_at: int | None = None,
                    sleep: float = 0.0, slow_while: str | None = None) -> gp.UDF:
    """Scalar x*2 that logs each call; raises at x == fail_at while the file fail_flag exists.

    It sleeps ``sleep`` seconds a row -- only while the file ``slow_while`` exists, if one is given: a test that
    kills a slow job removes it after the kill, so the rerun is not slow too.
    """

    @gp.udf(data_type=pa.int64(), name="double")
    def double(x: int) -> int:
        if fail_flag is not None and x == fail_at and os.path.exists(fail_flag):
            raise ZeroDivisionError(f"injected failure at x={x}")
        if sleep and (slow_while is None or os.path.exists(slow_while)):
            time.sleep(sleep)
        _log_calls(log_dir, [x])
        return x * 2

    return double


def counting_words(log_dir: str) -> gp.UDF:
    """``geneva_provider.examples:word_count`` that logs the ``id`` of each row it is called on."""

    @gp.udf(data_type=pa.int32(), name="word_count")
    def word_count(id: int, text: str) -> int:
        _log_calls(log_dir, [id])
        return len(text.split())

    return word_count


def chunk_key(doc_id: int, start: int) -> int:
    """One number per chunk (a document's chunks start below 10,000), as :func:`counting_embed_chunk` logs it."""
    return doc_id * 10_000 + start


def counting_embed_chunk(log_dir: str, auto_backfill: bool = False) -> gp.UDF:
    """``geneva_provider.examples:embed_chunk`` that logs the :func:`chunk_key` of each chunk it embeds."""
    from geneva_provider.examples import EMBEDDING_DIM

    @gp.udf(data_type=pa.list_(pa.float32(), EMBEDDING_DIM), name="embed_chunk", auto_backfill=auto_backfill)
    def embed_chunk(doc_id: int, start: int, chunk: str) -> list[float]:
        from geneva_provider.examples import hashed_embedding

        _log_calls(log_dir, [chunk_key(doc_id, start)])
        return hashed_embedding(chunk)

    return embed_chunk


def counting_array_triple(log_dir: str) -> gp.UDF:
    """Array UDF x*3 that logs the rows it was given."""

    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def triple(x: pa.Array) -> pa.Array:
        _log_calls(log_dir, x.to_pylist())
        return pc.multiply(x, 3)

    return triple


class Dims(NamedTuple):
    """The columns :func:`counting_dims` computes: an int, a string and a float that is NULL for x % 7 == 0."""

    height: int
    label: str
    ratio: Optional[float]  # noqa: UP045 - the annotation mapper reads Optional as a nullable field


def counting_dims(log_dir: str) -> gp.UDF:
    """A multi-output scalar UDF (``-> Columns[Dims]``) that logs each call: one line per row, all columns."""

    @gp.udf
    def dims(x: int) -> gp.Columns[Dims]:
        _log_calls(log_dir, [x])
        return Dims(x + 10, f"n{x}", None if x % 7 == 0 else x / 4)

    return dims


def dims_of(x: int) -> tuple[int, str, float | None]:
    """What :func:`counting_dims` computes for ``x``: the expected values of its three columns."""
    return x + 10, f"n{x}", None if x % 7 == 0 else x / 4


def counting_batch_sum(log_dir: str) -> gp.UDF:
    """RecordBatch UDF x + id (as float64) that logs the rows it was given."""

    @gp.udf(data_type=pa.float64(), input_columns=["x", "id"])
    def add_id(batch: pa.RecordBatch) -> pa.Array:
        _log_calls(log_dir, batch.column("x").to_pylist())
        return pc.cast(pc.add(batch.column("x"), batch.column("id")), pa.float64())

    return add_id


def stateful_offset(log_dir: str) -> gp.UDF:
    """Stateful UDF: __init__ runs once per worker (logged as -1), then x + 1000 per row."""

    @gp.udf(data_type=pa.int64())
    class PlusOffset:
        def __init__(self) -> None:
            self.offset = 1000
            with open(os.path.join(log_dir, f"init-{os.getpid()}-{time.time_ns()}.init"), "w"):
                pass

        def __call__(self, x: int) -> int:
            return x + self.offset

    return PlusOffset


def events_table(n: int, start: int = 0) -> pa.Table:
    """Rows with id = x = start..start+n-1."""
    xs = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": xs, "x": xs})


@gp.udf(data_type=pa.int64(), name="flaky_double")
def flaky_double(x: int) -> int:
    """x*2, logging calls to $GENEVA_TEST_CALL_DIR; its worker dies once at x == 3500 if $GENEVA_TEST_FAIL_FLAG exists.

    A lost executor, not a UDF bug: Airflow retries the task.  The flag is removed first, so the
    retry succeeds (a fault injected once).
    """
    flag = os.environ.get("GENEVA_TEST_FAIL_FLAG", "")
    if x == 3500 and flag and os.path.exists(flag):
        os.remove(flag)
        os._exit(1)
    _log_calls(os.environ["GENEVA_TEST_CALL_DIR"], [x])
    return x * 2


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    """2x: the UDF column ``s`` of the sensors' table ``team``."""
    return 2 * x


@gp.udf(data_type=pa.int64(), name="plain_double")
def plain_double(x: int) -> int:
    """x*2, importable by reference from a DAG."""
    return x * 2


@gp.udf(data_type=pa.int64(), name="plain_triple")
def plain_triple(x: int) -> int:
    """x*3: the revised code of a ``plain_double`` column (``alter_columns``), importable by reference from a DAG."""
    return x * 3


def counting_times(log_dir: str, k: int) -> gp.UDF:
    """Scalar x*k that logs each call (as :func:`counting_double`); ``k`` is part of its version."""

    @gp.udf(data_type=pa.int64(), name=f"times_{k}")
    def multiply(x: int) -> int:
        _log_calls(log_dir, [x])
        return x * k

    return multiply


@gp.udf(data_type=pa.int64(), name="broken_double")
def broken_double(x: int) -> int:
    """A UDF with a bug: it fails on x == 7 every time (a deterministic failure, never worth a retry)."""
    if x == 7:
        raise ValueError(f"cannot double x={x}")
    return x * 2


def times(k: int, name: str = "times") -> gp.UDF:
    """Array UDF ``x * k``; ``k`` is captured by the closure, so it is part of the UDF's version."""

    @gp.udf(data_type=pa.int64(), input_columns=["x"], name=name)
    def multiply(x: pa.Array) -> pa.Array:
        return pc.multiply(x, k)

    return multiply


WIDTH = 10  # characters per chunk of counting_split


@dataclass
class Chunk:
    chunk: str
    start: int


def counting_split(log_dir: str, sleep: float = 0.0, slow_while: str | None = None) -> gp.UDTF:
    """A chunker that logs each parent; ``sleep`` and ``slow_while`` as :func:`counting_double`'s."""

    @gp.chunker
    def split(doc_id: int, text: str) -> Iterator[Chunk]:
        if sleep and (slow_while is None or os.path.exists(slow_while)):
            time.sleep(sleep)
        _log_calls(log_dir, [doc_id])
        for i in range(0, len(text), WIDTH):
            yield Chunk(text[i:i + WIDTH], i)

    return split


def context() -> dict:
    """The bit of an Airflow task context the operators and sensors use when driven directly: outlet events."""
    from collections import defaultdict
    from types import SimpleNamespace

    return {"outlet_events": defaultdict(lambda: SimpleNamespace(extra=None))}


async def first_event(trigger):
    """The first event a trigger yields (None if it yields none)."""
    async for event in trigger.run():
        return event
    return None


def driver_only_package(directory: Path) -> tuple[str, str]:
    """A package of a unique name, ``scale(x) = 7x + 1``, written under ``directory/mods``: (its name, that dir).

    Nothing puts that directory on a Spark worker's path: only a manifest that ships the package makes it
    importable there (a reused Python worker cannot have it from an earlier test, the name being new).
    """
    import uuid

    name = f"geneva_shipped_{uuid.uuid4().hex[:10]}"
    mods = directory / "mods"
    (mods / name).mkdir(parents=True)
    (mods / name / "__init__.py").write_text("from .maths import scale\n")
    (mods / name / "maths.py").write_text("def scale(x):\n    return 7 * x + 1\n")
    return name, str(mods)


@contextmanager
def dag_bag(file_name: str, source: str) -> Iterator[Any]:
    """The DagBag of one DAG file written into the test Airflow's DAGs folder; the file is removed after."""
    from airflow.dag_processing.dagbag import DagBag

    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / file_name
    path.write_text(source)
    try:
        bag = DagBag(dag_folder=str(path))
        assert not bag.import_errors, bag.import_errors
        yield bag
    finally:
        path.unlink()


def failing_table(db: gp.Connection, log_dir: str, flag: Path, rows: int, per_file: int, fail_at: int) -> gp.Table:
    """``events`` with a ``y`` column of :func:`counting_double` that fails at ``x == fail_at`` while ``flag`` exists
    (created here: remove it for the rerun that succeeds)."""
    flag.touch()
    tbl = db.create_table("events", events_table(rows), max_rows_per_file=per_file)
    tbl.add_columns({"y": counting_double(log_dir, fail_flag=str(flag), fail_at=fail_at)})
    return tbl
