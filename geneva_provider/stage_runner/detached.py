"""The stand-alone stage runner: a Spark Connect stage run in a process of its own, so that it outlives whoever
started it (an Airflow task, a service's request).

A deferrable stage frees its worker slot (the task process ends while the stage runs) and a durable
one survives a worker crash; either way the Spark Connect session must be owned by a process that
is not the task's.  :func:`start` starts ``python -m geneva_provider.stage_runner.detached`` in
a session of its own (no signal to the starter's process group reaches it) and hands it, on its
standard input, what must never be on a command line: the Connect URL (it may carry a token) and
the storage options.  The runner holds the stage's lease in the checkpoint store
(:class:`~geneva_provider.pipeline.stage_reports.StageLease`, renewed every few seconds) while
it runs the stage exactly as the in-task Connect backend does, then leaves the stage's report
beside the plan and gives the lease up.  Whoever waits -- the task, its retry, a trigger --
needs only the plan's ids: a live lease means "running, wait for it", a stale one "its process
died, start again" (the stage resumes from its batch checkpoints).  SIGTERM stops the stage's
Spark work (its session's operations are interrupted) and still leaves a report.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.pipeline.stage_reports import StageSubmission


def log_path(log_folder: Path, submission: StageSubmission) -> Path:
    """Where the runner of a stage writes its log on the host that started it: ``geneva-stages/`` in ``log_folder``
    (for an Airflow task, Airflow's log folder), one file per job and stage.

    The starter copies it into its own log when the stage has ended and removes it when the stage succeeded; a
    failed or lost stage's stays for whoever looks into it.
    """
    directory = log_folder.expanduser() / "geneva-stages"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{submission.job_id}-{submission.stage}.log"


def start(submission: StageSubmission, plan: PlanSummary, store: Any, *, url: str,
          storage_options: dict[str, str] | None, py_files: str | None, submitter: str, log_folder: Path,
          package: str | None, reuse_session: bool = True) -> int:
    """Starts the runner of ``submission``'s stage and returns its pid, once it holds the stage's lease; its log
    goes to :func:`log_path` in ``log_folder``.  ``package``: the zip of this package its session ships (None: the
    server's workers have it installed); ``reuse_session``: resume the worker's warm Connect session.

    An earlier attempt's report is forgotten first; the lease is taken here, before the process
    exists, so a retry that looks at once already finds the stage running.
    """
    from geneva_provider.pipeline.stage_reports import StageLease

    owner = uuid.uuid4().hex
    submission.clear(store)
    submission.hold(store, StageLease.now(owner, pid=0))
    spec = {"plan": plan.to_xcom(), "stage": str(submission.stage), "url": url, "storage_options": storage_options,
            "py_files": py_files, "submitter": submitter, "owner": owner, "package": package,
            "reuse_session": reuse_session}
    # A task process's environment names a metadata DB that refuses to parse (Airflow blocks DB access from
    # tasks), and importing Airflow reads it: the runner, which never touches that DB, gets an in-memory one.
    env = {**os.environ, **dict.fromkeys(("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__SQL_ALCHEMY_CONN"),
                                         "sqlite://")}
    with open(log_path(log_folder, submission), "wb") as log:  # the latest runner's log only
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, env=env)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(spec).encode())
    proc.stdin.close()
    submission.hold(store, StageLease.now(owner, pid=proc.pid))
    return proc.pid


def _run(spec: dict[str, Any]) -> int:
    """The runner: holds the lease while the stage runs over Spark Connect, leaves its report, releases the lease."""
    from geneva_provider.core.contracts.models import PlanSummary
    from geneva_provider.core.store.checkpoint import open_store, split_key_uri
    from geneva_provider.pipeline.stage_reports import (
        LEASE_CHECK_SECONDS,
        LEASE_RENEW_SECONDS,
        StageLease,
        StageSubmission,
    )
    from geneva_provider.pipeline.stages.registry import spark_stage
    from geneva_provider.stage_runner.backends import ConnectStageBackend, SparkSettings

    log = logging.getLogger(__name__)
    plan = PlanSummary.from_xcom(spec["plan"])
    options = spec["storage_options"]
    store = open_store(split_key_uri(plan.plan_uri)[0], options)
    entry = spark_stage(spec["stage"])
    owner = spec["owner"]
    submission = StageSubmission.of(entry.name, plan.plan_uri)
    # the URL was resolved by whoever started this runner (an Airflow task from its connection)
    backend = ConnectStageBackend(SparkSettings(py_files=spec["py_files"], submitter=spec["submitter"],
                                                reuse_session=spec["reuse_session"]), log,
                                  url=spec["url"], package=spec["package"])
    renewing = threading.Event()

    def renew() -> None:
        renewed = time.monotonic()
        while not renewing.wait(LEASE_CHECK_SECONDS):
            lease = submission.lease(store)
            if lease is not None and lease.owner != owner:  # revoked (a timeout, a kill) or taken over: stop
                log.warning("The %s stage of plan %s was stopped (its lease is no longer this process's)",
                            entry.name, plan.job_id)
                backend.on_kill()
                return
            if time.monotonic() - renewed < LEASE_RENEW_SECONDS:
                continue
            renewed = time.monotonic()
            try:
                submission.hold(store, StageLease.now(owner, pid=os.getpid()))
            except Exception as exc:  # noqa: BLE001 - the next renewal tries again
                log.warning("Could not renew the stage's lease: %s", exc)

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=backend.on_kill, daemon=True).start())
    submission.hold(store, StageLease.now(owner, pid=os.getpid()))
    threading.Thread(target=renew, daemon=True, name="geneva-stage-lease").start()
    log.info("Running the %s stage of plan %s in process %d for %s", entry.name, plan.job_id, os.getpid(),
             spec["submitter"])
    try:
        ended = backend.result(backend.submit(entry, plan, options, store), store)  # waits for the stage's end
    finally:
        renewing.set()
        lease = submission.lease(store)
        if lease is None or lease.owner == owner:
            submission.release(store)
    error = ended.report.error if ended.report is not None else None
    why = f": {error.code}: {error.message}" if error is not None else ""
    log.info("The %s stage of plan %s ended: %s%s", entry.name, plan.job_id,
             "succeeded" if ended.succeeded else "failed", why)
    return 0 if ended.succeeded else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(_run(json.loads(sys.stdin.read())))
