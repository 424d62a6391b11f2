"""The progress of a job run from Python (``tbl.backfill``, ``view.refresh``), shown where it runs.

* a Jupyter / IPython kernel: tqdm's notebook widget (``tqdm.auto``);
* a terminal (stderr is a TTY of known width): one tqdm bar in rows, with rate and ETA; Spark's own
  ``[Stage N:`` console bar is stopped while it draws (both would redraw the same line) and given back after;
* anywhere else (a file, a pipe, an IDE console, a terminal of zero or unknown width, where a redrawn bar
  would break the output into a line per character): a line every ``LOG_SECONDS`` on the
  ``geneva_provider.progress`` logger, which prints by default: a process that configured no logging
  gets one handler on the ``geneva_provider`` logger (:func:`ensure_log_handler`).

A line says what the job does from the moment it is called (``planning ...``, then ``starting Spark ...``
before a session comes up), so the 15-35 s of a JVM's start are not silent.  Rows are those checkpointed
(the job's record, counted every quarter second) plus those its running UDF calls have computed since their
last checkpoint (their markers' heartbeats, every half second): within about a second of the UDF.  The
rate and the ETA are the recent ones (:class:`~geneva_provider.pipeline.stages.progress_lines.RecentRate`),
not averages since the start.  Airflow tasks do not come here: their operators log their own lines
(``stage_runner/progress.py``).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from typing import TYPE_CHECKING, Any, Literal

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.spark.runner import hide_console_bar, restore_console_bar, running_context
from geneva_provider.pipeline.spark.worker_deaths import rows_in_flight
from geneva_provider.pipeline.stages.job_records import read_record
from geneva_provider.pipeline.stages.progress_lines import RecentRate, eta_text

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import BackfillResult, JobRecord, PlanSummary
    from geneva_provider.core.lib_types import SparkContext
    from geneva_provider.core.store.checkpoint import CheckpointStore

Display = Literal["notebook", "terminal", "log"]

BAR_SECONDS = 0.25  # how often a bar or widget reads the job's rows and redraws
LOG_SECONDS = 5.0  # how often a progress line is logged
PACKAGE_LOGGER = "geneva_provider"
log = logging.getLogger(f"{PACKAGE_LOGGER}.progress")


def display_here() -> Display:
    """Where this process shows progress: a notebook kernel, a terminal, or else a log."""
    if in_notebook():
        return "notebook"
    try:
        tty = sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return "log"
    return "terminal" if tty and terminal_width() > 0 else "log"


def in_notebook() -> bool:
    """True inside a Jupyter (or other ZMQ) IPython kernel, where tqdm.auto draws a widget."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


def terminal_width() -> int:
    """The columns a bar on stderr may take: 0 when any source says 0 or none knows (``COLUMNS``, stderr's
    terminal, :func:`shutil.get_terminal_size`) -- a new pseudo-terminal, ``COLUMNS=0``: a bar redrawn there
    breaks the output, so the job logs lines instead."""
    widths = []
    if (env := os.environ.get("COLUMNS", "").strip()):
        try:
            widths.append(int(env))
        except ValueError:
            pass
    try:
        widths.append(os.get_terminal_size(sys.stderr.fileno()).columns)
    except (AttributeError, OSError, ValueError):
        pass
    try:
        widths.append(shutil.get_terminal_size((-1, -1)).columns)  # -1: it does not know
    except (OSError, ValueError):
        pass
    known = [w for w in widths if w >= 0]
    return min(known) if known else 0


def _recent_rate_bar(base: Any) -> Any:
    """``base`` (a tqdm class) showing the rate and ETA of its ``recent`` window instead of its own estimate."""

    class RecentRateBar(base):  # type: ignore[misc, valid-type]
        recent: RecentRate | None = None

        @property
        def format_dict(self) -> dict[str, Any]:
            d = super().format_dict
            if self.recent is not None:
                d["rate"] = self.recent.rate() or 0.0  # 0 until rows move: tqdm shows "?" for rate and ETA
            return d

    return RecentRateBar


