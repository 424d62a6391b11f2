"""Running pipeline tasks on Spark: the local session and how Spark runs a stage's tasks (pipeline).

The stages reach this through :class:`~geneva_provider.pipeline.spark.task_runner.SparkRunner` (the seam
is :mod:`~geneva_provider.pipeline.spark.task_runner`; the in-process runner reuses the partitioning
and the error handling here).

Tasks are small typed models spread with ``parallelize(tasks, n).mapPartitions(fn)`` on a
classic session, or with ``spark.range(n).mapInArrow(fn)`` over Spark Connect (no RDDs there);
every task opens Lance itself inside the Python worker and returns a small result, so no table
data passes through the JVM or the driver.  Over Connect the storage options travel as a session
artifact (:class:`ShippedOptions`), never inside a pickled task.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from geneva_provider.core.errors import (
    GenevaError,
    InvalidArgumentError,
    ResourceUnavailableError,
    SparkEnvironmentError,
)
from geneva_provider.core.lance_logging import ignore_fork_warning
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.spark.jvm_logs import quiet_jvm_start

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from geneva_provider.core.lib_types import ClassicSession, ConnectSession, SparkContext, SparkSession

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

PROGRESS_SECONDS = 5.0  # how often a running stage logs a progress line
COUNT_SECONDS = 0.25    # how often it counts the rows its checkpoints hold into the job's record
LOCAL_JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
LOCAL_CLUSTER_MB = 2048  # the local-cluster worker's memory: its one executor's (spark.executor.memory, 1g) fits


def local_session(master: str = "local[*]", app_name: str = "geneva", conf: dict[str, str] | None = None,
                  gpus: int | None = None) -> ClassicSession:
    """A SparkSession on this machine, bound to 127.0.0.1, whose workers run this interpreter.

    ``gpus=N`` gives its executor N GPUs for UDFs that ask for them (``@udf(num_gpus=1)``): Spark runs
    task resource profiles only on a cluster master, so ``local[C]`` becomes ``local-cluster[1,C,...]``
    (one worker of C cores) with the GPUs found by the script the package ships (nvidia-smi, or the
    addresses in ``GENEVA_FAKE_GPUS`` such as ``"0,1"``).  Starting it takes some 10 s more; when the
    script finds fewer than N GPUs, ResourceUnavailableError says so before any JVM starts.

    A process runs one SparkContext: while a session runs, it is returned (see :func:`_check_running`).
    """
    asked = master
    if gpus is not None:
        master, conf = gpu_cluster(master, gpus, conf)
    for name, value in (("master", master), ("app_name", app_name)):
        if not isinstance(value, str) or not value.strip():  # checked before a JVM starts
            raise InvalidArgumentError(f"local_session: {name} must be a non-empty string (e.g. 'local[*]'), "
                                       f"got {value!r}")
    if conf is not None and not isinstance(conf, dict):
        raise InvalidArgumentError(f"local_session: conf must be a dict of Spark settings, got {conf!r}")
    running = running_context()
    if running is not None:
        _check_running(running, asked, master, gpus)
    elif gpus is not None:
        gpus_found(gpus, f"local_session({asked!r}, gpus={gpus})")
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.python.worker.reuse", "true")
        # pyspark's daemon that imports pyarrow, lance, ... once, for every worker it forks.
        .config("spark.python.daemon.module", "geneva_provider.worker_daemon")
    )
    # The driver JVM only schedules tasks here (Lance data stays in the Python workers), so a
    # serial GC and the quick JIT tier leave the cores to the UDFs: measured on 2 cores, the
    # JVM's CPU per 8-task job fell from ~2 s to ~0.6 s.
    # With the faulthandler on, a worker that crashes in native code (a segfault in a UDF) is
    # reported with the fault and the Python frame it happened in, not only "exited unexpectedly".
    conf = {"spark.driver.extraJavaOptions": LOCAL_JVM_OPTIONS, "spark.python.worker.faulthandler.enabled": "true",
            **quiet_conf(), **(conf or {})}
    for key, value in conf.items():
        builder = builder.config(key, value)
    # The JVM's launch forks and execs at once: lance's fork warning is wrong there.  The JVM starts with the
    # package's quiet log4j2 configuration: no start-up banner, Spark's warnings and errors still shown.
    with warnings.catch_warnings(), quiet_jvm_start(launching=jvm_launches()):
        ignore_fork_warning()
        spark = builder.getOrCreate()
    quiet_py4j()
    check_versions(spark)
    return spark


def gpu_cluster(master: str, gpus: int, conf: dict[str, str] | None) -> tuple[str, dict[str, str]]:
    """The ``local-cluster`` master and Spark settings of a local session whose one executor has ``gpus`` GPUs."""
    import re

    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise InvalidArgumentError(f"local_session: gpus must be a positive whole number, got {gpus!r}")
    found = re.fullmatch(r"local\[(\d+|\*)\]", master.strip()) if isinstance(master, str) else None
    if found is None:
        raise InvalidArgumentError(f"local_session: gpus= runs a local-cluster of the cores of a local[N] master, "
                                   f"got master {master!r}")
    cores = (os.cpu_count() or 1) if found.group(1) == "*" else int(found.group(1))
    script = discovery_script()
    gpu_conf = {
        "spark.worker.resource.gpu.amount": str(gpus), "spark.worker.resource.gpu.discoveryScript": script,
        "spark.executor.resource.gpu.amount": str(gpus), "spark.executor.resource.gpu.discoveryScript": script,
        "spark.executor.cores": str(cores), "spark.dynamicAllocation.enabled": "false",
    }
    return f"local-cluster[1,{cores},{LOCAL_CLUSTER_MB}]", {**gpu_conf, **(conf or {})}


def discovery_script() -> str:
    """The path of the GPU discovery script the package ships (Spark runs it to list an executor's GPUs)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # geneva_provider/
    path = os.path.join(package, "discover_gpus.sh")
    if not os.access(path, os.X_OK):  # an install that dropped the executable bit
        os.chmod(path, 0o755)
    return path


def discovered_gpus() -> list[str]:
    """The GPU addresses the shipped discovery script finds here (``GENEVA_FAKE_GPUS``, else nvidia-smi)."""
    import json
    import subprocess

    done = subprocess.run([discovery_script()], capture_output=True, text=True, timeout=60, check=False)
    try:
        return [str(a) for a in json.loads(done.stdout)["addresses"]]
    except (ValueError, KeyError, TypeError):
        return []


def gpus_found(gpus: int, asked: str) -> list[str]:
    """The first ``gpus`` addresses the discovery script finds (those Spark gives the executor).

    ResourceUnavailableError, naming ``asked``, when it finds fewer: Spark would start and then die with
    a Java stack trace (a local session) or exit (a Connect server), so this is checked before either starts.
    """
    addresses = discovered_gpus()
    if len(addresses) < gpus:
        change = f"ask for at most {len(addresses)}" if addresses else "leave gpus out"
        raise ResourceUnavailableError(
            f"{asked}: the GPU discovery script found {len(addresses)} GPUs ({', '.join(addresses) or 'none'}; "
            f"it asks nvidia-smi, or lists the addresses in GENEVA_FAKE_GPUS such as '0,1'): {change}, or set "
            "GENEVA_FAKE_GPUS to test without GPUs. Spark was not started.")
    return addresses[:gpus]  # Spark gives the executor the first N the script lists


def jvm_launches() -> bool:
    """Whether a session built now starts this process's JVM (none started yet, none given by a ``pyspark`` shell)."""
    from pyspark import SparkContext

    return SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ


def running_context() -> SparkContext | None:
    """The SparkContext running in this process, which ``SparkSession.builder.getOrCreate()`` reuses; None if none."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return sc if sc is not None and sc._jsc is not None else None


def _check_running(sc: SparkContext, asked: str, master: str, gpus: int | None) -> None:
    """Before :func:`local_session` returns the running session (Spark's getOrCreate), instead of a new one.

    A process has one SparkContext, so asking ``gpus=N`` of a session without N GPUs would silently
    give one where ``@udf(num_gpus=...)`` columns then fail: SparkEnvironmentError instead, the session
    untouched.  Another master is only warned about: the running session still works.
    """
    running = sc.master
    amount = sc.getConf().get("spark.executor.resource.gpu.amount")
    have = float(amount) if amount else 0.0
    wanted = f"master '{asked}'" + (f" with gpus={gpus}" if gpus is not None else "")
    offer = f"master '{running}'" + (f" with {amount} GPUs" if amount else "")
    if gpus is not None and have < gpus:
        raise SparkEnvironmentError(
            f"local_session: a SparkSession already runs in this process ({offer}), and a process runs one: "
            f"{wanted} cannot be given. Stop it first (spark.stop()), then call local_session again; the running "
            "session was left as it was.")
    if running != master or (gpus is not None and have != gpus):
        message = (f"local_session: a SparkSession already runs in this process, so that one ({offer}) is "
                   f"returned, not a new one with {wanted}; stop it first (spark.stop()) for a new one")
        log.warning(message)
        warnings.warn(message, stacklevel=3)


def quiet_conf() -> dict[str, str]:
    """Spark settings for a driver whose stderr is not a terminal (an Airflow task, a CI log, a pipe).

    Spark's ``[Stage 0:>   (0 + 2) / 5]`` bars redraw a line with carriage returns: in a log
    file they pile up as noise.  The stages log their own progress (rows, rows/s) instead.
    """
    try:
        terminal = os.isatty(2)  # the JVM writes to the process's own stderr, whatever sys.stderr is now
    except OSError:
        terminal = False
    return {} if terminal else {"spark.ui.showConsoleProgress": "false"}


def hide_console_bar(sc: SparkContext) -> bool:
    """Stops the ``[Stage 0:>   (0 + 2) / 5]`` bar a running SparkContext draws on the console; True if it drew one.

    Spark reads ``spark.ui.showConsoleProgress`` only as its context starts, so a running one's bar is
    the JVM's ``ConsoleProgressBar``: it is stopped and taken off the context (whose jobs then finish
    no bar), until :func:`restore_console_bar` gives the context a new one.  Another bar (the package's
    own, on a terminal) can then draw on that line alone.
    """
    try:
        jsc: Any = sc._jsc.sc()  # None only once stopped: the except below
        bar = jsc.progressBar()
        if bar.isEmpty():
            return False
        bar.get().stop()
        _set_console_bar(sc, sc._jvm.scala.Option.empty())  # type: ignore[union-attr]
        return True
    except Exception as exc:  # noqa: BLE001 - two bars on one line are untidy, never a failure
        log.debug("could not stop Spark's console progress bar: %s", exc)
        return False


def restore_console_bar(sc: SparkContext) -> None:
    """Gives a context whose bar :func:`hide_console_bar` stopped a new one (nothing once it is stopped)."""
    if sc._jsc is None:
        return
    try:
        jvm: Any = sc._jvm
        _set_console_bar(sc, jvm.scala.Some(jvm.org.apache.spark.ui.ConsoleProgressBar(sc._jsc.sc())))
    except Exception as exc:  # noqa: BLE001 - a missing Spark bar is untidy, never a failure
        log.debug("could not restore Spark's console progress bar: %s", exc)


def _set_console_bar(sc: SparkContext, bar: Any) -> None:
    """Sets the SparkContext's ``_progressBar`` (a Scala ``Option``; private, so through Java reflection)."""
    jsc: Any = sc._jsc.sc()
    field = jsc.getClass().getDeclaredField("_progressBar")
    field.setAccessible(True)
    field.set(jsc, bar)


def quiet_py4j() -> None:
    """py4j logs "Closing down clientserver connection" at INFO after every Spark call from a thread.

    In a task log that is noise between the stages' own lines, and at interpreter exit the same
    message (from a connection's ``__del__``) meets handlers whose streams are already closed and
    prints ``--- Logging error --- ... I/O operation on closed file``.  Its warnings and errors
    still show; a level the user set on the ``py4j`` logger is kept.
    """
    py4j = logging.getLogger("py4j")
    if py4j.level == logging.NOTSET:
        py4j.setLevel(logging.WARNING)


def check_versions(spark: SparkSession) -> None:
    """Fails fast when pyspark's Python files and the JVM disagree (the pyspark-client overwrite)."""
    import pyspark

    if pyspark.__version__ != spark.version:
        raise GenevaError(
            f"pyspark Python package is {pyspark.__version__} but the Spark JVM is {spark.version}; "
            "install matching versions (pyspark==4.2.0 alongside pyspark-client 4.2.0)"
        )


def is_connect(spark: SparkSession) -> TypeIs[ConnectSession]:
    """True for a Spark Connect session (no SparkContext, no RDDs: tasks run through ``mapInArrow``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def is_session(spark: SparkSession) -> bool:
    """True for a classic or a Spark Connect SparkSession."""
    return hasattr(spark, "sparkContext") or is_connect(spark)


def spark_ui_url(spark: SparkSession) -> str | None:
    """The Spark application UI of the session's driver (a link for the stage's task); None without one.

    A classic session's driver says where its UI is bound (``uiWebUrl``).  A Spark Connect client has no
    SparkContext: the server's UI is read from the server's settings -- its reverse-proxy address when it has
    one, else its driver host and ``spark.ui.port`` (4040 unless set) -- and is None when the server runs
    without a UI.  Nothing of the client's connection (its token) goes into it.
    """
    try:
        if not is_connect(spark):
            return spark.sparkContext.uiWebUrl
        conf = spark.conf
        if str(conf.get("spark.ui.enabled", "true")).lower() == "false":
            return None
        proxy = conf.get("spark.ui.reverseProxyUrl", None)
        if proxy:
            return str(proxy)
        host = conf.get("spark.driver.host", None)
        return f"http://{host}:{conf.get('spark.ui.port', '4040')}" if host else None
    except Exception:  # noqa: BLE001 - a link is never worth failing a stage for
        return None


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks the session runs at once (over Connect: its ``spark.default.parallelism``, else the CPUs)."""
    if is_connect(spark):
        try:
            return max(int(spark.conf.get("spark.default.parallelism")), 1)  # type: ignore[arg-type] # unset: below
        except Exception:  # noqa: BLE001 - unset on a local server: the machine's cores
            return os.cpu_count() or 1
    return max(int(spark.sparkContext.defaultParallelism), 1)


