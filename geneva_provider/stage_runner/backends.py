"""How a Spark stage of a plan runs, below any scheduler: :class:`SparkBackend` (submit, poll, result, kill) and
its Spark Connect implementation, :class:`ConnectStageBackend` (a session opened, or resumed from the id kept
beside the plan, interrupted when the stage is killed).

Airflow's operators choose a backend from their Spark connection
(:mod:`geneva_provider.operators.spark_backends`, which adds the spark-submit and in-task ones and looks the
Connect URL up in the connection); the stand-alone stage runner (:mod:`geneva_provider.stage_runner.detached`) and
any service take :class:`ConnectStageBackend` with the URL itself.  Whichever runs it, a stage goes through the
same three steps, as the Spark provider's ``submit_job`` / ``poll_until_complete`` and the Databricks provider's
submit-then-trigger do: :meth:`SparkBackend.submit` starts it and returns its ids (a
:class:`~geneva_provider.pipeline.stage_reports.StageSubmission`), :meth:`~SparkBackend.poll` waits for it to end
while logging its progress from the job record, and :meth:`~SparkBackend.result` reads the report the stage left
in the job's checkpoint store.  Because the result is read from the store by ids alone, a deferrable or resumable
stage needs only a trigger (or a retry) that polls ``StageSubmission.done`` and then calls ``result``.
"""

from __future__ import annotations

import contextvars
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from geneva_provider.core.contracts.kinds import EventStatus, Stage
from geneva_provider.pipeline.stages.progress_lines import PROGRESS_SECONDS
from geneva_provider.stage_runner.progress import ProgressLogger

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import PlanSummary, StageReport
    from geneva_provider.pipeline.stage_reports import StageSubmission
    from geneva_provider.pipeline.stages.registry import SparkStage

T = TypeVar("T")

KILL_SECONDS = 10.0  # how long a killed stage's on_kill waits for its Connect stage to stop


@dataclass(frozen=True)
class SparkSettings:
    """What a backend takes besides the plan: the Spark stage operators' (rendered) arguments, or a service's."""

    conn_id: str = "spark_default"
    conf: dict[str, Any] = field(default_factory=dict)
    py_files: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    spark_binary: str | None = None
    ship_package: bool = False
    cluster_credentials: bool = False
    submitter: str = "a geneva stage"  # who runs the stage, for messages: "GenevaSparkApplyOperator 'apply'"
    progress_interval: float = PROGRESS_SECONDS  # seconds between two progress lines in the task log
    in_process_rows: int = 0  # a plan with at most this many rows to compute runs here, without Spark (0: never)
    reuse_session: bool = True  # over Spark Connect: resume this machine's warm session (pipeline.spark.warm_sessions)


@dataclass(frozen=True)
class StageEnd:
    """What this process saw of a stage's end, beside the report the stage left."""

    failed: bool = False  # the stage failed whatever its report says (spark-submit exited non-zero)
    cause: BaseException | None = None  # what the stage raised in this process (over Spark Connect)


@dataclass(frozen=True)
class StageRun:
    """How a stage run ended: its report, and what explains a failure."""

    report: StageReport | None  # None: the stage left no report
    succeeded: bool
    output_tail: str = ""  # the last lines spark-submit printed (masked), for the failure message
    cause: BaseException | None = None  # what the stage raised in this process (over Spark Connect)


