"""What an execution context ships to the Spark workers, and which Spark it runs on (core, plain data).

The reference system (LanceDB Geneva) calls these a *manifest* (``GenevaManifest``: pip requirements,
the user's own modules, files) and a *cluster*; ``db.context(cluster=..., manifest=...)`` runs the
jobs inside it on that cluster with that code.  Here a cluster is a Spark master (``local[4]``,
``spark://host:7077``) or a Spark Connect URL (``sc://host:15002``), and the manifest's modules and
files travel with the Spark session (``--py-files`` / ``addArtifacts``), so a UDF that imports a module
existing only on the driver's disk runs on the executors.  Checked as they are made: a bad value is an
:class:`~geneva_provider.core.errors.InvalidArgumentError` naming the argument, before any Spark starts.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from geneva_provider.core.manifest_builder import PipManifestBuilder, SiteManifestBuilder


def _strings(value: object, what: str) -> tuple[str, ...]:
    """``value`` as a tuple of non-empty strings (one string alone is taken as a list of one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidArgumentError(f"{what} must be a list of non-empty strings, got {value!r}")
    return tuple(v.strip() for v in value)


@dataclass(frozen=True)
class GenevaManifest:
    """The code and packages the jobs of an execution context need on the Spark workers.

    * ``py_modules``: the user's modules and packages -- an importable name (``"my_module"``, resolved on
      this machine), a ``.py`` file, a package directory or a ``.zip``/``.egg`` -- shipped to every
      executor's Python path.
    * ``pip``: requirements (``"numpy>=1.26"``) the workers must have installed; checked on a worker when
      the context starts (Spark installs nothing), :class:`~geneva_provider.core.errors.SparkEnvironmentError`
      naming what is missing.
    * ``files`` / ``archives``: files each task finds with ``pyspark.SparkFiles.get(name)``; archives
      (``.zip``, ``.tar.gz``) unpacked in the executor's working directory.
    * ``skip_site_packages`` is accepted and has no effect: this machine's site-packages are never
      shipped (the workers run their own environment; list what they need in ``pip``).
    * ``local_zip_output_dir``: where the zips of package directories are written (a temporary directory
      by default); ``delete_local_zips`` removes them when the context ends.
    * ``version``: the user's label for this revision of the manifest, recorded with it.

    The reference's builders make the same manifest step by step: ``GenevaManifest.create_pip(name)`` and
    ``create_site(name)`` (:mod:`geneva_provider.core.manifest_builder`).
    """

    name: str | None = None
    pip: Sequence[str] = ()
    py_modules: Sequence[str] = ()
    files: Sequence[str] = ()
    archives: Sequence[str] = ()
    skip_site_packages: bool = True
    local_zip_output_dir: str | None = None
    delete_local_zips: bool = True
    version: str | None = None

    @staticmethod
    def create_pip(name: str) -> PipManifestBuilder:
        """The reference's builder of a pip manifest: ``GenevaManifest.create_pip("deps").pip([...]).build()``."""
        from geneva_provider.core.manifest_builder import PipManifestBuilder

        return PipManifestBuilder.create(name)

    @staticmethod
    def create_site(name: str) -> SiteManifestBuilder:
        """The reference's builder of a manifest of the user's modules (``.py_modules([...])``) alone."""
        from geneva_provider.core.manifest_builder import SiteManifestBuilder

        return SiteManifestBuilder.create(name)

    def __post_init__(self) -> None:
        label = f"GenevaManifest {self.name!r}" if self.name else "GenevaManifest"
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise InvalidArgumentError(f"{label}: name must be a non-empty string, got {self.name!r}")
        if self.version is not None and (not isinstance(self.version, str) or not self.version.strip()):
            raise InvalidArgumentError(f"{label}: version must be a non-empty string, got {self.version!r}")
        for attr in ("pip", "py_modules", "files", "archives"):
            object.__setattr__(self, attr, _strings(getattr(self, attr), f"{label}: {attr}"))
        for attr in ("skip_site_packages", "delete_local_zips"):
            if not isinstance(getattr(self, attr), bool):
                raise InvalidArgumentError(f"{label}: {attr} must be True or False, got {getattr(self, attr)!r}")
        if self.local_zip_output_dir is not None and (not isinstance(self.local_zip_output_dir, str)
                                                      or not self.local_zip_output_dir.strip()):
            raise InvalidArgumentError(f"{label}: local_zip_output_dir must be a directory path, got "
                                       f"{self.local_zip_output_dir!r}")


@dataclass(frozen=True)
class SparkCluster:
    """Where an execution context's jobs run: a Spark ``master`` (``local[*]``, ``spark://host:7077``, ``yarn``)
    or a Spark Connect URL (``sc://host:15002``), with Spark settings ``conf`` for a session it starts.

    The reference's ``GenevaCluster`` describes a KubeRay cluster; on Spark the cluster manager (standalone,
    YARN, Kubernetes) is the master's, and its sizes are Spark settings (``spark.executor.cores``, ...).
    """

    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None
    gpus: int | None = None  # a local master's GPUs: a local-cluster with them (``local_session(gpus=N)``)

    def __post_init__(self) -> None:
        if not isinstance(self.master, str) or not self.master.strip():
            raise InvalidArgumentError(f"SparkCluster: master must be a Spark master or an sc:// URL, got "
                                       f"{self.master!r}")
        if not isinstance(self.conf, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                         for k, v in self.conf.items()):
            raise InvalidArgumentError("SparkCluster: conf must be a dict of Spark settings (strings to strings)")
        object.__setattr__(self, "master", self.master.strip())

    @property
    def is_connect(self) -> bool:
        """True for a Spark Connect URL (``sc://...``)."""
        return self.master.startswith("sc://")

    def __repr__(self) -> str:  # an sc:// URL may carry a token: never shown
        shown = self.master.split(";", 1)[0].rstrip("/") if self.is_connect else self.master
        return f"SparkCluster(master={shown!r}{f', name={self.name!r}' if self.name else ''})"


def missing_module_advice(module: str | None) -> str:
    """What to do about a module a UDF needs that the Python running it cannot import."""
    name = (module or "").split(".", 1)[0] or "the module"
    return (f"module '{name}' is not importable where the UDF runs ({sys.executable}): ship it to the Spark "
            f"workers with a manifest, db.context(manifest=GenevaManifest(py_modules=['{name}'])), or install "
            "it there")
