"""The table versions a plan reads, checked before its Spark stages: a clean-up may have removed them since.

A plan pins the versions it was made from (the table's, and a view's source's): every task opens
them.  ``cleanup_old_versions`` between the plan and a later stage removes those manifests, and
each task would then fail with Lance's ``..._versions/N.manifest was not found`` wrapped in a Spark
stack trace.  The stage checks them on the driver first, and a task that meets it anyway (a clean-up
while the stage runs) raises the same :class:`TableVersionGoneError`, naming the table and the version.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from geneva_provider.core.errors import TableVersionGoneError

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import JobSpec
    from geneva_provider.core.lib_types import Dataset

# Lance's message for a version whose manifest is gone: "Dataset at path <uri>/_versions/<N>.manifest was not found".
# <N> is the version, or -- in a table with Lance's V2 manifest names (20 digits, newest first) -- 2**64 - 1 - version.
_GONE = re.compile(r"(?P<uri>\S+?)/_versions/(?P<version>\d+)\.manifest was not found")
_V2_NAME_DIGITS = 20


def pinned_versions(job: JobSpec) -> list[tuple[str, str, int]]:
    """``(table name, uri, version)`` of every table version the job's stages open."""
    pins = [(job.table, job.table_uri, job.read_version)]
    if job.source is not None:
        pins.append((table_name(job.source.uri), job.source.uri, job.source.version))
    if job.udtf is not None:
        pins.append((table_name(job.udtf.source_uri), job.udtf.source_uri, job.udtf.source_version))
    return pins


def check_pinned_versions(job: JobSpec, job_id: str, storage_options: dict[str, str] | None) -> None:
    """Raises :class:`TableVersionGoneError` when a version the job reads no longer exists (before any Spark job).

    Opening a version reads its manifest only.
    """
    for name, uri, version in pinned_versions(job):
        open_pinned(job, job_id, name, uri, version, storage_options)


def open_pinned(job: JobSpec, job_id: str | None, name: str, uri: str, version: int,
                storage_options: dict[str, str] | None) -> Dataset:
    """``uri`` at the pinned ``version``; :class:`TableVersionGoneError` naming ``name`` when it was cleaned up."""
    import lance

    try:
        return lance.dataset(uri, version=version, storage_options=storage_options)
    except (ValueError, OSError) as exc:
        if not version_gone(exc) or not _table_exists(uri, storage_options):
            raise
        raise gone_error(job, job_id, name, version) from None


def version_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is Lance failing to find a version's manifest."""
    return _GONE.search(str(exc)) is not None


def gone_error(job: JobSpec, job_id: str | None, name: str, version: int) -> TableVersionGoneError:
    """The error saying which version of which table vanished under which job, and what to do."""
    return TableVersionGoneError(
        f"version {version} of table '{name}' is gone (its versions were cleaned up after job "
        f"{job_id or '?'} was planned), and the {job.label()} reads it: plan again (a new plan reads the current "
        "version and reuses the rows already computed); clean up old versions only between jobs")


def translate_gone(job: JobSpec, job_id: str | None, exc: BaseException) -> TableVersionGoneError | None:
    """The package's error for a task that met a cleaned-up version of one of the job's tables (None otherwise)."""
    found = _GONE.search(str(exc))
    if found is None:
        return None
    version = manifest_version(found["version"])
    for name, uri, pinned in pinned_versions(job):
        if pinned == version and found["uri"].rstrip("/").endswith(uri.rstrip("/").split("://")[-1].lstrip("/")):
            return gone_error(job, job_id, name, version)
    return gone_error(job, job_id, table_name(found["uri"]), version)


def manifest_version(name: str) -> int:
    """The table version a manifest's file name (without ``.manifest``) stands for, in either of Lance's schemes."""
    number = int(name)
    return 2**64 - 1 - number if len(name) == _V2_NAME_DIGITS else number


def table_name(uri: str) -> str:
    """A table's name from its URI: the last path component without ``.lance``."""
    last = uri.rstrip("/").rsplit("/", 1)[-1]
    return last[:-len(".lance")] if last.endswith(".lance") else last


def _table_exists(uri: str, storage_options: dict[str, str] | None) -> bool:
    import lance

    try:
        lance.dataset(uri, storage_options=storage_options)
    except (ValueError, OSError):
        return False
    return True
