"""What an execution context ships to the Spark workers, and which Spark it runs on (core, plain data).

The reference system (LanceDB Geneva) calls these a *manifest* (``GenevaManifest``: pip requirements,
the user's own modules, files) and a *cluster*; ``db.context(cluster=..., manifest=...)`` runs the
jobs inside it on that cluster with that code.  Here a cluster is a Spark master (``local[4]``,
``spark://host:7077``) or a Spark Connect URL (``sc://host:15002``), and the manifest's modules and
files travel with the Spark session (``--py-files`` / ``addArtifacts``), so a UDF that imports a module
existing only on the driver's disk runs on the executors.  Checked as they are made: a bad value is an
:class:`~geneva_provider.core.errors.InvalidArgumentError` naming the argument, before any Spark starts.
The reference's builders (``GenevaManifest.create_pip(name).pip([...]).build()``) make the same manifest
step by step.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from typing import Self


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
    ``create_site(name)`` (:class:`PipManifestBuilder`, :class:`SiteManifestBuilder`, below).
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
        return PipManifestBuilder.create(name)

    @staticmethod
    def create_site(name: str) -> SiteManifestBuilder:
        """The reference's builder of a manifest of the user's modules (``.py_modules([...])``) alone."""
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


# ---------------------------------------------------------------------- the reference's builders
# ``GenevaManifest.create_pip("name").pip([...]).build()``: the reference builds a manifest step by step, one
# builder per kind of environment (pip or site-packages; its conda builder feeds Ray's conda environments,
# which Spark has no counterpart of).  Each step checks its value as it is given, and ``build()`` returns the
# same GenevaManifest the constructor makes.  What a Ray cluster does with the rest has no meaning on Spark
# and is refused rather than dropped: container images are the cluster's
# (``spark.kubernetes.container.image``), environment variables the session's (``spark.executorEnv.NAME``).


class ManifestBuilder:
    """What every builder sets: the manifest's name and version, the user's modules, and the zip options."""

    def __init__(self) -> None:
        self._name: str | None = None
        self._version: str | None = None
        self._py_modules: list[str] = []
        self._upload_site_packages = False
        self._delete_local_zips: bool | None = None  # None: the manifest's default (True)
        self._local_zip_output_dir: str | None = None

    @classmethod
    def create(cls, name: str) -> Self:
        """A builder of a manifest called ``name``."""
        return cls().name(name)

    def _label(self) -> str:
        return f"GenevaManifest {self._name!r}" if self._name else "GenevaManifest"

    def name(self, name: str) -> Self:
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgumentError(f"{self._label()}: name must be a non-empty string, got {name!r}")
        self._name = name
        return self

    def version(self, version: str) -> Self:
        if not isinstance(version, str) or not version.strip():
            raise InvalidArgumentError(f"{self._label()}: version must be a non-empty string, got {version!r}")
        self._version = version
        return self

    def py_modules(self, modules: list[str]) -> Self:
        """The user's modules shipped to every executor (replaces those given before)."""
        self._py_modules = list(_texts(modules, f"{self._label()}: py_modules"))
        return self

    def add_py_module(self, module: str) -> Self:
        self._py_modules += _texts([module], f"{self._label()}: add_py_module")
        return self

    def upload_site_packages(self, upload: bool = True) -> Self:
        """Accepted for the reference's code; this machine's site-packages are never shipped (the workers run
        their own environment: list what they need with ``pip``)."""
        self._upload_site_packages = _flag(upload, f"{self._label()}: upload_site_packages")
        return self

    def delete_local_zips(self, delete: bool = True) -> Self:
        self._delete_local_zips = _flag(delete, f"{self._label()}: delete_local_zips")
        return self

    def local_zip_output_dir(self, output_dir: str) -> Self:
        self._local_zip_output_dir = output_dir
        return self

    def allow_unpinned(self, allow: bool = True) -> Self:
        """Accepted: requirements are checked on a worker as they are written, pinned or not."""
        _flag(allow, f"{self._label()}: allow_unpinned")
        return self

    # Ray's settings: refused, naming the Spark setting that does the same.
    def head_image(self, image: str) -> Self:
        return self._spark_setting("head_image", "the driver's image is the cluster's "
                                   "(spark.kubernetes.driver.container.image)")

    def worker_image(self, image: str) -> Self:
        return self._spark_setting("worker_image", "the executors' image is the cluster's "
                                   "(spark.kubernetes.executor.container.image)")

    def default_head_image(self) -> Self:
        return self.head_image("")

    def default_worker_image(self) -> Self:
        return self.worker_image("")

    def env_vars(self, env_vars: dict[str, str]) -> Self:
        return self._spark_setting("env_vars", "set executor environment variables in the session's conf "
                                   "(spark.executorEnv.NAME, e.g. SparkCluster(master, conf={...}))")

    def add_env_var(self, key: str, value: str) -> Self:
        return self.env_vars({key: value})

    def _spark_setting(self, method: str, instead: str) -> Self:
        raise InvalidArgumentError(f"{self._label()}: .{method}() configures a Ray cluster; on Spark {instead}")

    def _build(self, **kinds: Any) -> GenevaManifest:
        if self._name is None:
            raise InvalidArgumentError("GenevaManifest: a name is required: use .name(...) or create_pip(name)")
        if self._delete_local_zips is not None:
            kinds["delete_local_zips"] = self._delete_local_zips
        return GenevaManifest(name=self._name, version=self._version, py_modules=tuple(self._py_modules),
                              skip_site_packages=not self._upload_site_packages,
                              local_zip_output_dir=self._local_zip_output_dir, **kinds)


