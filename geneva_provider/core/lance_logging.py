"""Keeping Lance's output to what a user should read.

Every DataReplacement commit -- the way a backfill lands a column -- makes Lance's Rust core print
``WARN lance_table::transaction::manifest_build] Building manifest with DataReplacement operation.
This operation is not stable yet``.  It says nothing about the commit at hand, and Airflow files a
task's stderr at level ``error``, so alerts on error lines would fire on every commit.  Lance
reads its Rust log filter from ``LANCE_LOG`` once, when ``lance`` is first imported, so the
package adds one directive to it before that: that module logs errors only, every other Lance
warning and error still shows.  A ``LANCE_LOG`` the user set is kept, and one that already
names the module wins.  Child processes (Spark's JVM, its Python workers, spark-submit programs)
inherit it.
"""

from __future__ import annotations

import os
import sys

ENV = "LANCE_LOG"
MODULE = "lance_table::transaction::manifest_build"
DIRECTIVE = f"{MODULE}=error"
DEFAULT_LEVEL = "warn"  # Lance's own default when LANCE_LOG is unset


def quiet_commit_warnings() -> bool:
    """Adds the directive to ``LANCE_LOG``; False when too late (lance already imported) or the user chose."""
    if "lance" in sys.modules:
        return False
    current = os.environ.get(ENV, "").strip().strip(",")
    if MODULE in current:
        return False
    # A filter made only of module directives would switch every other module off: keep a default level.
    os.environ[ENV] = f"{current or DEFAULT_LEVEL},{DIRECTIVE}"
    return True


FORK_WARNING = r"lance is not fork-safe"


def ignore_fork_warning() -> None:
    """Inside a ``warnings.catch_warnings()`` block: drops pylance's fork warning.

    pylance warns whenever a process that imported it forks.  Launching Spark's JVM (py4j's
    ``Popen(preexec_fn=...)``) is a fork followed at once by an exec -- no Lance state is used
    in the child -- so the warning is wrong there, and only there is it dropped.
    """
    import warnings

    warnings.filterwarnings("ignore", message=FORK_WARNING, category=UserWarning)