class SparkBackend(ABC):
    """Runs Spark stages of plans on one Spark connection -- submit, poll, result -- and stops the one running
    when the task is killed.

    A subclass says how to start a stage (:meth:`_start`: what runs in the background until the stage
    has ended and left its report); waiting and reading the result are the same for every backend.
    """

    def __init__(self, settings: SparkSettings, log: Any) -> None:
        self.settings = settings
        self.log = log
        self.stage: Stage | None = None
        self._running: Future[StageEnd] | None = None  # the stage this backend started
        self._report: StageReport | None = None  # a report this process could not leave in the store

    def run(self, stage: SparkStage, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any
            ) -> StageRun:
        """Runs ``stage`` of ``plan`` to its end (submit, poll, result); its progress is logged meanwhile."""
        submission = self.submit(stage, plan, storage_options, store)
        self.poll(submission, store)
        return self.result(submission, store)

    def submit(self, stage: SparkStage, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any
               ) -> StageSubmission:
        """Starts ``stage`` of ``plan`` and returns its ids at once (an earlier attempt's report is forgotten first).

        What the backend refuses (bad settings, secrets bound for a command line) raises here,
        before anything starts.
        """
        from geneva_provider.pipeline.stage_reports import StageSubmission

        submission = StageSubmission.of(stage.name, plan.plan_uri)
        submission.clear(store)
        self.stage, self._report = stage.name, None
        work = self._start(stage, plan, storage_options, store, submission)
        self._running = in_thread(work, f"geneva-{stage.name}-{submission.job_id}")
        return submission

    @abstractmethod
    def _start(self, stage: SparkStage, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any,
               submission: StageSubmission) -> Callable[[], StageEnd]:
        """Prepares the stage and returns what runs it (in a background thread) until it has ended.

        That returns what this process saw of the end, beside the report, and raises what no
        report explains.
        """

    def poll(self, submission: StageSubmission, store: Any) -> None:
        """Waits until the stage this backend submitted has ended, logging its progress from the job record."""
        if self._running is None:
            raise RuntimeError(f"the {submission.stage} stage of plan {submission.job_id} was not submitted here")
        with ProgressLogger(store, submission.job_id, submission.stage, self.log,
                            seconds=self.settings.progress_interval, note=self._note):
            self._running.exception()  # waits; what it raised is raised by ``result``

    def result(self, submission: StageSubmission, store: Any) -> StageRun:
        """How the stage ended, from the report it left in the store (and what this process saw of it)."""
        ended = self._running.result() if self._running is not None else StageEnd()  # raises what no report explains
        report = submission.report(store) or self._report
        succeeded = report is not None and report.status == EventStatus.SUCCESS and not ended.failed
        return StageRun(report, succeeded=succeeded, output_tail=self._output_tail(), cause=ended.cause)

    def _note(self) -> str | None:
        """What is wrong while the job record cannot show it (for the progress lines); None: nothing."""
        return None

    def _leave(self, submission: StageSubmission, store: Any, report: StageReport) -> None:
        """Leaves the report in the store; one the store refuses stays with this process (its failure is logged)."""
        try:
            submission.leave(store, report)
        except Exception as exc:  # noqa: BLE001 - the stage's own outcome matters more than where it is kept
            self.log.warning("Could not leave the %s stage's report in the store: %s", submission.stage, exc)
            self._report = report

    def _output_tail(self) -> str:
        return ""

    @abstractmethod
    def on_kill(self) -> None:
        """Stops the stage this backend is running, if any (the task was killed)."""


def in_thread(work: Callable[[], T], name: str) -> Future[T]:
    """Runs ``work`` in a daemon thread (a killed task's process never waits for it); its outcome is the future's.

    The thread runs in a copy of this one's context variables (the task's logging context), as
    ``asyncio.to_thread`` does.
    """
    future: Future[T] = Future()

    def target() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
            future.set_exception(exc)

    threading.Thread(target=contextvars.copy_context().run, args=(target,), name=name, daemon=True).start()
    return future