class PipManifestBuilder(ManifestBuilder):
    """A manifest of pip requirements (``.pip([...])`` or ``.requirements_path("requirements.txt")``): checked on
    a worker as the job's session starts (Spark installs nothing), each missing one named."""

    def __init__(self) -> None:
        super().__init__()
        self._pip: list[str] = []
        self._requirements_path: str | None = None

    def pip(self, packages: list[str]) -> PipManifestBuilder:
        self._pip = list(_texts(packages, f"{self._label()}: pip"))
        return self

    def add_pip(self, package: str) -> PipManifestBuilder:
        self._pip += _texts([package], f"{self._label()}: add_pip")
        return self

    def requirements_path(self, path: str) -> PipManifestBuilder:
        """A requirements file, read when the manifest is built (its requirement lines; not ``-r`` or options)."""
        if not isinstance(path, str | os.PathLike) or not os.path.isfile(path):
            raise InvalidArgumentError(f"{self._label()}: requirements_path {path!r} is not a file")
        self._requirements_path = os.fspath(path)
        return self

    def add_extra_index_url(self, url: str) -> PipManifestBuilder:
        """Accepted: Spark installs nothing, so no index is read; the requirements are checked, not installed."""
        _texts([url], f"{self._label()}: add_extra_index_url")
        return self

    def build(self) -> GenevaManifest:
        if self._pip and self._requirements_path is not None:
            raise InvalidArgumentError(f"{self._label()}: give pip requirements or a requirements_path, not both")
        pip = self._pip if self._requirements_path is None else _requirements(self._requirements_path)
        return self._build(pip=tuple(pip))


class SiteManifestBuilder(ManifestBuilder):
    """A manifest of the user's modules alone (the reference also uploads site-packages: here the workers keep
    their own environment)."""

    def __init__(self) -> None:
        super().__init__()
        self._upload_site_packages = True

    def build(self) -> GenevaManifest:
        return self._build()


def _texts(values: Any, what: str) -> list[str]:
    if isinstance(values, str) or not isinstance(values, list | tuple) or not all(
            isinstance(v, str) and v.strip() for v in values):
        raise InvalidArgumentError(f"{what} must be a list of non-empty strings, got {values!r}")
    return [v.strip() for v in values]


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be True or False, got {value!r}")
    return value


def _requirements(path: str) -> list[str]:
    """The requirement lines of a requirements file: no blanks, comments or pip options (``-r``, ``--index-url``)."""
    with open(path, encoding="utf-8") as f:
        lines = [line.split(" #", 1)[0].strip() for line in f]
    return [line for line in lines if line and not line.startswith(("#", "-"))]


def missing_module_advice(module: str | None) -> str:
    """What to do about a module a UDF needs that the Python running it cannot import."""
    name = (module or "").split(".", 1)[0] or "the module"
    return (f"module '{name}' is not importable where the UDF runs ({sys.executable}): ship it to the Spark "
            f"workers with a manifest, db.context(manifest=GenevaManifest(py_modules=['{name}'])), or install "
            "it there")
