"""What a UDF asks of the machine that runs it: CPUs, GPUs and memory per Spark task (core).

``@udf(num_gpus=1)`` is checked here once, at decoration, and travels in the column's metadata
like the rest of the UDF's spec, so any Spark job started anywhere schedules the UDF the same
way: the apply stage runs its tasks under a Spark stage-level resource profile built from it
(:mod:`geneva_provider.pipeline.spark.task_resources`).  A UDF that asks for nothing has no
resources at all (``None``), and its column's metadata is what it was before resources existed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from geneva_provider.core.errors import UDFDefinitionError

META_RESOURCES = "geneva::udf::resources"

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


class UDFResources(BaseModel):
    """A UDF's needs per Spark task: whole CPU cores, GPUs (a fraction up to 1 or a whole number), memory bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_cpus: int | None = None
    num_gpus: float | None = None
    memory: int | None = None

    def describe(self) -> str:
        """``num_gpus=1, memory=4g``: the ask as the user wrote it, for errors and logs."""
        parts = [f"num_cpus={self.num_cpus}" if self.num_cpus is not None else "",
                 f"num_gpus={_number(self.num_gpus)}" if self.num_gpus is not None else "",
                 f"memory={format_size(self.memory)}" if self.memory is not None else ""]
        return ", ".join(p for p in parts if p)

    def merged(self, other: UDFResources) -> UDFResources:
        """The larger of each need: what one task running both UDFs (a view's columns) asks for."""
        def most(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else max(a, b)

        return UDFResources(num_cpus=most(self.num_cpus, other.num_cpus),
                            num_gpus=most(self.num_gpus, other.num_gpus), memory=most(self.memory, other.memory))

    def to_metadata(self) -> dict[str, str]:
        """The field-metadata entry that records the ask (str -> str, as Lance wants)."""
        return {META_RESOURCES: json.dumps(self.model_dump(exclude_none=True), sort_keys=True)}


class ResourceAsk(BaseModel):
    """One UDF column's ask, as a plan records it: a job's error names the UDF and the column that asked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    udf: str
    column: str
    resources: UDFResources

    def describe(self) -> str:
        return f"UDF '{self.udf}' (column '{self.column}') asks for {self.resources.describe()} per task"


def task_resources(asks: list[ResourceAsk]) -> UDFResources | None:
    """What each task of a job computing all ``asks`` needs (None: no UDF asks for anything)."""
    total: UDFResources | None = None
    for ask in asks:
        total = ask.resources if total is None else total.merged(ask.resources)
    return total


def resources_from_metadata(metadata: dict[str, str]) -> UDFResources | None:
    """The ask a column's (decoded) field metadata records, None for a UDF that asked for nothing."""
    text = metadata.get(META_RESOURCES)
    return UDFResources.model_validate(json.loads(text)) if text else None


def udf_resources(udf_name: str, num_cpus: Any = None, num_gpus: Any = None, memory: Any = None,
                  label: str | None = None) -> UDFResources | None:
    """The validated ask of ``@udf(num_cpus=, num_gpus=, memory=)``; None when none is given.

    UDFDefinitionError naming the UDF (``label``, default ``UDF 'name'``; a chunker passes its own) and
    the argument otherwise: Spark schedules whole cores, GPU amounts that are a fraction up to 1 or a
    whole number, and memory is bytes or a size ("4g").
    """
    if isinstance(num_gpus, int | float) and not isinstance(num_gpus, bool) and num_gpus == 0:
        num_gpus = None  # the reference's "no GPU"
    if num_cpus is None and num_gpus is None and memory is None:
        return None
    where = label or f"UDF '{udf_name}'"
    return UDFResources(num_cpus=_cpus(num_cpus, where), num_gpus=_gpus(num_gpus, where),
                        memory=None if memory is None else parse_size(memory, f"{where}: memory"))


def _positive(value: Any, where: str, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise UDFDefinitionError(f"{where}: {arg} must be a positive number, got {value!r}"
                                 + ("; leave it out for a UDF that needs none" if value == 0 else ""))
    return float(value)


def _cpus(value: Any, where: str) -> int | None:
    if value is None:
        return None
    cpus = _positive(value, where, "num_cpus")
    if not cpus.is_integer():
        raise UDFDefinitionError(f"{where}: num_cpus must be a whole number of cores (Spark schedules whole cores), "
                                 f"got {value!r}")
    return int(cpus)


def _gpus(value: Any, where: str) -> float | None:
    if value is None:
        return None
    gpus = _positive(value, where, "num_gpus")
    if gpus > 1 and not gpus.is_integer():
        raise UDFDefinitionError(f"{where}: num_gpus must be a fraction up to 1 (tasks sharing a GPU) or a whole "
                                 f"number of GPUs, got {value!r}")
    return gpus


def parse_size(value: Any, where: str) -> int:
    """Bytes from an int or a size string ("512m", "4g", "1.5GiB"); UDFDefinitionError naming ``where``."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value > 0:
            return value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
        if size > 0:
            return size
    raise UDFDefinitionError(f"{where} must be a positive number of bytes or a size such as '512m' or '4g', "
                             f"got {value!r}")


def format_size(size: int) -> str:
    """Bytes as the shortest exact size string ("4g", "1536m", "100")."""
    for unit in "tgmk":
        if size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return str(size)


def _number(value: float | None) -> str:
    return "" if value is None else str(int(value)) if float(value).is_integer() else str(value)