def run_tasks(
    spark: SparkSession,
    tasks: Sequence[T],
    partition_fn: Callable[[Iterator[T]], Iterable[R]],
    *,
    description: str,
    concurrency: int | None = None,
    progress: Callable[[], str | None] | None = None,
    tag: str | None = None,
    explain: Callable[[BaseException, list[list[T]]], BaseException | None] | None = None,
    profile: Any | None = None,
    spans: list[tuple[float, float]] | None = None,
) -> list[R]:
    """Runs ``partition_fn`` over ``tasks`` on the executors and returns its small results.

    One task per partition, unless ``concurrency`` asks for fewer partitions.  Every few seconds
    while the job runs, ``progress`` is called and what it returns is logged (rows, rows/s),
    else Spark's task counts are.  ``tag`` marks the Spark jobs, so ``cancel_jobs(tag)`` stops them.
    A package error a task raises (a missing checkpoint, a bad plan) is raised here as itself.
    When the job fails otherwise (a Python worker died), ``explain`` gets Spark's error and the
    tasks of each partition (Spark's task index is the partition's) and may return the error to
    raise instead.  With a stage-level resource ``profile`` (a UDF's GPUs, cores or memory), the
    partitions run as ``mapInArrow(..., profile=)`` on a classic session too; without one, nothing changes.
    A profiled stage logs the profile and how many of its tasks ran at once at most (from each
    partition's start and end wall time, which ``spans`` receives when given).
    """
    if not tasks:
        return []
    partition_fn = returning_errors(partition_fn)
    limit = profile if isinstance(profile, LocalLimit) else None
    if limit is not None:  # a local master's cores and memory: fewer partitions, no profile (Spark runs none there)
        concurrency, profile = min(concurrency or limit.tasks, limit.tasks), None
    per_slice = partitions(tasks, concurrency)
    slices = len(per_slice)
    if is_connect(spark):
        with explained(per_slice, explain):
            return _run_over_connect(spark, per_slice, partition_fn, description, progress, tag, profile, spans)
    sc = spark.sparkContext
    group = f"geneva-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, description)
    if tag:
        sc.addJobTag(tag)
    try:
        with explained(per_slice, explain), reporting(description, progress, sc, group):
            if profile is not None or limit is not None:
                return raise_task_errors(_collect_partitions(spark, per_slice, partition_fn, profile, description,
                                                             spans))
            rdd = sc.parallelize(per_slice, slices)
            return raise_task_errors(
                rdd.mapPartitions(lambda parts: partition_fn(itertools.chain.from_iterable(parts))).collect())
    finally:
        if tag:
            sc.removeJobTag(tag)
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type] # None unsets (typed as str)
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def partitions(tasks: Sequence[T], concurrency: int | None) -> list[list[T]]:
    """One list of tasks per partition: one task each, unless ``concurrency`` asks for fewer partitions;
    dealt round-robin so (size-sorted) tasks balance out."""
    slices = min(len(tasks), concurrency) if concurrency else len(tasks)
    return [list(tasks[i::slices]) for i in range(slices)]