class ConnectStageBackend(SparkBackend):
    """Runs a stage in this process as a client of a Spark Connect server (``url``).

    No JVM starts here: a client session (with this package and ``py_files`` shipped as
    artifacts, versions checked) drives the server's executors, and the stage's own code
    commits from this process exactly as a spark-submit driver would -- and, as that driver's
    program does, leaves the stage's report in the store.
    """

    def __init__(self, settings: SparkSettings, log: Any, url: str | None = None, package: str | None = None
                 ) -> None:
        super().__init__(settings, log)
        self._url = url  # the server's ``sc://`` URL; it may carry a token: never logged
        self._package = package  # the zip of this package the session ships (``spark_apps.package.package_zip``)
        self._session: Any = None  # the Spark Connect client session while a stage runs
        self._tag: str | None = None  # the job's tag: what a kill interrupts in a session other jobs may share
        self._gave_up: str | None = None  # what the session said of its server when the stage failed for it
        self._killed = threading.Event()  # the task was killed: run nothing more on the server

    @property
    def url(self) -> str:
        """The Spark Connect server's URL (a subclass may look it up when first asked)."""
        if self._url is None:
            from geneva_provider.core.errors import InvalidArgumentError

            raise InvalidArgumentError(f"{self.settings.submitter}: no Spark Connect URL to run the stage on")
        return self._url

    def _server(self) -> str:
        """Which server the stage runs on, for its log line (never the URL: it may carry a token)."""
        return ""

    @property
    def package(self) -> str | None:
        """The zip of this package the session ships as an artifact before ``py_files`` (None: the server's
        Python workers have the package installed)."""
        return self._package

    def _start(self, stage: SparkStage, plan: PlanSummary, storage_options: dict[str, str] | None, store: Any,
               submission: StageSubmission) -> Callable[[], StageEnd]:
        from geneva_provider.core.contracts.models import StageReport
        from geneva_provider.core.errors import JobCancelledError
        from geneva_provider.core.store.checkpoint import split_key_uri
        from geneva_provider.pipeline.spark.connect import close_session, lost_server, unreachable
        from geneva_provider.pipeline.spark.runner import job_tag

        url = self.url
        self._killed.clear()  # an earlier attempt's kill
        self._tag = job_tag(plan.job_id)
        self.log.info("Running the %s stage of plan %s over Spark Connect%s: %s", stage.name, plan.job_id,
                      self._server(), plan.describe())

        def drive() -> StageEnd:
            keep, cause = False, None
            self._gave_up = None
            try:
                self._session = session = self._job_session(url, store, split_key_uri(plan.plan_uri)[1])
                if self._killed.is_set():  # while the session opened (on_kill had no session to interrupt)
                    raise JobCancelledError(f"the {stage.name} stage of plan {plan.job_id} was stopped before it "
                                            "started: its task was killed")
                report = StageReport(status=EventStatus.SUCCESS,
                                     result=stage.function(plan.plan_uri, session, storage_options))
                keep = stage.keeps_session
            except Exception as exc:  # noqa: BLE001 - the operator reports it with the package's reason first
                lost = lost_server(self._session, url, exc) if self._session is not None else None
                if lost is not None:  # the last progress line says so too, however soon the stage failed
                    self._gave_up = unreachable(self._session, url)
                report, cause = StageReport.failed(lost or exc), exc
            finally:
                if self._session is not None:
                    close_session(self._session, keep=keep or (self.settings.reuse_session and cause is None))
                    self._session = None
            self._leave(submission, store, report)
            return StageEnd(failed=cause is not None, cause=cause)

        return drive

    def _note(self) -> str | None:
        from geneva_provider.pipeline.spark.connect import unreachable

        session = self._session
        return unreachable(session, self.url) if session is not None else self._gave_up

    def _job_session(self, url: str, store: Any, plan_key: str) -> Any:
        """The job's Spark Connect session: the one an earlier stage (or a dead attempt) left, else this machine's
        warm session for the server (``reuse_session``, :mod:`~geneva_provider.pipeline.spark.warm_sessions`), else
        a new one (which becomes the warm one).

        Its id is kept beside the plan, so the write+commit stage reuses apply's warm Python
        workers, and a retry finds -- and stops -- whatever the attempt it replaces left running (the operations
        with the job's tag: other jobs may be running in the same session).
        """
        from geneva_provider.core.store.layout import ConnectSessionKey, PlanKey
        from geneva_provider.pipeline.spark import warm_sessions
        from geneva_provider.pipeline.spark.connect import connect_session, resume_session, session_host

        pyfiles = [p for p in (self.package, *(self.settings.py_files or "").split(",")) if p]
        session_key = ConnectSessionKey(PlanKey.of(plan_key).job_id).key()
        server = session_host(url)
        warm = warm_sessions.known(server, pyfiles) if self.settings.reuse_session else None
        candidates = [(store.get_text(session_key), "the job's")] if session_key in store else []
        candidates += [(warm, "the warm")] if warm is not None and warm not in dict(candidates) else []
        for session_id, whose in candidates:
            resumed = resume_session(url, session_id, pyfiles=pyfiles, tag=self._tag)
            if resumed is not None:
                spark, stopped = resumed
                if stopped:
                    self.log.warning("Stopped the Spark work an earlier attempt of this %s stage left running",
                                     self.stage)
                store.put_text(session_key, session_id)
                self.log.info("Reusing %s Spark Connect session %s", whose, session_id)
                return spark
        session_id = str(uuid.uuid4())
        store.put_text(session_key, session_id)  # before any work: a retry must find it if this process dies
        if self.settings.reuse_session:
            warm_sessions.remember(server, pyfiles, session_id)
        return connect_session(url, pyfiles=pyfiles, session_id=session_id)

    def on_kill(self) -> None:
        """Stops the server's work for the stage: its session's operations are interrupted until the stage has ended
        (an operation may start just after an interrupt; a stage whose session is still opening runs nothing), for
        at most ``KILL_SECONDS``; a session still open then is interrupted once more and released."""
        from geneva_provider.pipeline.spark.connect import close_session, interrupt_session

        self._killed.set()
        running, deadline = self._running, time.monotonic() + KILL_SECONDS
        while running is not None and not running.done() and time.monotonic() < deadline:
            session = self._session
            if session is not None:
                interrupt_session(session, self._tag)
            wait([running], timeout=0.5)
        session = self._session
        if session is not None:
            close_session(session, interrupt=True, tag=self._tag, keep=self.settings.reuse_session)
        if running is not None and not running.done():
            self.log.warning("The %s stage was still running %.0f s after its task was killed; its Spark work was "
                             "interrupted, and its session released", self.stage, KILL_SECONDS)
