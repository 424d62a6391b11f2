"""What the screenshot scripts beside this file share: a free port on 127.0.0.1 and headless Chromium.

Chromium comes from the system (``/usr/bin/chromium``), driven by Playwright (the ``screenshots`` extra), in a
fresh profile, with flags that keep it off the network; a script that fails leaves a picture of the page
it was on in the temp dir, so the failure can be seen.
"""

from __future__ import annotations

import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def chromium(executable: str, profile: Path, failed_name: str, **launch: Any) -> Iterator[Any]:
    """A headless Chromium browser context (Playwright's, ``launch`` its options) in the fresh ``profile``.

    When the block fails, its last page is saved as ``failed_name`` in the temp dir (said on stderr); the
    browser is closed whatever happens.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(profile, executable_path=executable, headless=True,
                                                        args=CHROMIUM_FLAGS, **launch)
        try:
            yield browser
        except Exception:
            failed = Path(tempfile.gettempdir()) / failed_name
            with suppress(Exception):
                browser.pages[-1].screenshot(path=failed, full_page=True)
                print(f"the page when it failed: {failed}", file=sys.stderr)
            raise
        finally:
            browser.close()