class _PackageHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`ensure_log_handler` installs; it stands down once the root logger has one.

    It writes to whatever ``sys.stderr`` is when a line is logged, as Python's last-resort handler does, not to the
    stream that was stderr when it was installed: a notebook or a test harness that swaps stderr (and closes the
    old one) would otherwise get "--- Logging error ---" tracebacks for every later progress line.
    """

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:  # StreamHandler.__init__ sets it; the current sys.stderr is always used
        pass

    def filter(self, record: logging.LogRecord) -> bool:
        return not logging.getLogger().handlers and bool(super().filter(record))


def ensure_log_handler() -> None:
    """Makes the progress lines print in a process that configured no logging (a script, an IDE).

    Only when neither the ``geneva_provider`` logger nor the root logger has a handler: then one handler
    writing to stderr goes on ``geneva_provider`` and its progress logger logs INFO.  A process that
    configured logging (``basicConfig``, Airflow, pyspark's shell) keeps its own set-up; it is never done
    twice, and the handler stops writing once the root logger gets a handler later.
    """
    package = logging.getLogger(PACKAGE_LOGGER)
    if package.handlers or logging.getLogger().handlers:
        return
    handler = _PackageHandler()  # sys.stderr
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


class JobProgress:
    """Shows a foreground job's progress from its record and its running calls' heartbeats until closed."""

    def __init__(self, store: CheckpointStore, label: str, display: Display | None = None) -> None:
        self.store, self.label = store, label
        self.display: Display = display or display_here()
        self.summary: PlanSummary | None = None
        self.rows = 0  # what was shown last: it never goes back (a checkpoint's rows leave the markers first)
        self.bar: Any = None
        self.recent = RecentRate()
        self._first: int | None = None  # rows done when first read (a resumed job's earlier rows)
        self._hidden: SparkContext | None = None  # the context whose console bar this stopped
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="geneva-progress")
        if self.display == "log":
            ensure_log_handler()

    def say(self, text: str) -> None:
        """One line about the job (``<label>: <text>``) where its progress shows: a line of its own before a
        bar draws (a log line in a log)."""
        if self.display == "log":
            log.info("%s: %s", self.label, text)
            return
        try:
            print(f"{self.label}: {text}", file=sys.stderr, flush=True)
        except (AttributeError, OSError, ValueError):  # a closed or missing stderr: nothing to show it on
            pass

    def begin(self) -> None:
        """The job was called: says so at once, before the plan (which reads the table) and any Spark."""
        self.say("planning ...")

    def starting(self, summary: PlanSummary) -> None:
        """Planned, with work to do: says what, before the Spark session (a JVM: seconds) comes up."""
        self.say(f"planned {counted(summary.rows_to_compute, 'row')} to compute; starting Spark ...")

    def attach(self, summary: PlanSummary) -> None:
        """Starts showing, once the job is planned (a job with nothing to do shows nothing)."""
        if summary.nothing_to_do:
            return
        self.summary = summary
        if self.display != "log":
            from tqdm.auto import tqdm as auto_tqdm  # type: ignore[import-untyped]
            from tqdm.std import tqdm as text_tqdm  # type: ignore[import-untyped]

            make = _recent_rate_bar(auto_tqdm if self.display == "notebook" else text_tqdm)
            # Rows arrive in steps (a checkpoint, a heartbeat), so tqdm's own estimate misleads: its smoothed rate
            # is one step over the last redraw's interval (10x the real rate), its average since the start counts
            # the start-up, and its dynamic miniters stop redrawing until a step as big as the last one.  The bar
            # redraws at every read and shows the rate over the last seconds (its ETA follows from it).
            self.bar = make(total=summary.rows_to_compute, desc=self.label, unit="rows",
                            unit_scale=summary.rows_to_compute >= 10_000, dynamic_ncols=True,
                            file=sys.stderr if self.display == "terminal" else None,
                            mininterval=BAR_SECONDS, miniters=0, smoothing=0)
            self.bar.recent = self.recent
        self._thread.start()

    def close(self, result: BackfillResult | None = None, error: BaseException | None = None) -> None:
        """Stops showing: the final rows, and in a log the job's outcome; Spark's console bar is given back."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.summary is not None:
            try:
                record = self._update()
            except Exception as exc:  # noqa: BLE001 - the job's own outcome is what the caller gets
                logging.getLogger(__name__).debug("progress of %s: %s", self.label, exc)
                record = None
            if self.bar is not None:
                self.bar.close()
            elif result is not None:
                log.info("%s: done: %s, %.1fs", self.label, result.describe(), result.seconds.get("total", 0.0))
            elif error is not None:
                log.warning("%s: stopped at %s of %s rows (%s): %s", self.label, f"{self.rows:,}",
                         f"{self.summary.rows_to_compute:,}", record.stage if record else Stage.PLAN,
                         type(error).__name__)
        elif result is not None:
            self.say(f"up to date: nothing to compute ({result.rows_reused:,} rows reused)")
        if self._hidden is not None:
            restore_console_bar(self._hidden)
            self._hidden = None

    def _run(self) -> None:
        seconds = LOG_SECONDS if self.display == "log" else BAR_SECONDS
        while not self._stop.wait(seconds):
            try:
                self._update(line=self.display == "log")
            except Exception as exc:  # noqa: BLE001 - showing progress must never fail a job
                logging.getLogger(__name__).debug("progress of %s: %s", self.label, exc)

    def _update(self, line: bool = False) -> JobRecord | None:
        """Reads the job's rows, moves the bar (or logs a line) and, on a terminal, keeps Spark's bar off."""
        assert self.summary is not None
        if self.display == "terminal" and self._hidden is None:
            sc = running_context()  # the job may start its session after the plan
            if sc is not None and hide_console_bar(sc):
                self._hidden = sc
        record = read_record(self.store, self.summary.job_id)
        if record is None:
            return None
        total = self.summary.rows_to_compute
        rows = record.rows_checkpointed
        if record.stage == Stage.APPLY:
            rows += rows_in_flight(self.store, self.summary.job_id)
        self.rows = max(self.rows, min(rows, total))
        self.recent.add(self.rows)
        if self._first is None:
            self._first = self.rows
            if self.bar is not None:  # a resumed job's earlier rows count in the bar, not in its rate
                self.bar.initial = self.rows
        state = (f"{record.stage}: {record.rows_ready:,} ready, {record.rows_committed:,} committed"
                 if record.stage in (Stage.WRITE_COMMIT, Stage.VERIFY, "done") else str(record.stage))
        if self.bar is not None:
            self.bar.update(self.rows - self.bar.n)
            self.bar.set_postfix_str(state, refresh=False)
        elif line:
            rate = self.recent.rate()
            eta = eta_text(self.recent.eta(total)) if self.rows < total else ""
            log.info("%s: %s of %s rows computed (%s rows/s%s); %s", self.label, f"{self.rows:,}", f"{total:,}",
                     "?" if rate is None else f"{rate:,.0f}", f", {eta}" if eta else "", state)
        return record
