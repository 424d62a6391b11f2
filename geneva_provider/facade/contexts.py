"""Execution contexts: ``with db.context(cluster=..., manifest=...):`` runs the jobs inside on that Spark.

The reference system (LanceDB Geneva) provisions a Ray cluster for the block and ships the user's code to
it; here the block gets a Spark session -- a local one, one on a given master, or a Spark Connect client
session -- that every backfill, refresh and compaction called without ``spark=`` runs on, with the
manifest's modules and files shipped to its executors.  Leaving the block stops only what entering it
started: a session that was running already (this process's SparkContext, or one passed in) is left up.
"""

from __future__ import annotations

import logging
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.manifest import GenevaManifest, SparkCluster

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import SparkSession
    from geneva_provider.pipeline.spark.contexts import Shipment

log = logging.getLogger(__name__)


class ExecutionContext:
    """A context manager: entering it starts (or takes) a Spark session, ships the manifest and makes the
    session the one jobs without ``spark=`` use; leaving it stops what it started.

    ``__enter__`` returns the session.  In a notebook, ``ctx.__enter__()`` and ``ctx.__exit__(None, None,
    None)`` in separate cells do the same.  Everything is checked when the context is made (bad values are
    InvalidArgumentError naming them, modules that cannot be found too), before any Spark starts.
    """

    def __init__(self, cluster: SparkCluster | SparkSession, manifest: GenevaManifest | None, what: str) -> None:
        from geneva_provider.pipeline.spark.contexts import prepare

        self.what = what
        self.cluster = cluster
        self.manifest = manifest or GenevaManifest()
        self._shipment: Shipment | None = None
        prepare(self.manifest, what).clean()  # every entry is found now, not once Spark is up
        self.spark: SparkSession | None = None
        self._started = False

    def __enter__(self) -> SparkSession:
        from geneva_provider.pipeline.spark.contexts import (
            check_requirements,
            describe,
            enter_context,
            open_session,
            prepare,
            ship,
            stop_session,
        )

        if self.spark is not None:
            raise InvalidArgumentError(f"{self.what}: this context is entered already; leave it first")
        if isinstance(self.cluster, SparkCluster):
            spark, started = open_session(self.cluster, self.what)
        else:
            spark, started = self.cluster, False
        shipment = prepare(self.manifest, self.what)
        try:
            ship(spark, shipment)
            check_requirements(spark, self.manifest.pip, self.what)
        except BaseException:
            shipment.clean()
            if started:
                stop_session(spark)
            raise
        self.spark, self._started, self._shipment = spark, started, shipment
        enter_context(spark)
        log.info("%s: jobs run on %s%s", self.what, describe(spark), "" if started else " (already running)")
        return spark

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        from geneva_provider.pipeline.spark.contexts import leave_context, stop_session

        spark, self.spark = self.spark, None
        if spark is None:
            return
        leave_context(spark)
        try:
            if self._started:
                stop_session(spark)
        finally:
            if self._shipment is not None:
                self._shipment.clean()
                self._shipment = None


def as_cluster(cluster: Any, what: str) -> SparkCluster | SparkSession:
    """``cluster`` as a :class:`SparkCluster` (a master or ``sc://`` URL string, or one already), or a session."""
    from geneva_provider.pipeline.spark.runner import is_session

    if cluster is None:
        return SparkCluster()
    if isinstance(cluster, SparkCluster):
        return cluster
    if isinstance(cluster, str):
        if not cluster.strip():
            raise InvalidArgumentError(f"{what}: cluster must be a Spark master, an sc:// URL, a defined cluster's "
                                       "name or a SparkSession, got ''")
        return SparkCluster(cluster)
    if is_session(cluster):
        return cluster  # type: ignore[no-any-return]
    raise InvalidArgumentError(f"{what}: cluster must be a Spark master ('local[4]', 'spark://host:7077'), an "
                               f"sc:// URL, a SparkCluster, a defined cluster's name or a SparkSession, got "
                               f"{cluster!r}")


def as_manifest(manifest: Any, what: str) -> GenevaManifest | None:
    if manifest is None or isinstance(manifest, GenevaManifest):
        return manifest
    raise InvalidArgumentError(f"{what}: manifest must be a GenevaManifest or a defined manifest's name, got "
                               f"{manifest!r}")


def local_context(manifest: GenevaManifest | None = None, *, num_cpus: int | None = None,
                  num_gpus: int | None = None, conf: dict[str, str] | None = None) -> ExecutionContext:
    """A context on a local Spark session of ``num_cpus`` cores (all by default) and ``num_gpus`` GPUs
    (a ``local-cluster`` master with them, as ``local_session(gpus=N)``)."""
    what = "local_context"
    for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidArgumentError(f"{what}: {name} must be a positive whole number, got {value!r}")
    master = f"local[{num_cpus}]" if num_cpus else "local[*]"
    return ExecutionContext(SparkCluster(master, dict(conf or {}), gpus=num_gpus), as_manifest(manifest, what), what)


def local_ray_context(manifest: GenevaManifest | None = None, *, num_cpus: int | None = None,
                      num_gpus: int | None = None, conf: dict[str, str] | None = None,
                      **ray_options: Any) -> ExecutionContext:
    """The reference's name for :func:`local_context`: a local *Spark* session, no Ray.

    Other keyword arguments the reference passes on to ``ray.init`` are accepted and ignored (warned).
    """
    if ray_options:
        message = (f"local_ray_context: {sorted(ray_options)} are Ray settings with no meaning on Spark: ignored "
                   "(the context starts a local Spark session)")
        log.warning(message)
        warnings.warn(message, stacklevel=2)
    return local_context(manifest, num_cpus=num_cpus, num_gpus=num_gpus, conf=conf)