@contextmanager
def reporting(description: str, progress: Callable[[], str | None] | None, sc: SparkContext | None = None,
              group: str = "") -> Iterator[None]:
    """While the block runs, logs every few seconds what ``progress`` returns, else the task counts of the
    Spark job group ``group`` (none without a SparkContext)."""
    done = threading.Event()
    reporter = threading.Thread(target=_report_progress, args=(sc, group, description, done, progress), daemon=True)
    reporter.start()
    try:
        yield
    finally:
        done.set()
        reporter.join()


@contextmanager
def explained(per_slice: list[list[T]],
              explain: Callable[[BaseException, list[list[T]]], BaseException | None] | None) -> Iterator[None]:
    """Raises what ``explain`` makes of an error the block raised instead of it, if anything
    (:func:`_raise_explained`)."""
    try:
        yield
    except Exception as exc:
        _raise_explained(exc, per_slice, explain)
        raise

def _run_over_connect(spark: ConnectSession, per_slice: Sequence[Sequence[T]],
                      partition_fn: Callable[[Iterator[T]], Iterable[R]], description: str,
                      progress: Callable[[], str | None] | None, tag: str | None, profile: Any | None,
                      spans: list[tuple[float, float]] | None = None) -> list[R]:
    """The same partitions over Spark Connect (no RDDs there), with the Connect session's tags and progress."""
    if tag:
        spark.addTag(tag)
    try:
        with reporting(description, progress):
            return raise_task_errors(_collect_partitions(spark, per_slice, partition_fn, profile, description, spans))
    finally:
        if tag:
            spark.removeTag(tag)


