"""The warm Spark Connect session a worker remembers per server and code: found again for the same server and files,
not for another server or changed code, and nothing of a URL's token written down."""

from __future__ import annotations

from pathlib import Path

from geneva_provider.pipeline.spark import warm_sessions
from geneva_provider.pipeline.spark.connect import session_host


def test_a_remembered_session_is_the_one_of_its_server_and_code(tmp_path, monkeypatch):
    monkeypatch.setenv(warm_sessions.SESSIONS_DIR_ENV, str(tmp_path / "sessions"))
    code = tmp_path / "pkg.zip"
    code.write_bytes(b"version one")
    server = session_host("sc://spark.internal:15002/;token=very-secret-token;use_ssl=true")
    assert server == "sc://spark.internal:15002"
    assert warm_sessions.known(server, [str(code)]) is None
    warm_sessions.remember(server, [str(code)], "session-a")
    assert warm_sessions.known(server, [str(code)]) == "session-a"
    warm_sessions.remember(server, [str(code)], "session-b")  # a new warm session replaces it
    assert warm_sessions.known(server, [str(code)]) == "session-b"
    assert warm_sessions.known("sc://other:15002", [str(code)]) is None  # another server
    code.write_bytes(b"version two")  # the package changed: its sessions hold the old code
    assert warm_sessions.known(server, [str(code)]) is None
    written = [p.read_text() for p in Path(tmp_path / "sessions").iterdir()]
    assert written == ["session-b"] and not any("secret" in p.name for p in Path(tmp_path / "sessions").iterdir())
