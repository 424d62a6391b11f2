"""The unit tier starts no JVM, and says so when one is asked for: a `java` that records its call and refuses.

`tests/unit/conftest.py` puts a :class:`JavaTripwire` first on ``PATH`` and as ``JAVA_HOME`` while the unit
tests run, so every way Spark starts a JVM -- pyspark's gateway in this process, ``spark-submit`` in a child,
a Connect server -- runs the tripwire instead of Java (``spark-class`` runs ``$JAVA_HOME/bin/java``).  It
appends the call to its log and exits non-zero, so the test that asked fails there, and the tier's fixture
fails the run naming every call.  No JVM starts, so ``make test-unit`` stays fast even when it trips.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import psutil

EXIT_CODE = 97


class JavaTripwire:
    """``root/bin/java``: logs ``<pid> <args>`` to ``root/calls.log`` and exits :data:`EXIT_CODE`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "calls.log"
        java = root / "bin" / "java"
        java.parent.mkdir(parents=True, exist_ok=True)
        java.write_text("#!/bin/sh\n"
                        f"echo \"$$ $*\" >> '{self.log}'\n"
                        "echo 'java: the unit tier starts no JVM (see tests/unit/java_tripwire.py)' >&2\n"
                        f"exit {EXIT_CODE}\n")
        java.chmod(java.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with the tripwire as ``JAVA_HOME`` and first on ``PATH``."""
        return {**base, "JAVA_HOME": str(self.root), "PATH": f"{self.root / 'bin'}{os.pathsep}{base.get('PATH', '')}"}

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def java_descendants(pid: int | None = None) -> list[str]:
    """The live ``java`` processes under ``pid`` (this process by default), as ``pid cmdline`` lines."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.name() == "java":
                found.append(f"{child.pid} {' '.join(child.cmdline())[:200]}")
        except psutil.NoSuchProcess:
            continue
    return found
