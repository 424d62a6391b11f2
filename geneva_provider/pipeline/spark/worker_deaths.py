"""UDFs that kill their Python worker: who was running when it died, and why (pipeline).

A UDF that calls ``os._exit``, crashes in native code or runs out of memory takes its Python
worker down with it: no Python exception comes back from the task, only Spark's "Python worker
exited unexpectedly" (a ``Py4JJavaError`` or a Connect ``SparkException`` a hundred lines long).
So before each UDF call an apply task leaves a small marker in the checkpoint store naming the
UDF, the column and the rows it is about to compute, and removes it when the call returns.  When
Spark reports a dead worker, the driver reads the marker of the partition Spark names and raises a
:class:`UDFExecutionError` that says which UDF, column, table and fragment, and what killed it: the
exit code (``os._exit`` / ``sys.exit`` are intercepted while the UDF runs), the native crash
(Spark's faulthandler text) or the memory limit (``spark.executor.pyspark.memory``).

A retried task (``local[N,F]``, cluster task retries) that finds its own marker from an earlier
attempt knows that attempt died on these very rows: after ``MAX_DEATHS`` deaths on the same rows
it reports the error instead of calling the UDF again, so a UDF that dies on a row every time
fails at once, not after every retry Spark allows.

While a long call runs, its marker also counts the rows it has computed so far (``rows_done``,
written at most once per ``HEARTBEAT_SECONDS``): a job's progress moves within a checkpoint, not
only when one is written (:func:`rows_in_flight`), and trails the UDF by about half a second.  A marker
kept for the next call of a span (see :meth:`CallWatch.calling`) has its count put back to 0 when a call
that counted returns: its rows go to a checkpoint, and counting them in both would show rows twice.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from pydantic import BaseModel, ConfigDict

from geneva_provider.core.contracts.models import JobSpec
from geneva_provider.core.errors import UDFWorkerDiedError
from geneva_provider.core.listing import shortened
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import RunningKey

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

MAX_DEATHS = 2  # deaths of a task's workers on the same rows before the task stops calling the UDF
MEMORY_CONF = "spark.executor.pyspark.memory"
HEARTBEAT_SECONDS = 0.5  # how often a running call's marker is rewritten with the rows it has computed

# The partition the in-process task runner is running in this thread (Spark's TaskContext says it on Spark).
IN_PROCESS_PARTITION: ContextVar[int | None] = ContextVar("geneva_in_process_partition", default=None)


class RunningCall(BaseModel):
    """What a task is computing while a UDF runs: written before the call, removed after it returns."""

    model_config = ConfigDict(extra="forbid")

    table: str
    column: str
    udf: str
    fragments: list[int]
    first_address: int
    last_address: int
    rows: int
    partition: int
    attempt: int
    memory_limit_mb: int | None = None
    exit: str | None = None  # how the call ended the process, when Python saw it (os._exit(3), sys.exit(2))
    deaths: int = 0          # earlier attempts whose worker died on these same rows
    label: str | None = None  # who was running, when not a UDF computing a column (a UDTF expanding rows)
    rows_done: int = 0        # rows of this call computed so far (rewritten at most once per HEARTBEAT_SECONDS)

    def same_rows(self, other: RunningCall) -> bool:
        return (self.column, self.fragments, self.first_address, self.last_address) == (
            other.column, other.fragments, other.first_address, other.last_address)

    def where(self) -> str:
        frags = self.fragments
        span = f"fragment {frags[0]}" if len(frags) == 1 else f"fragments {shortened(frags)}"
        return f"{span} (rows with addresses {self.first_address}..{self.last_address}, {self.rows} rows)"


def memory_limit_mb() -> int | None:
    """The Python worker's memory limit (``spark.executor.pyspark.memory``), as Spark passes it to the worker."""
    try:
        limit = int(os.environ.get("PYSPARK_EXECUTOR_MEMORY_MB", "-1"))
    except ValueError:
        return None
    return limit if limit > 0 else None


def memory_note(limit_mb: int | None) -> str:
    return f"the Python worker's memory limit {MEMORY_CONF} is {limit_mb} MiB" if limit_mb else ""


# ---------------------------------------------------------------------- executor side
def fragments_of(addrs: Sequence[int] | np.ndarray) -> list[int]:
    """The fragments that row addresses lie in, ascending, in one pass over them.

    Each distinct fragment starts a run of equal fragment ids (a call's rows are runs of one fragment
    each), so the runs' first values are every fragment.  ``np.unique`` sorted every address instead:
    ~3 ms of CPU per 100,000-row call, half of what the markers cost a 10M-row vectorised backfill.
    """
    import numpy as np

    frags = np.asarray(addrs, dtype=np.uint64) >> np.uint64(32)
    heads = frags[np.flatnonzero(frags[1:] != frags[:-1]) + 1]
    return sorted({int(frags[0]), *(int(f) for f in heads)})