def _collect_partitions(spark: SparkSession, per_slice: Sequence[Sequence[T]],
                        partition_fn: Callable[[Iterator[T]], Iterable[Any]], profile: Any | None,
                        description: str = "", spans: list[tuple[float, float]] | None = None) -> list[Any]:
    """``spark.range(n).mapInArrow``, one row per partition in, each result pickled into a binary column out
    (tasks and results stay small; table data never moves); under ``profile`` when one is given.

    Each partition also sends back its start and end wall time (a :class:`_Span`), from which a
    profiled stage logs how many tasks ran at once at most.
    """
    import pickle

    import pyarrow as pa

    def run_slices(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                start = time.time()
                results = [pickle.dumps(r) for r in partition_fn(iter(per_slice[index]))]
                results.append(pickle.dumps(_Span(start, time.time())))
                yield pa.RecordBatch.from_pydict({"result": pa.array(results, pa.binary())})

    frame = spark.range(0, len(per_slice), 1, len(per_slice))
    mapped = (frame.mapInArrow(run_slices, "result binary") if profile is None
              else frame.mapInArrow(run_slices, "result binary", profile=profile))
    results: list[Any] = []
    found: list[tuple[float, float]] = []
    for row in mapped.collect():
        value = pickle.loads(row.result)
        if isinstance(value, _Span):
            found.append((value.start, value.end))
        else:
            results.append(value)
    if spans is not None:
        spans.extend(found)
    if profile is not None:
        log.info("%s: ran under the resource profile %s: at most %d tasks ran at once (%s)", description,
                 describe_profile(profile), most_at_once(found), counted(len(found), "task"))
    return results


@dataclass(frozen=True)
class LocalLimit:
    """What a UDF's cores and memory become on a plain ``local[N]`` master, where Spark runs no task resource
    profile: at most ``tasks`` partitions, so at most that many tasks run at once on this machine."""

    tasks: int

    def describe(self) -> str:
        return f"of a local master (at most {self.tasks} task{'s' if self.tasks > 1 else ''} at once)"


@dataclass(frozen=True)
class _Span:
    """A partition's start and end wall time (``time.time()`` on its executor)."""

    start: float
    end: float


def most_at_once(spans: Iterable[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` spans that overlap at one instant (touching ends do not)."""
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    running = most = 0
    for _, step in edges:  # at the same instant an end (-1) sorts before a start (+1)
        running += step
        most = max(most, running)
    return most


def describe_profile(profile: Any) -> str:
    """A task resource profile as its per-task asks, e.g. ``1 cpus, 1 gpu per task``."""
    if isinstance(profile, LocalLimit):
        return profile.describe()
    asks = [f"{req.amount:g} {name}" for name, req in sorted(getattr(profile, "taskResources", {}).items())]
    return ", ".join(asks) + " per task" if asks else "(no task resources)"


def _raise_explained(exc: Exception, per_slice: list[list[T]],
                     explain: Callable[[BaseException, list[list[T]]], BaseException | None] | None) -> None:
    """Raises what ``explain`` makes of a failed job instead of Spark's error (logged at debug level), if anything."""
    if explain is None or isinstance(exc, GenevaError):
        return
    better = explain(exc, per_slice)
    if better is not None:
        log.debug("Spark's error, reported as %s: %s", type(better).__name__, exc)
        raise better from None


@dataclass(frozen=True)
class _TaskRaised:
    """A package error a task raised, carried back as the task's last result.

    Spark would retry the task and then wrap the error in its own exception type.  The package's
    errors fail the same way on every attempt, and the caller (an operator, a DAG's author) should
    get the error it can catch, with its message, not a Java stack trace.
    """

    error: GenevaError


def returning_errors(partition_fn: Callable[[Iterator[T]], Iterable[R]]) -> Callable[[Iterator[T]], Iterator[Any]]:
    def run(tasks: Iterator[T]) -> Iterator[Any]:
        try:
            yield from partition_fn(tasks)
        except GenevaError as exc:
            yield _TaskRaised(exc)

    return run


def raise_task_errors(results: list[Any]) -> list[Any]:
    """The tasks' results; the first package error a task raised is raised instead, with how many tasks failed."""
    raised = [r.error for r in results if isinstance(r, _TaskRaised)]
    if raised:
        if len(raised) > 1:
            raised[0].add_note(f"({len(raised)} Spark tasks failed the same way)")
        raise raised[0]
    return results


class ShippedOptions(dict[str, str]):
    """Storage options whose pickled form is only the name of a Spark Connect session artifact holding them.

    A Connect server logs the plans it runs -- the pickled task functions included -- so values
    inside a task's closure would reach its log.  Tasks get this dict instead: the driver side
    uses it as the options themselves; a task unpickles it by reading the artifact file, which
    lives in the session's directory on the server and goes with the session.
    """

    def __init__(self, options: dict[str, str], artifact: str) -> None:
        super().__init__(options)
        self.artifact = artifact

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _load_shipped_options, (self.artifact,)


def _load_shipped_options(artifact: str) -> dict[str, str]:
    import json

    from pyspark import SparkFiles

    with open(SparkFiles.get(artifact)) as f:
        return json.load(f)


def options_for_tasks(spark: SparkSession, storage_options: dict[str, str] | None) -> dict[str, str] | None:
    """The storage options as a stage's tasks should carry them: as they are on a classic session
    (the closure stays inside Spark), as a :class:`ShippedOptions` over Spark Connect."""
    if not storage_options or not is_connect(spark):
        return storage_options
    import hashlib
    import json
    import shutil
    import tempfile

    text = json.dumps(storage_options, sort_keys=True)
    artifact = f"geneva-options-{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"
    directory = tempfile.mkdtemp(prefix="geneva-options-")  # private (0700): the file holds secrets
    try:
        path = os.path.join(directory, artifact)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(text)
        try:
            spark.addArtifacts(path, file=True)
        except Exception as exc:  # a resumed session holds it already (same name, same content)
            if "ARTIFACT_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return ShippedOptions(storage_options, artifact)


def job_tag(job_id: str) -> str:
    """The Spark job tag of a geneva job's stages."""
    return f"geneva-job-{job_id}"


# Spark's logger that prints, with a stack trace, "ERROR TaskContextImpl: Error in TaskCompletionListener
# ... Block broadcast_N does not exist" when a killed task releases its lock on the stage's broadcast
# after the cancelled job's broadcasts were removed: a race inside Spark with no effect on any result.
# A listener error in a task that was not killed fails that task, and Spark reports it as the task's
# failure (TaskSetManager, Executor), so nothing is lost by quietening this one logger.
_CANCEL_NOISE_LOGGER = "org.apache.spark.TaskContextImpl"


def cancel_jobs(spark: SparkSession, job_id: str) -> None:
    """Cancels the running Spark jobs of a geneva job, without Spark printing stack traces for it."""
    if is_connect(spark):
        spark.interruptTag(job_tag(job_id))
        return
    try:
        jvm: Any = spark.sparkContext._jvm  # None only once the context is stopped: the except below
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            _CANCEL_NOISE_LOGGER, jvm.org.apache.logging.log4j.Level.FATAL)
    except Exception as exc:  # noqa: BLE001 - quieter logs must never stop a cancel
        log.debug("could not quieten %s: %s", _CANCEL_NOISE_LOGGER, exc)
    spark.sparkContext.cancelJobsWithTag(job_tag(job_id))


def _report_progress(sc: SparkContext | None, group: str, description: str, done: threading.Event,
                     progress: Callable[[], str | None] | None) -> None:
    tracker = sc.statusTracker() if sc is not None else None
    # The stage's rows are counted into its record every COUNT_SECONDS -- a display reading the record trails
    # the checkpoints by that much, not by a log line's interval -- and a line is logged every PROGRESS_SECONDS.
    # A count that takes long (many checkpoints to list on an object store) is made at most a fifth of the time.
    next_line = time.monotonic() + PROGRESS_SECONDS
    wait = COUNT_SECONDS if progress is not None else PROGRESS_SECONDS
    while not done.wait(wait):
        logging_now = time.monotonic() >= next_line or progress is None
        if logging_now:
            next_line = time.monotonic() + PROGRESS_SECONDS
        if progress is not None:
            t = time.monotonic()
            try:
                line = progress()
            except Exception:  # noqa: BLE001 - progress reporting must never fail a job
                line = None
            wait = max(COUNT_SECONDS, 4 * (time.monotonic() - t))
            if line and logging_now:
                log.info("%s", line)
            if line or not logging_now:
                continue
        if tracker is None:  # Spark Connect: no status tracker on the client
            continue
        try:
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else []:
                    stage = tracker.getStageInfo(stage_id)
                    if stage:
                        log.info("%s: %d/%d Spark tasks done, %d running", description,
                                 stage.numCompletedTasks, stage.numTasks, stage.numActiveTasks)
        except Exception:  # noqa: BLE001 - progress reporting must never fail a job
            return
