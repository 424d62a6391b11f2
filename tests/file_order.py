"""The order in which pytest-xdist hands test files to its workers: the longest first.

Why: ``make test`` runs the Spark, Airflow and system tiers with ``--dist loadfile`` (a file's tests and
its module-scoped servers stay on one worker).  xdist's own order is "most tests first", which puts the
files of two long tests (a standalone cluster, killed jobs) last: one worker then ran them alone for the
last minutes while the others had finished.  Handing out the longest files first (the classic
longest-processing-time rule) leaves only short files for the end, so every worker stays busy to it.

The expected seconds per file are in ``tests/file_durations.json`` (from a ``--junitxml`` report of a
``make test`` run); a file it does not know counts as :data:`UNKNOWN_SECONDS`.  To refresh it::

    make test PYTEST_ARGS=--junitxml=/tmp/run.xml && python -m tests.file_order /tmp/run.xml

A stale file only makes the run less balanced, never wrong: every test still runs, in the same worker as
the rest of its file.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

DURATIONS = Path(__file__).with_name("file_durations.json")
UNKNOWN_SECONDS = 10.0


def expected_seconds() -> dict[str, float]:
    """Test file (relative to the repository, ``tests/...``) -> its expected seconds."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except FileNotFoundError:
        return {}


def longest_first(paths: list[str], seconds: dict[str, float]) -> list[str]:
    """``paths`` (each once), the longest expected first; ties keep their order."""
    return sorted(dict.fromkeys(paths), key=lambda p: -seconds.get(p, UNKNOWN_SECONDS))


def durations_from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file in a pytest ``--junitxml`` report (set-up, call and tear-down of its tests)."""
    root = Path(__file__).resolve().parents[1]
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.tier.test_x, or tests.tier.test_x.TestClass
        path = next((p for p in ("/".join(parts[:n]) + ".py" for n in (len(parts), len(parts) - 1))
                     if p.startswith("tests/") and (root / p).is_file()), None)
        if path is not None:
            seconds[path] += float(case.get("time") or 0)
    return {path: round(value, 1) for path, value in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.file_order JUNIT_XML", file=sys.stderr)
        return 2
    measured = durations_from_junit(Path(argv[0]))
    if not measured:
        print(f"no test cases of tests/ in {argv[0]}", file=sys.stderr)
        return 1
    DURATIONS.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    print(f"{DURATIONS}: {len(measured)} files, {sum(measured.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