class Span(NamedTuple):
    """Rows a marker names instead of one call's: the larger unit the call is part of."""

    fragments: list[int]
    first_address: int
    last_address: int
    rows: int


class Heartbeat:
    """Told the rows a running call computed (thread-safe: a concurrent UDF's threads call it); passes the count
    on at most once per ``HEARTBEAT_SECONDS``: one small write every half second, never one per row.  Only while
    the call runs: its caller calls it before the call returns."""

    def __init__(self, write: Callable[[int], None]) -> None:
        self.write = write
        self.wrote = False  # a count was written during the call
        self._lock = threading.Lock()
        self._rows = 0
        self._at = time.monotonic()  # when the count was last written (the call's start at first)

    def __call__(self, rows: int) -> None:
        with self._lock:
            self._rows += rows
            now = time.monotonic()
            if now - self._at < HEARTBEAT_SECONDS:
                return
            self._at, self.wrote = now, True
            self.write(self._rows)


class CallWatch:
    """One Spark task's markers: ``with watch.calling(column, udf, addrs):`` around each UDF call."""

    def __init__(self, store: CheckpointStore, job: JobSpec, job_id: str, partition: int, attempt: int) -> None:
        self.store, self.job = store, job
        self.partition, self.attempt = partition, attempt
        self.key = RunningKey(job_id, partition).key()
        self.limit = memory_limit_mb()
        self.marked: RunningCall | None = None  # the span marker kept between calls
        self.earlier: RunningCall | None = None
        if attempt > 0:  # an earlier attempt of this task left its marker: its worker died in that call
            try:
                self.earlier = store.get_model(self.key, RunningCall) if self.key in store else None
            except Exception:  # noqa: BLE001 - a marker only explains; it never fails a task
                self.earlier = None

    @classmethod
    def here(cls, store: CheckpointStore, job: JobSpec, job_id: str | None) -> CallWatch | None:
        """The watch of the Spark task (or in-process partition) running this code (None elsewhere, or
        without a job id)."""
        if not job_id:
            return None
        if (partition := IN_PROCESS_PARTITION.get()) is not None:
            return cls(store, job, job_id, partition, 0)
        try:
            from pyspark import TaskContext
        except ImportError:
            return None
        task = TaskContext.get()
        if task is None:
            return None
        return cls(store, job, job_id, task.partitionId(), task.attemptNumber())

    @contextmanager
    def calling(self, column: str, udf: str, addrs: Sequence[int] | np.ndarray, label: str | None = None,
                span: Span | None = None) -> Iterator[Heartbeat]:
        """Marks the call of ``udf`` for ``column`` over the rows at ``addrs`` while it runs (``label``: who
        runs, in words, when not a UDF computing ``column``).  Gives a function to tell the rows the call
        has computed (:meth:`heartbeat`).

        With a ``span`` (the rows of a unit the call is one part of: fragments a task computes whole), the
        marker names the span and stays after the call, until :meth:`release`: its next calls write no
        marker of their own.  A marker is a small file in the store (~1 ms, more on an object store): one per
        fragment instead of one per call of ~100,000 rows was a seventh of a vectorised backfill's time.
        """
        if span is None:
            span = Span(fragments_of(addrs), int(addrs[0]), int(addrs[len(addrs) - 1]), len(addrs))
            kept = False
        else:
            kept = True
        call = RunningCall(table=self.job.table, column=column, udf=udf, fragments=span.fragments,
                           first_address=span.first_address, last_address=span.last_address, rows=span.rows,
                           partition=self.partition, attempt=self.attempt, memory_limit_mb=self.limit, label=label)
        if self.earlier is not None and self.earlier.same_rows(call):
            call.deaths = self.earlier.deaths + 1
            if call.deaths >= MAX_DEATHS:
                raise death_error(self.earlier, None, None, deaths=call.deaths)
        marked = self.marked
        if not (kept and marked is not None and marked.same_rows(call) and marked.udf == udf):
            self._put(call)
        self.marked = call if kept else None
        real_exit = os._exit

        def recorded_exit(status: int) -> NoReturn:  # the UDF (or a library it calls) ends the process
            self._put(call.model_copy(update={"exit": f"os._exit({status})"}))
            real_exit(status)

        os._exit = recorded_exit
        tick = self.heartbeat(call)
        try:
            yield tick
        except SystemExit as exc:  # sys.exit in a UDF ends the worker with this code
            self._put(call.model_copy(update={"exit": f"sys.exit({exc.code!r})"}))
            raise
        except BaseException:  # the UDF raised (its error policy reports it), or the task was cancelled
            self.release(force=True)
            raise
        finally:
            os._exit = real_exit
        if not kept:
            self._delete()
        elif tick.wrote:  # its rows go to a checkpoint: not counted twice
            self._put(call)

    def release(self, force: bool = False) -> None:
        """Removes the span marker kept between calls (``force``: the marker, kept or not)."""
        if self.marked is not None or force:
            self.marked = None
            self._delete()

    def heartbeat(self, call: RunningCall) -> Heartbeat:
        """A counter of the call's computed rows (:class:`Heartbeat`) that rewrites the marker with them."""
        return Heartbeat(lambda rows: self._put(call.model_copy(update={"rows_done": rows})))

    def _put(self, call: RunningCall) -> None:
        try:
            self.store.put_model(self.key, call)
        except Exception as exc:  # noqa: BLE001 - a marker only explains; it never fails a task
            log.warning("could not mark the running UDF call of table '%s': %s", self.job.table, exc)

    def _delete(self) -> None:
        try:
            self.store.delete(self.key)
        except Exception:  # noqa: BLE001 - a stale marker is cleared by the driver
            pass


