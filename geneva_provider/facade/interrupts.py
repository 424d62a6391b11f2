"""Ctrl-C during a job run in the foreground (``tbl.backfill()``, ``view.refresh()``): the job cancels itself.

pyspark's own SIGINT handler calls the JVM from inside the handler, in the middle of the very py4j call the
main thread is blocked in (the job's ``collect``): py4j fails with a "reentrant call", and the interpreter
then prints some 120 lines of py4j tracebacks and the JVM its own, around the package's one line.  While a
job runs in the main thread, its own handler takes the place of pyspark's (and of Python's): the first
Ctrl-C asks the job to cancel -- from another thread, as ``geneva-provider jobs cancel`` or a handle's
``cancel()`` does -- so its Spark tasks stop, it records itself cancelled with nothing half-committed, and a
rerun resumes from its checkpoints; then a ``KeyboardInterrupt`` ends the call, as Ctrl-C should, with a
one-line message and no chained tracebacks.  A second Ctrl-C raises at once.  The previous handler is
put back afterwards (pyspark's, when the job started the session).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from geneva_provider.pipeline.jobs import JobControl

log = logging.getLogger("geneva_provider.progress")


class InterruptGuard:
    """The SIGINT handler of one foreground job (only in the main thread: elsewhere it does nothing)."""

    def __init__(self, control: JobControl, label: str) -> None:
        self.control = control
        self.label = label
        self.interrupted = False
        self._previous: Any = None
        self._installed = False

    def install(self) -> None:
        """Makes this guard the SIGINT handler; again after a Spark session started meanwhile took it over."""
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGINT)
        if current == self._handle:
            return
        self._previous = current
        signal.signal(signal.SIGINT, self._handle)
        self._installed = True

    def restore(self) -> None:
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted:  # a second Ctrl-C: stop waiting for the cancel
            raise KeyboardInterrupt(f"{self.label}: interrupted again while cancelling")
        self.interrupted = True
        log.warning("%s: interrupted: cancelling the job (Ctrl-C again to stop at once)", self.label)
        # Not from here: the main thread may be inside a py4j call, which a JVM call from its handler breaks.
        threading.Thread(target=self.control.cancel, name="geneva-interrupt", daemon=True).start()

    def stopped(self, finished: bool = False) -> KeyboardInterrupt:
        """The ``KeyboardInterrupt`` that ends the interrupted call (raised ``from None``: no chained tracebacks)."""
        summary = self.control.summary
        job = f"job {summary.job_id}" if summary is not None and not summary.nothing_to_do else "the job"
        if finished:
            return KeyboardInterrupt(f"{self.label}: interrupted; {job} had finished before the cancel took effect")
        return KeyboardInterrupt(f"{self.label}: interrupted; {job} was cancelled and committed nothing more "
                                 "(running it again resumes from its checkpoints)")


@contextmanager
def cancel_on_interrupt(control: JobControl, label: str) -> Iterator[InterruptGuard]:
    """Ctrl-C cancels the job ``control`` runs while the block runs (see the module's docstring)."""
    guard = InterruptGuard(control, label)
    guard.install()
    try:
        yield guard
    finally:
        guard.restore()
