"""This machine's warm Spark Connect session per server and code version: the session the next job's stages resume.

A new Connect session costs a job's first stage more than its work on a small increment: the package's upload, the
probe job, and a new Python daemon on the server importing pyarrow and pylance (measured over the embedded server
on this project's 2-core VM under load: 6 to 11 s to open a session and 1.0 s for the first job on it, against 2 to
4 s to resume a kept one and 0.25 to 0.6 s for the job).  So a job's stages do not open a session of their own:
they resume this machine's warm session for the server and the code (:func:`~geneva_provider.pipeline.spark.connect.
code_marker`), tag their work with the job's tag, and leave the session open when they end.  Every job on the
server then shares one Python daemon per code version, kept warm, instead of one per job.

The session's id is remembered in a file per (server, code marker, user) under ``GENEVA_CONNECT_SESSIONS_DIR``
(default ``~/.cache/geneva-provider/connect-sessions``): the id is not a secret (the server's URL and token never
go there).  The server releases the session after its idle timeout
(``spark.connect.session.manager.defaultSessionTimeout``); the next job then finds it gone and opens another, which
becomes the warm one.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

SESSIONS_DIR_ENV = "GENEVA_CONNECT_SESSIONS_DIR"


def _path(server: str, marker: str) -> Path:
    base = os.environ.get(SESSIONS_DIR_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "geneva-provider", "connect-sessions")
    key = hashlib.sha256(f"{server}|{marker}|{getpass.getuser()}".encode()).hexdigest()[:32]
    return Path(base) / key


def known(server: str, pyfiles: Sequence[str]) -> str | None:
    """The id of the warm session for ``server`` (``sc://host:port``) and this code, if one was remembered."""
    from geneva_provider.pipeline.spark.connect import code_marker

    try:
        text = _path(server, code_marker(pyfiles)).read_text().strip()
    except OSError:
        return None
    return text or None


def remember(server: str, pyfiles: Sequence[str], session_id: str) -> None:
    """Makes ``session_id`` the warm session for ``server`` and this code (atomically: a concurrent job reads the
    old id or the new one, never half of one)."""
    from geneva_provider.pipeline.spark.connect import code_marker

    path = _path(server, code_marker(pyfiles))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".session-")
    with os.fdopen(fd, "w") as f:
        f.write(session_id)
    os.replace(tmp, path)
