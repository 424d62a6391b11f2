"""One exact state of a Lance table on a local disk, read from its directory without opening it (core).

Every commit to a Lance table writes a new manifest in ``_versions/`` (the table format's naming: ``{v}.manifest``
or zero-padded ``{u64::MAX - v:020}.manifest``), and nothing changes a manifest once written.  So the newest
manifest's name (its version) and its file's identity (inode, size, modification time) name what the table holds:
a later commit adds a newer manifest, and a table dropped and created again at the same path writes new files.
Reading that costs a directory listing and a ``stat`` -- no ``import lance``, whose ``pyarrow.dataset`` imports
pandas (~0.3 s): what a request whose answer is known for that state (a backfill found up to date,
:mod:`geneva_provider.operations.unchanged`) saves an hourly Airflow task.

Tables on an object store get no state here (``None``): they are opened as usual.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict

_U64_MAX = 2**64 - 1
_INVERTED_DIGITS = 20  # the zero-padded names of the "V2" manifest naming scheme
_MANIFEST = ".manifest"


class TableState(BaseModel):
    """The newest manifest of a table's directory: its version and its file's identity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int
    manifest: str
    inode: int
    size: int
    mtime_ns: int


def local_path(uri: str) -> str | None:
    """The directory of a table URI on a local disk (a path or ``file://``), else None."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    return None if "://" in uri else uri


def manifest_version(name: str) -> int | None:
    """The version a file of ``_versions/`` holds, None for a file that is not a version's manifest (a detached
    version's ``d...``, a hint, a temporary file)."""
    stem = name[:-len(_MANIFEST)] if name.endswith(_MANIFEST) else None
    if not stem or not stem.isdigit():
        return None
    return _U64_MAX - int(stem) if len(stem) == _INVERTED_DIGITS else int(stem)


def local_table_state(uri: str) -> TableState | None:
    """The state of the table at ``uri`` when it is on a local disk and has a version; None otherwise."""
    path = local_path(uri)
    if path is None:
        return None
    versions = os.path.join(path, "_versions")
    try:
        names = os.listdir(versions)
    except OSError:
        return None
    found = [(v, n) for n in names if (v := manifest_version(n)) is not None]
    if not found:
        return None
    version, name = max(found)
    try:
        st = os.stat(os.path.join(versions, name))
    except OSError:  # cleaned up meanwhile: no state to trust
        return None
    return TableState(version=version, manifest=name, inode=st.st_ino, size=st.st_size, mtime_ns=st.st_mtime_ns)


class UpToDate(BaseModel):
    """A request found nothing to do at a table's ``state``; a job's plan request, with its no-op plan document
    (``plan``, JSON), which the same request at the same state gets again under a new job id -- both without the
    table being opened."""

    model_config = ConfigDict(extra="forbid")

    state: TableState
    plan: str | None = None


class PlanOrigin(BaseModel):
    """The request a job with work was planned for (its JSON, and the options beside it) and that request's digest:
    what its verify task plans again, dry, once the job is done, to record the table up to date for it."""

    model_config = ConfigDict(extra="forbid")

    request: str
    options: dict[str, Any] | None = None
    digest: str
