"""A job's UDF resource asks as a Spark stage-level resource profile, checked against the session first (pipeline).

A UDF that asks for GPUs, cores or memory (``@udf(num_gpus=1)``) has its apply tasks run under a
task-only ``ResourceProfile``: Spark then starts a task only where its resources are free, so
with 2 GPUs and ``num_gpus=1`` at most 2 tasks run at once, with ``num_gpus=0.5`` at most 4 (two
per GPU) -- if the executor's cores hold that many tasks too: fewer cores are warned about.  Spark honours
such profiles only on a standalone, YARN or Kubernetes master (``local-cluster[...]`` too) with
dynamic allocation off, and only for resources its executors declare; asked otherwise it refuses
at job submission with a Java error, or -- for memory, which a task-only profile cannot ask for --
runs unconstrained.  So the session's settings are read first (``spark.conf.get`` works over
Spark Connect too) and a session that cannot give what a UDF asks fails here, before any Spark
job, with :class:`ResourceUnavailableError` naming the UDF, its ask, the offer and the fix.

Memory is honoured as a per-task budget: executors must have at least the asked memory, and the
task's cores are raised so that no more tasks share an executor than its memory holds.

On a plain local master (``local[N]``, a notebook's session) Spark runs no profile, but every task runs on
this machine: cores and memory are met by running at most ``min(N // num_cpus, machine memory // memory)``
tasks at once (at least one), with a warning saying so (:class:`~geneva_provider.pipeline.spark.runner.LocalLimit`).
GPUs stay refused there: no task would be given one.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import ResourceUnavailableError
from geneva_provider.core.resources import ResourceAsk, UDFResources, format_size, parse_size, task_resources
from geneva_provider.pipeline.spark.runner import LocalLimit, is_connect

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import SparkSession

log = logging.getLogger(__name__)

DEFAULT_EXECUTOR_MEMORY = "1g"  # Spark's default spark.executor.memory


def resource_profile(spark: SparkSession, asks: list[ResourceAsk], label: str) -> Any | None:
    """The task-only ResourceProfile a job's tasks run under (on a plain local master a LocalLimit of the tasks run at
    once); None when no UDF asks for anything.

    ResourceUnavailableError (before any Spark job) when the session cannot give an ask.
    """
    resources = task_resources(asks)
    if resources is None:
        return None
    offer = SessionOffer.of(spark)
    for ask in asks:
        offer.check(ask, label)
    if offer.plain_local:
        return offer.local_limit(resources, asks, label)
    cpus = offer.cpus_for(resources)
    offer.warn_if_cores_limit(resources, cpus, asks, label)
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    requests = TaskResourceRequests().cpus(cpus)
    if resources.num_gpus is not None:
        requests = requests.resource("gpu", resources.num_gpus)
    log.info("%s: tasks run under a Spark resource profile of %d cpus%s per task (%s)", label, cpus,
             f", {resources.num_gpus:g} gpu" if resources.num_gpus is not None else "",
             "; ".join(a.describe() for a in asks))
    profile = ResourceProfileBuilder().require(requests).build
    if is_connect(spark):
        _register_over_connect(spark, profile)
    return profile


def _register_over_connect(spark: Any, profile: Any) -> None:
    """Creates ``profile`` on ``spark``'s Connect server and gives it the id the server returned.

    pyspark registers a profile when its ``id`` is first read, on the process's *active* Connect
    session, and only when the process runs in Connect mode (``SPARK_CONNECT_MODE_ENABLED``);
    a job's session is the one it was handed, so it is registered there, explicitly.
    """
    import pyspark.sql.connect.proto as pb2

    tasks = {name: pb2.TaskResourceRequest(resource_name=req.resourceName, amount=req.amount)
             for name, req in profile.taskResources.items()}
    profile._id = spark.client._create_profile(pb2.ResourceProfile(task_resources=tasks))


def machine_memory() -> int:
    """This machine's physical memory in bytes (0 when the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def gpu_slots(executor_gpus: float, num_gpus: float) -> int:
    """How many tasks asking ``num_gpus`` each an executor's GPUs hold at once, by Spark's rule.

    A fraction shares an address between ``floor(1 / num_gpus)`` tasks (0.5: 2, 0.4: 2, 0.25: 4),
    never splitting a task over two addresses; a whole number takes that many addresses.
    """
    if num_gpus <= 1:
        return int(executor_gpus) * math.floor(1 / num_gpus + 1e-9)
    return int(executor_gpus // num_gpus)


class SessionOffer:
    """What a Spark session's settings say its executors offer to a task profile."""

    KEYS = ("spark.master", "spark.dynamicAllocation.enabled", "spark.executor.cores", "spark.executor.memory",
            "spark.executor.resource.gpu.amount", "spark.executor.resource.gpu.discoveryScript",
            "spark.executor.resource.gpu.vendor", "spark.resources.discoveryPlugin")

    def __init__(self, conf: dict[str, str | None]) -> None:
        self.conf = conf

    @classmethod
    def of(cls, spark: SparkSession) -> SessionOffer:
        if is_connect(spark):
            return cls({k: spark.conf.get(k, None) for k in cls.KEYS})
        conf = spark.sparkContext.getConf()
        return cls({k: conf.get(k, None) for k in cls.KEYS})

    @property
    def plain_local(self) -> bool:
        """A ``local`` / ``local[N]`` master: every task on this machine, no resource profiles."""
        master = self.conf["spark.master"] or ""
        return master.startswith("local") and not master.startswith("local-cluster")

    def local_cores(self) -> int:
        """The cores of a ``local[N]`` / ``local[*]`` / ``local[N,F]`` master."""
        inside = (self.conf["spark.master"] or "").partition("[")[2].rstrip("]").split(",")[0].strip()
        if inside in ("", "*"):
            return (os.cpu_count() or 1) if inside == "*" else 1
        return max(int(inside), 1) if inside.isdigit() else (os.cpu_count() or 1)

    def local_limit(self, resources: UDFResources, asks: list[ResourceAsk], label: str) -> LocalLimit:
        """How many tasks a local master runs at once so that each has the cores and memory asked (at least one);
        warned about (log and UserWarning): Spark itself would run one per core."""
        cores, memory = self.local_cores(), machine_memory()
        by_cores = cores // (resources.num_cpus or 1)
        by_memory = memory // resources.memory if resources.memory and memory else by_cores
        tasks = max(min(by_cores, by_memory), 1)
        short = [f"{cores} cores" if (resources.num_cpus or 1) > cores else "",
                 f"{format_size(memory)} of memory" if resources.memory and memory and resources.memory > memory
                 else ""]
        shown = f"{memory / (1 << 30):.1f} GiB" if memory else "unknown"
        message = (f"{label}: {'; '.join(a.describe() for a in asks)}; the session's master is "
                   f"'{self.conf['spark.master']}', where Spark runs no task resource profiles: its tasks run on this "
                   f"machine ({cores} cores, {shown} of memory), at most "
                   f"{tasks} at once" + (f" (it has only {' and '.join(p for p in short if p)}: each task gets what "
                                          "there is)" if any(short) else "")
                   + "; a cluster master schedules the ask itself")
        log.warning(message)
        warnings.warn(message, UserWarning, stacklevel=3)
        return LocalLimit(tasks)

    def check(self, ask: ResourceAsk, label: str) -> None:
        """ResourceUnavailableError naming the UDF when this session cannot give ``ask``."""
        master = self.conf["spark.master"] or ""
        if self.plain_local:
            if ask.resources.num_gpus is not None:
                self._refuse(ask, label, f"the session's master is '{master}', where Spark runs no task resource "
                             "profiles and no task is given a GPU", "run it on a standalone, YARN or Kubernetes "
                             "cluster, or on this machine with geneva_provider.stages.local_session(gpus=N) (a "
                             "local-cluster master with GPUs)")
            return  # cores and memory: met by running fewer tasks at once (local_limit)
        if (self.conf["spark.dynamicAllocation.enabled"] or "").lower() == "true":
            self._refuse(ask, label, "the session has dynamic allocation on (spark.dynamicAllocation.enabled=true), "
                         "under which Spark runs no task-only resource profiles",
                         "set spark.dynamicAllocation.enabled=false for the job's session")
        want = ask.resources
        if want.num_gpus is not None:
            self._check_gpus(ask, label, want.num_gpus)
        cores = self.conf["spark.executor.cores"]
        if want.num_cpus is not None and cores is not None and want.num_cpus > int(cores):
            self._refuse(ask, label, f"the session's executors have {cores} cores (spark.executor.cores)",
                         f"give executors at least {want.num_cpus} cores, or ask for fewer")
        if want.memory is not None and want.memory > self.executor_memory:
            self._refuse(ask, label, f"the session's executors have {format_size(self.executor_memory)} of memory "
                         f"(spark.executor.memory={self.conf['spark.executor.memory'] or DEFAULT_EXECUTOR_MEMORY})",
                         f"set spark.executor.memory to at least {format_size(want.memory)}, or ask for less")

    def _check_gpus(self, ask: ResourceAsk, label: str, gpus: float) -> None:
        amount = self.conf["spark.executor.resource.gpu.amount"]
        if amount is None:
            self._refuse(ask, label, "the session's executors declare no GPUs (spark.executor.resource.gpu.amount "
                         "is not set)", "set spark.executor.resource.gpu.amount and "
                         "spark.executor.resource.gpu.discoveryScript (the worker's too on a standalone cluster), "
                         "or use geneva_provider.stages.local_session(gpus=N) on this machine")
        if not any(self.conf[k] for k in ("spark.executor.resource.gpu.discoveryScript",
                                           "spark.executor.resource.gpu.vendor", "spark.resources.discoveryPlugin")):
            self._refuse(ask, label, f"the session's executors declare {amount} GPUs but no way to find them "
                         "(no spark.executor.resource.gpu.discoveryScript)",
                         "set spark.executor.resource.gpu.discoveryScript to a script that lists the GPUs")
        if gpus > float(amount or 0):
            self._refuse(ask, label, f"the session's executors have {amount} GPUs each "
                         "(spark.executor.resource.gpu.amount)",
                         f"ask for at most {amount} GPUs per task, or give executors at least {gpus:g}")

    @property
    def executor_memory(self) -> int:
        text = self.conf["spark.executor.memory"] or DEFAULT_EXECUTOR_MEMORY
        return parse_size(text if text[-1:].isalpha() else f"{text}m", "spark.executor.memory")  # bare: MiB

    def cpus_for(self, resources: UDFResources) -> int:
        """The task's cores: the ask (default 1), raised so an executor's tasks fit in its memory."""
        cpus = resources.num_cpus or 1
        cores = self.conf["spark.executor.cores"]
        if resources.memory is not None and cores is not None:
            fit = max(self.executor_memory // resources.memory, 1)  # tasks whose memory an executor holds
            cpus = max(cpus, math.ceil(int(cores) / fit))
        return cpus

    def warn_if_cores_limit(self, resources: UDFResources, cpus: int, asks: list[ResourceAsk], label: str) -> None:
        """Warns (log and UserWarning) when an executor's cores let fewer tasks run at once than its GPUs would.

        Spark starts a task on an executor only when both its cores and its GPUs are free: at most
        ``cores // cpus`` tasks, and ``gpus * floor(1 / num_gpus)`` for a fraction (``gpus // num_gpus``
        otherwise).  With 2 GPUs and ``num_gpus=0.5`` the GPUs hold 4 tasks, but a 2-core executor runs 2;
        Spark says so only in the JVM's log ("... will result in wasted resources due to resource cpus
        limiting the number of runnable tasks per executor to: 2"), on a Connect server's, not the job's.
        Unknown cores (unset ``spark.executor.cores``: a standalone executor then takes all its worker's
        cores) are not judged.
        """
        cores, amount = self.conf["spark.executor.cores"], self.conf["spark.executor.resource.gpu.amount"]
        if resources.num_gpus is None or cores is None or amount is None:
            return
        by_cores, by_gpus = int(cores) // cpus, gpu_slots(float(amount), resources.num_gpus)
        if by_cores >= by_gpus:
            return
        if cpus != (resources.num_cpus or 1) and resources.memory is not None:  # raised by cpus_for
            why = f"each task takes {cpus} cores so that the executor's memory holds its tasks"
            fix = (f"give executors at least {format_size(by_gpus * resources.memory)} of memory "
                   f"(spark.executor.memory) for {by_gpus} tasks at once, or ask for less")
        else:
            why = f"each task takes {cpus} core{'s' if cpus > 1 else ''}"
            fix = f"give executors at least {by_gpus * cpus} cores for {by_gpus} tasks at once"
        message = (f"{label}: {'; '.join(a.describe() for a in asks)}: each executor's {amount} GPUs could run "
                   f"{by_gpus} tasks at once, but its {cores} cores (spark.executor.cores) run only {by_cores} "
                   f"({why}); {fix}")
        log.warning(message)
        warnings.warn(message, UserWarning, stacklevel=2)

    @staticmethod
    def _refuse(ask: ResourceAsk, label: str, offer: str, change: str) -> None:
        raise ResourceUnavailableError(f"{label}: {ask.describe()}, but {offer}: {change}. Nothing was computed "
                                       "or written.")
