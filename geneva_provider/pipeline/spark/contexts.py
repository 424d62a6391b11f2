"""Execution contexts: the Spark session jobs given none run on, and the code a manifest ships to it (pipeline).

``db.context(...)`` (the facade) opens a session here, ships its manifest's modules and files with it and
makes it the *context session*: a backfill, refresh or compaction called without ``spark=`` inside the
``with`` block runs on it (:func:`context_session`).  On leaving, the context stops only what it started.
How the manifest travels: on a classic session ``sc.addPyFile`` / ``addFile`` / ``addArchive`` (what
``--py-files``, ``--files`` and ``--archives`` do), over Spark Connect ``spark.addArtifacts(...,
pyfile=True)`` (and ``file=`` / ``archive=``); each executor then puts the modules on its Python path.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError, SparkEnvironmentError
from geneva_provider.core.manifest import GenevaManifest, SparkCluster
from geneva_provider.pipeline.spark.runner import is_connect, local_session, running_context

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import SparkSession

log = logging.getLogger(__name__)

_CONTEXTS: list[SparkSession] = []  # the sessions of the contexts entered, innermost last (process-wide: a
_LOCK = threading.Lock()            # backfill_async's thread, started inside the block, uses it too)


def context_session() -> SparkSession | None:
    """The session of the innermost execution context entered in this process, None outside any."""
    with _LOCK:
        return _CONTEXTS[-1] if _CONTEXTS else None


def enter_context(spark: SparkSession) -> None:
    with _LOCK:
        _CONTEXTS.append(spark)


def leave_context(spark: SparkSession) -> None:
    with _LOCK:
        for i in range(len(_CONTEXTS) - 1, -1, -1):
            if _CONTEXTS[i] is spark:
                del _CONTEXTS[i]
                return


# ------------------------------------------------------------------ the session
def open_session(cluster: SparkCluster, what: str) -> tuple[SparkSession, bool]:
    """A session on ``cluster`` and whether it was started here (and so is the context's to stop).

    A process runs one classic SparkContext: a running one is used when it is local and so is the
    cluster asked for (its master may differ: warned), else SparkEnvironmentError says so -- jobs meant
    for a cluster must not run on this machine unnoticed.
    """
    if cluster.is_connect:
        from geneva_provider.pipeline.spark.connect import connect_session

        return connect_session(cluster.master), True
    running = running_context()
    if running is not None and running.master != cluster.master and not (
            _is_local(running.master) and _is_local(cluster.master)):
        raise SparkEnvironmentError(
            f"{what}: a SparkSession on master '{running.master}' already runs in this process, and a process "
            f"runs one: master '{cluster.master}' cannot be started beside it. Stop it first (spark.stop()), or "
            "pass it as the cluster (db.context(cluster=spark)); it was left as it was.")
    return (local_session(cluster.master, app_name="geneva", conf=dict(cluster.conf), gpus=cluster.gpus),
            running is None)


def _is_local(master: str | None) -> bool:
    return bool(master) and str(master).startswith("local")


def stop_session(spark: SparkSession) -> None:
    """Stops a session a context started: a classic one, or a Spark Connect client session (released)."""
    if is_connect(spark):
        from geneva_provider.pipeline.spark.connect import close_session

        close_session(spark)
    else:
        spark.stop()


# ------------------------------------------------------------------ the manifest's code
@dataclass
class Shipment:
    """What a manifest sends with a session: files to put on the workers' Python path, plain files, archives,
    and the zips made for it here (removed when the context ends, unless kept)."""

    pyfiles: list[str]
    files: list[str]
    archives: list[str]
    made: list[str]
    keep_zips: bool

    def clean(self) -> None:
        if not self.keep_zips:
            for path in self.made:
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def prepare(manifest: GenevaManifest, what: str) -> Shipment:
    """Finds every module, file and archive of ``manifest`` on this machine, zipping package directories.

    InvalidArgumentError naming the entry when one cannot be found (before any Spark starts).
    """
    made: list[str] = []
    out_dir = manifest.local_zip_output_dir
    pyfiles = []
    for entry in manifest.py_modules:
        path = _module_path(entry, what)
        if os.path.isdir(path):
            target_dir = out_dir or tempfile.mkdtemp(prefix="geneva-manifest-")
            os.makedirs(target_dir, exist_ok=True)
            path = _zip_package(path, target_dir)
            if out_dir is None:
                made.append(path)
        pyfiles.append(path)
    for kind, paths in (("files", manifest.files), ("archives", manifest.archives)):
        for p in paths:
            if not os.path.isfile(p):
                raise InvalidArgumentError(f"{what}: manifest {kind} entry {p!r} is not a file on this machine")
    _check_requirements_syntax(manifest.pip, what)
    return Shipment(pyfiles, [os.path.abspath(p) for p in manifest.files],
                    [os.path.abspath(p) for p in manifest.archives], made,
                    keep_zips=not manifest.delete_local_zips)


def _module_path(entry: str, what: str) -> str:
    """The file or package directory of a manifest's ``py_modules`` entry: a path, or an importable name."""
    if os.path.exists(entry):
        path = os.path.abspath(entry)
        if os.path.isfile(path) and not path.endswith((".py", ".zip", ".egg")):
            raise InvalidArgumentError(f"{what}: manifest py_modules entry {entry!r} must be a .py file, a .zip "
                                       "or .egg, a package directory, or a module name")
        return path
    top = entry.split(".", 1)[0]
    try:
        spec = importlib.util.find_spec(top) if top.isidentifier() else None
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise InvalidArgumentError(f"{what}: manifest py_modules entry {entry!r} is neither a path nor a module "
                                   "importable here")
    if spec.submodule_search_locations:  # a package: its directory
        return os.path.abspath(next(iter(spec.submodule_search_locations)))
    if not spec.origin or not spec.origin.endswith(".py"):
        raise InvalidArgumentError(f"{what}: manifest py_modules entry {entry!r} is not a Python source module "
                                   f"({spec.origin}): install it on the workers and list it in pip instead")
    return os.path.abspath(spec.origin)


def _zip_package(directory: str, out_dir: str) -> str:
    """A zip holding ``directory`` as a top-level package (its ``.py`` and data files, no caches)."""
    name = os.path.basename(os.path.normpath(directory))
    target = os.path.join(out_dir, f"{name}.zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(Path(directory).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                zf.write(path, f"{name}/{path.relative_to(directory)}")
    return target


def ship(spark: SparkSession, shipment: Shipment) -> None:
    """Sends the shipment with ``spark``: its modules go on every executor's Python path."""
    if is_connect(spark):
        for paths, kind in ((shipment.pyfiles, "pyfile"), (shipment.files, "file"), (shipment.archives, "archive")):
            for path in paths:
                try:
                    spark.addArtifacts(path, **{kind: True})
                except Exception as exc:  # a resumed session holding it already (same name, same content)
                    if "ARTIFACT_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                        raise
        return
    sc = spark.sparkContext
    for path in shipment.pyfiles:
        sc.addPyFile(path)
    for path in shipment.files:
        sc.addFile(path)
    for path in shipment.archives:
        sc.addArchive(path)
    if shipment.pyfiles or shipment.files or shipment.archives:
        log.info("shipped to the Spark workers: %s", ", ".join(
            os.path.basename(p) for p in (*shipment.pyfiles, *shipment.files, *shipment.archives)))


# ------------------------------------------------------------------ pip requirements
def _check_requirements_syntax(requirements: Sequence[str], what: str) -> None:
    from packaging.requirements import InvalidRequirement, Requirement

    for text in requirements:
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise InvalidArgumentError(f"{what}: manifest pip requirement {text!r} is not a requirement ({exc})"
                                       ) from None


def check_requirements(spark: SparkSession, requirements: Sequence[str], what: str) -> None:
    """SparkEnvironmentError naming each requirement a Spark worker lacks (one probe task; Spark installs nothing)."""
    if not requirements:
        return
    from geneva_provider.pipeline.spark.task_runner import task_runner

    missing = task_runner(spark).run_tasks([list(requirements)], _missing_requirements,
                                           description="geneva: check the manifest's pip requirements")
    problems = [p for found in missing for p in found]
    if problems:
        raise SparkEnvironmentError(f"{what}: the Spark workers lack the manifest's pip requirements: "
                                    f"{'; '.join(problems)}. Install them where the executors' Python runs "
                                    "(Spark installs no packages)")


def _missing_requirements(tasks: Iterator[list[str]]) -> Iterator[list[str]]:
    """Runs on a Python worker: the requirements it lacks, each with what it has instead."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    for requirements in tasks:
        problems = []
        for text in requirements:
            req = Requirement(text)
            try:
                have = version(req.name)
            except PackageNotFoundError:
                problems.append(f"{text} (not installed)")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                problems.append(f"{text} (installed: {have})")
        yield problems


def describe(spark: Any) -> str:
    """The session, as a log line names it (never an sc:// URL's token)."""
    if is_connect(spark):
        from geneva_provider.pipeline.spark.connect import session_url

        return f"Spark Connect {session_url(spark)}"
    return f"master '{spark.sparkContext.master}'"


def ship_manifest(runner: Any, manifest: GenevaManifest, what: str) -> None:
    """Ships a UDF's manifest to the session a job runs on (a task runner in this process needs none)."""
    spark = getattr(runner, "spark", None)
    if spark is None:
        return
    shipment = prepare(manifest, what)
    try:
        ship(spark, shipment)  # copied to Spark (classic) or uploaded (Connect) here: the zips may go after
        check_requirements(spark, manifest.pip, what)
    finally:
        shipment.clean()