# ---------------------------------------------------------------------- driver side
@dataclass(frozen=True)
class WorkerDeath:
    """What Spark said about a Python worker that died: the partition (task index) and the native crash, if any."""

    partition: int | None
    fault: str | None  # faulthandler's "Fatal Python error: ..." and the innermost frame


def death_error(call: RunningCall | None, death: WorkerDeath | None, fallback: str | None, *,
                deaths: int = 1) -> UDFWorkerDiedError:
    """The error a dead worker is reported as: the UDF, column, table, rows, and what killed it."""
    limit = call.memory_limit_mb if call is not None else None
    if call is not None and call.exit:
        cause = f"the UDF ended the process with {call.exit}"
    elif death is not None and death.fault:
        cause = f"the worker crashed: {death.fault}"
    else:
        cause = ("the worker exited without a Python error (a crash in native code, or the operating system "
                 "killed it, e.g. for using too much memory; set spark.python.worker.faulthandler.enabled=true "
                 "for a native crash's traceback)")
    if limit:
        cause += f"; {memory_note(limit)}"
    if call is not None and call.label:
        who = f"{call.label} killed its Python worker at {call.where()}"
    elif call is not None:
        who = (f"UDF '{call.udf}' killed its Python worker computing column '{call.column}' of table "
               f"'{call.table}' at {call.where()}")
    else:
        who = fallback or "a UDF killed its Python worker"
    repeated = f" ({deaths} attempts died on the same rows)" if deaths > 1 else ""
    return UDFWorkerDiedError(f"{who}: {cause}{repeated}. Nothing was committed; a rerun resumes from the "
                              "checkpoints (rows checkpointed before the crash are not computed again) -- if the "
                              "UDF crashes its worker every time, fix it first")


def read_call(store: CheckpointStore, job_id: str, partition: int | None) -> RunningCall | None:
    """The marker a dead worker of partition ``partition`` left (None if it left none)."""
    if partition is None:
        return None
    try:
        key = RunningKey(job_id, partition).key()
        return store.get_model(key, RunningCall) if key in store else None
    except Exception:  # noqa: BLE001 - without a marker the plan still names the rows
        return None


def rows_in_flight(store: CheckpointStore, job_id: str) -> int:
    """Rows the job's running UDF calls have computed and no checkpoint holds yet (from their markers'
    heartbeats; 0 when none can be read): what a progress display adds to the rows checkpointed."""
    total = 0
    try:
        for key in store.list_keys(RunningKey.prefix(job_id)):
            try:
                total += store.get_model(key, RunningCall).rows_done
            except Exception:  # noqa: BLE001 - a marker removed as the call returned counts nothing
                continue
    except Exception as exc:  # noqa: BLE001 - progress only shows; it never fails a job
        log.debug("could not read the running calls of job %s: %s", job_id, exc)
    return total


def clear_markers(store: CheckpointStore, job_id: str) -> None:
    """Removes the job's markers (tasks Spark killed after another failed leave theirs behind)."""
    try:
        for key in store.list_keys(RunningKey.prefix(job_id)):
            store.delete(key)
    except Exception as exc:  # noqa: BLE001 - stale markers are harmless
        log.debug("could not remove the markers of job %s: %s", job_id, exc)


_TASK = re.compile(r"Task (\d+) in stage [\d.]+ failed")
_FAULT = re.compile(r"Fatal Python error: ([^\n]+)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def worker_death(exc: BaseException) -> WorkerDeath | None:
    """The dead Python worker Spark's error reports (classic or Connect), or None for any other error."""
    text = str(exc)
    if "Python worker exited unexpectedly" not in text:
        return None
    task = _TASK.search(text)
    fault = _FAULT.search(text)
    detail = None
    if fault:
        frames = [m for m in _FRAME.finditer(text[fault.end():]) if "/pyspark" not in m.group(1)
                  and "geneva_provider" not in m.group(1)]
        detail = fault.group(1).strip()
        if frames:
            path, line, fn = frames[0].groups()
            detail += f" in {fn} ({os.path.basename(path)}, line {line})"
    return WorkerDeath(partition=int(task.group(1)) if task else None, fault=detail)
