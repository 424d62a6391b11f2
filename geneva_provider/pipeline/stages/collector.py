"""Python's cycle collector kept off the objects a process held when it first ran a stage (pipeline).

A stage over many fragments makes tens of thousands of small objects that outlive the young collections (its
plan's fragment and task models, the staged-files records, Lance's fragment metadata), which trips CPython's
*full* collection: it walks every object of the process, ~200,000 once pyspark, pyarrow, lance, pandas and
pydantic are imported and a Spark session is up -- 0.15 to 0.45 s a walk on a loaded 2-core machine, measured
as the largest part of the driver's own cost of a backfill over 1,000 fragments (issue 44), where the 4-fragment
job never collects at all.  Those objects -- modules, classes, functions, the session's -- are the process's for
good, so the first stage moves them out of the collector's view (:func:`gc.freeze`); a full collection then
walks only what was made since.  The worker daemon does the same after its imports
(:mod:`geneva_provider.worker_daemon`).

A frozen object is still freed when its last reference goes; only a reference cycle among the objects held at
that moment is never collected -- garbage already there, or a cycle those objects form later.  In a process that
runs stages (an Airflow task, a spark-submit driver, the stand-alone stage runner, a script) that is the imports
and the session.  An interactive process (a notebook, a REPL) also holds its user's data, which it may drop later:
there nothing is frozen.
"""

from __future__ import annotations

import gc
import sys
import threading

_lock = threading.Lock()
_frozen = False


def keep_collections_small() -> None:
    """Freezes what the process holds, once: the first stage's imports and session are left out of every later
    full collection (a no-op after the first call)."""
    global _frozen
    if _frozen or _interactive():
        return
    with _lock:
        if not _frozen:
            gc.freeze()
            _frozen = True


def _interactive() -> bool:
    """A REPL or an IPython kernel (a notebook): the process holds its user's objects, not only imports."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "IPython" in sys.modules
