"""Which GPUs the current Spark task was given: ``task_gpus()`` and ``task_device()`` (core).

Spark does not isolate devices: every Python worker on an executor sees every GPU, and a reused
worker serves tasks given different GPUs one after the other.  So a UDF must place its work on
the addresses Spark assigned to the task it is running in (``model.to(task_device())``), never
on ``CUDA_VISIBLE_DEVICES`` set once per process.  A Python worker runs one task at a time, and
pyspark keeps that task's context on a class attribute, so the threads of ``@udf(concurrency=N)``
read the same task's addresses as the task's own thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def task_gpus() -> list[str]:
    """The GPU addresses Spark assigned to the running task (``["0"]``); ``[]`` outside a GPU task or Spark."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency; a UDF run by hand needs no Spark
        return []
    ctx = TaskContext.get()
    if ctx is None:
        return []
    gpu = ctx.resources().get("gpu")
    return list(gpu.addresses) if gpu is not None else []


def task_device() -> str:
    """``"cuda:<address>"`` of the task's first GPU (the torch device to put a model on); ``"cpu"`` without one."""
    gpus = task_gpus()
    return f"cuda:{gpus[0]}" if gpus else "cpu"


def device_instance(func: Callable[..., Any] | type, stateful: bool, instances: dict[tuple[str, ...], Any],
                    args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The function to call: ``func`` itself, or this process's instance of a stateful class for the task's GPUs.

    A stateful UDF (or UDTF) is instantiated once per process (per worker) and device -- built with the
    constructor arguments it was registered with (``Embed(model="m2")``), then its ``setup()``, if it has
    one, loads what is heavy -- and reused: a reused worker serves tasks given different GPUs, and a model
    loaded on one must not serve another.
    """
    if not stateful:
        return func
    device = tuple(task_gpus())
    if device not in instances:
        built = func(*args, **(kwargs or {}))
        setup = getattr(built, "setup", None)
        if callable(setup):  # the reference's hook: heavy state, once per worker, never pickled
            setup()
        instances[device] = built
    instance: Callable[..., Any] = instances[device]
    return instance
