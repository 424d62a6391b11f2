"""Distributed compaction: Lance's fragment rewriting, planned on the driver and run on Spark executors.

``lance.optimize.Compaction.plan`` cuts the work into rewrite tasks; each runs on an executor
(``CompactionTask.execute``) and returns a ``RewriteResult``; the driver commits them all at once.
Fragments a live backfill or refresh still has to commit are excluded when planned, and again right
before the commit (a job may have started meanwhile), so compaction never makes a running job's work
vanish; a failed, finished or abandoned job holds nothing.  Nothing has to be recomputed afterwards:
values and their fingerprints move with their rows (see :mod:`geneva_provider.core.fingerprints`).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import pickle
import time
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.kinds import JobKind, Stage
from geneva_provider.core.contracts.models import (
    CompactionPlan,
    CompactionResult,
    JobRecord,
    PlanSummary,
    plan_from_json,
)
from geneva_provider.core.contracts.options import check_count
from geneva_provider.core.errors import CommitError, InvalidArgumentError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.refs import TableRef
from geneva_provider.core.store.checkpoint import CheckpointStore
from geneva_provider.core.store.layout import JobStore, new_job_id
from geneva_provider.core.wording import counted
from geneva_provider.pipeline.committer import Attempt, CommitPolicy, RetryCommit, commit, conflict_of
from geneva_provider.pipeline.spark.runner import job_tag
from geneva_provider.pipeline.spark.task_runner import task_runner
from geneva_provider.pipeline.stages.job_records import (
    check_leases,
    finish_record,
    is_live,
    job_stage,
    plan_live,
    read_record,
    start_record,
    take_over,
)
from geneva_provider.pipeline.stages.kinds import KindSpec, kind_of
from geneva_provider.pipeline.stages.planning import open_plan

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.pipeline.spark.task_runner import Compute, TaskRunner

log = logging.getLogger(__name__)

COMMIT_OPTIONS = ("commit_retries", "commit_timeout")  # options of the commit, not of Lance's rewrite
DEFAULT_TARGET_ROWS = 1024 * 1024  # lance's default target_rows_per_fragment of a compaction
COMPACTION_RETRIES = 2  # each retry plans and runs the rewrites again: fewer than a commit's default


def held_fragments(store: CheckpointStore) -> dict[str, list[int]]:
    """The live jobs of this table, by job id, and the fragments each has still to commit (as its kind says).

    A job holds its planned fragments while its record says it may still commit them (PENDING or
    RUNNING, heartbeating): until it is verified DONE, fails, or its process is silent past its lease.
    A plan without a record (written by an older version) holds them for a day unless its commits are done.
    """
    now = dt.datetime.now(dt.UTC)
    jobs = JobStore(store)
    held: dict[str, list[int]] = {}
    for plan_key in jobs.plans():
        job_id, key = plan_key.job_id, plan_key.key()
        record = read_record(store, job_id)
        if record is not None and not is_live(record, now):
            continue  # ended, failed or abandoned: it holds nothing (the plan is read only for a live job)
        try:
            plan = plan_from_json(store.get_text(key), key)
        except (InvalidArgumentError, ValueError, KeyError, OSError):  # unreadable or of another format: not live
            continue
        if not plan_live(record, plan.created_at, jobs.is_committed(job_id), now):
            continue
        fragments = sorted(kind_of(plan).held_fragments(plan))  # the kind says what its plan holds
        if fragments:
            held[plan.job_id] = fragments
    return held


def _held_among(holds: dict[str, list[int]], fragments: Iterable[int]) -> dict[str, list[int]]:
    """``holds`` narrowed to ``fragments`` (jobs holding none of them left out)."""
    among = set(fragments)
    return {job: kept for job, held in holds.items() if (kept := sorted(set(held) & among))}


def _merged(*holds: dict[str, list[int]]) -> dict[str, list[int]]:
    out: dict[str, set[int]] = {}
    for h in holds:
        for job, fragments in h.items():
            out.setdefault(job, set()).update(fragments)
    return {job: sorted(fragments) for job, fragments in sorted(out.items())}


def plan_compaction(table: TableRef, options: dict[str, Any] | None = None, *, store: CheckpointStore | None = None,
                    exclude_live_jobs: bool = True, airflow_run_id: str | None = None,
                    record: bool = True) -> PlanSummary:
    """Plans a compaction of ``table`` and stores the plan.

    ``options`` are lance.optimize.CompactionOptions, and ``commit_retries`` / ``commit_timeout``: the
    commit's policy (each retry plans and runs the rewrites again; by default 2 retries within 300 s).
    With nothing to compact, nothing is stored.  ``record`` writes the job's record (a replan
    inside a running compaction does not: it continues the same job).
    """
    from lance.optimize import Compaction, CompactionOptions

    store = store or table.checkpoint_store()
    options, retries, timeout = compaction_options(table, options)
    check_leases()
    ds = table.dataset()
    live = {f.fragment_id: f for f in ds.get_fragments()}
    held_by = _held_among(held_fragments(store), live) if exclude_live_jobs else {}
    excluded = sorted(set(options.pop("excluded_fragment_ids", None) or [])
                      | {f for fragments in held_by.values() for f in fragments})
    plan = Compaction.plan(ds, CompactionOptions(**options, excluded_fragment_ids=excluded))  # type: ignore[typeddict-item]
    fragments = sorted({f.id for t in plan.tasks for f in t.fragments})
    now = dt.datetime.now(dt.UTC)
    doc = CompactionPlan(
        job_id=new_job_id(now), created_at=now.isoformat(), table=table.name,
        table_uri=table.uri, read_version=plan.read_version, store_uri=store.uri or "", options=options,
        tasks=[base64.b64encode(pickle.dumps(t)).decode("ascii") for t in plan.tasks], fragments=fragments,
        rows=sum(live[f].count_rows() for f in fragments if f in live), excluded=excluded, held_by=held_by,
        exclude_live_jobs=exclude_live_jobs, commit_retries=retries, commit_timeout=timeout)
    jobs = JobStore(store)
    jobs.put_plan(doc.job_id, doc.model_dump_json())  # even with nothing to do: the compact stage is then handed
    summary = doc.summary(jobs.plan_uri(doc.job_id))  # a no-op, not a dangling URI
    if record and not doc.nothing_to_do:
        first = JobRecord(job_id=doc.job_id, kind=JobKind.COMPACTION, table=table.name, created_at=doc.created_at,
                          updated_at=doc.created_at, read_version=doc.read_version, rows_planned=doc.rows,
                          airflow_run_id=airflow_run_id)
        start_record(store, first)
        take_over(store, first)
    log.info("compaction plan %s: table '%s': %s (%s)%s", doc.job_id, table.name, summary.describe(),
             counted(doc.rows, "row"),
             f"; fragments {excluded} left alone{_holders(held_by)}" if excluded else "")
    return summary


def compaction_options(table: TableRef, options: dict[str, Any] | None) -> tuple[dict[str, Any], int | None,
                                                                                  int | None]:
    """``options`` checked (InvalidArgumentError naming the bad one): lance's CompactionOptions, and the commit's
    ``commit_retries`` / ``commit_timeout`` apart."""
    from lance.optimize import CompactionOptions

    options = dict(options or {})
    job = f"compaction of table '{table.name}'"
    retries = check_count(options.pop("commit_retries", None), "commit_retries", job, zero=True)
    timeout = check_count(options.pop("commit_timeout", None), "commit_timeout", job)
    unknown = sorted(set(options) - set(CompactionOptions.__annotations__))
    if unknown:
        raise InvalidArgumentError(f"{job}: unknown option(s) {unknown}; valid options: "
                                   f"{sorted(CompactionOptions.__annotations__) + list(COMMIT_OPTIONS)}")
    for key, value in options.items():
        _check_compaction_option(table.name, key, value, CompactionOptions.__annotations__[key])
    return options, retries, timeout


def _holders(held_by: dict[str, list[int]]) -> str:
    """How logs name the live jobs holding fragments."""
    if not held_by:
        return ""
    return " (held by live jobs: " + "; ".join(f"job {job} holds {held}" for job, held in held_by.items()) + ")"


def _check_compaction_option(table: str, key: str, value: Any, hint: Any) -> None:
    """A compaction option of the declared type: positive integers, booleans, fractions, choices."""
    if value is None:
        return
    kinds = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
    kind = kinds[0]
    if kind is bool:
        ok, want = isinstance(value, bool), "True or False"
    elif kind is int:
        ok, want = isinstance(value, int) and not isinstance(value, bool) and value > 0, "a positive integer"
    elif kind is float:
        ok, want = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1, "within [0, 1]"
    elif typing.get_origin(kind) is typing.Literal:
        ok, want = value in typing.get_args(kind), f"one of {list(typing.get_args(kind))}"
    else:
        return
    if not ok:
        raise InvalidArgumentError(f"compaction of table '{table}': {key} must be {want}, got {value!r}")


def _execute(uri: str, storage_options: dict[str, str] | None, tasks: Iterable[str]) -> Iterator[str]:
    """Executor side: runs rewrite tasks, returns their results pickled."""
    import lance

    for encoded in tasks:
        task = pickle.loads(base64.b64decode(encoded))
        ds = lance.dataset(uri, version=task.read_version, storage_options=storage_options)
        yield base64.b64encode(pickle.dumps(task.execute(ds))).decode("ascii")


def run_compaction(plan_uri: str, spark: Compute, storage_options: dict[str, str] | None = None
                   ) -> CompactionResult:
    """Runs a compaction plan's tasks on Spark and commits their results in one Rewrite.

    When another writer committed to a fragment being rewritten (a backfill that planned after this
    compaction), the Rewrite conflicts: the compaction is planned again -- leaving that job's fragments
    alone -- and run again, a bounded number of times.  Nothing is lost either way.
    """
    plan, store = open_plan(plan_uri, storage_options)
    if not isinstance(plan, CompactionPlan):
        raise InvalidArgumentError(f"{plan_uri} is a {plan.kind} plan, not a compaction plan")
    if plan.nothing_to_do:  # no Spark job, no commit, no record
        log.info("compaction %s: nothing to do: table '%s' had nothing to compact at version %d", plan.job_id,
                 plan.table, plan.read_version)
        return CompactionResult(job_id=plan.job_id, version=plan.read_version, fragments_removed=0,
                                fragments_added=0, files_removed=0, files_added=0, excluded=plan.excluded)
    runner = task_runner(spark)
    with job_stage(store, plan.job_id, Stage.COMPACT), runner.retries():
        result = _compact(plan, store, storage_options, runner)
    finish_record(store, plan.job_id, version=result.version, rows_committed=plan.rows)
    return result


def _compact(plan: CompactionPlan, store: CheckpointStore, storage_options: dict[str, str] | None,
             runner: TaskRunner) -> CompactionResult:
    """Runs the rewrite tasks no live job holds, then commits the results no live job holds by now.

    The holds are read again right before the commit: a backfill planned after this compaction (its
    fragments were free then) keeps them, and lands as planned instead of having to start over.  The
    commit goes through the committer: when another writer changed a fragment being rewritten, the
    compaction is planned again at the latest version and run again, within the plan's commit policy.
    """
    t0 = time.perf_counter()
    ref = TableRef(plan.table, plan.table_uri, storage_options)
    state = _Compaction(plan, store, storage_options, runner, dict(plan.held_by), set(plan.excluded))
    done = commit(ref, f"compaction {plan.job_id}", state.attempt, landed=state.landed,
                  policy=CommitPolicy.of(plan, default_retries=COMPACTION_RETRIES), reapplies=True)
    metrics = done.value
    version = ref.dataset().version
    zero = {"fragments_removed": 0, "fragments_added": 0, "files_removed": 0, "files_added": 0}
    result = CompactionResult(job_id=plan.job_id, version=version, excluded=sorted(state.left), held_by=state.held_by,
                              seconds=round(time.perf_counter() - t0, 3),
                              **(zero if metrics is None else {k: getattr(metrics, k) for k in zero}))
    if metrics is not None:
        log.info("compaction %s of table '%s': %s at version %d%s", plan.job_id, plan.table,
                 f"{counted(result.fragments_removed, 'fragment')} rewritten into {result.fragments_added:,}",
                 version,
                 f"; fragments {result.excluded} left alone{_holders(state.held_by)}" if result.excluded else "")
    return result


class _Compaction:
    """One compaction's commit attempts: run the rewrites no live job holds, commit their results; a retry
    plans the compaction again at the latest version first (the rewrites of the last attempt are stale)."""

    def __init__(self, plan: CompactionPlan, store: CheckpointStore, storage_options: dict[str, str] | None,
                 runner: TaskRunner, held_by: dict[str, list[int]], left: set[int]) -> None:
        self.plan, self.store, self.storage_options, self.runner = plan, store, storage_options, runner
        self.held_by, self.left = held_by, left
        self.results: list[Any] = []

    def landed(self, latest: Dataset) -> Any | None:
        """The metrics of the Rewrite since the plan's version that replaced exactly the fragments the last
        attempt rewrote: it landed (though its commit raised), so it is not made again."""
        import lance

        originals = {f.id for r in self.results for f in r.original_fragments}
        if not originals:
            return None
        for t in latest.get_transactions(max(latest.version - self.plan.read_version, 0)):
            op = t.operation if t is not None else None
            if isinstance(op, lance.LanceOperation.Rewrite) and \
                    {f.id for g in op.groups for f in g.old_fragments} == originals:
                return _Landed(fragments_removed=sum(len(list(g.old_fragments)) for g in op.groups),
                               fragments_added=sum(len(list(g.new_fragments)) for g in op.groups),
                               files_removed=sum(len(f.files) for g in op.groups for f in g.old_fragments),
                               files_added=sum(len(f.files) for g in op.groups for f in g.new_fragments))
        return None

    def attempt(self, attempt: Attempt) -> Any | None:
        """Compaction metrics, or None when nothing is left to commit."""
        from lance.optimize import Compaction

        plan = self.plan
        if attempt.number:
            log.warning("compaction %s of table '%s': planning it again (attempt %d)", plan.job_id, plan.table,
                        attempt.number + 1)
            ref = TableRef(plan.table, plan.table_uri, self.storage_options)
            policy = {k: v for k in COMMIT_OPTIONS if (v := getattr(plan, k)) is not None}
            replanned, _ = open_plan(plan_compaction(ref, {**plan.options, **policy}, store=self.store, record=False,
                                                     exclude_live_jobs=plan.exclude_live_jobs).plan_uri,
                                     self.storage_options)
            if isinstance(replanned, CompactionPlan):
                self.held_by, self.left = _merged(self.held_by, replanned.held_by), self.left | set(replanned.excluded)
            if not isinstance(replanned, CompactionPlan) or not replanned.tasks:
                return None
            plan = self.plan = replanned.model_copy(update={"job_id": plan.job_id})
        now_held = _held_now(plan, self.store)
        tasks = [t for t in plan.tasks if not _task_fragments(t) & _all(now_held)]
        encoded = self.runner.run_tasks(tasks, partial(_execute, plan.table_uri,
                                                       self.runner.options_for_tasks(self.storage_options)),
                                        description=f"geneva compact {plan.table}", tag=job_tag(plan.job_id)
                                        ) if tasks else []
        results = [pickle.loads(base64.b64decode(r)) for r in encoded]
        now_held = _merged(now_held, _held_now(plan, self.store))  # a job planned while the tasks ran
        self.results = [r for r in results if not {f.id for f in r.original_fragments} & _all(now_held)]
        if now_held:
            self.held_by, self.left = _merged(self.held_by, now_held), self.left | _all(now_held)
            log.warning("compaction %s of table '%s': fragments %s are held by jobs that started after it was "
                        "planned; their rewrites are not committed%s", plan.job_id, plan.table,
                        sorted(_all(now_held)), _holders(now_held))
        if not self.results:
            return None
        ref = TableRef(plan.table, plan.table_uri, self.storage_options)
        try:
            return Compaction.commit(ref.dataset(), self.results)
        except OSError as exc:
            if conflict_of(exc) is not None:
                raise
            if _preempted(self.results, ref.dataset()):
                raise RetryCommit from exc
            raise CommitError(f"compaction of table '{plan.table}' could not be committed: {lance_reason(exc)}; "
                              "nothing was lost: plan it again") from None


@dataclass(frozen=True)
class _Landed:
    """The metrics of a compaction whose commit had landed, read from its transaction."""

    fragments_removed: int
    fragments_added: int
    files_removed: int
    files_added: int


def _preempted(results: list[Any], ds: Dataset) -> bool:
    """True when a fragment the rewrites read is gone or changed in the table since (``Compaction.commit``
    reports that conflict as a plain OSError: the table, not its text, says what it was)."""
    current = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    return any(current.get(f.id) != f for r in results for f in r.original_fragments)


def _held_now(plan: CompactionPlan, store: CheckpointStore) -> dict[str, list[int]]:
    """The live jobs holding fragments this compaction rewrites, as of now (none when told to ignore them)."""
    return _held_among(held_fragments(store), plan.fragments) if plan.exclude_live_jobs else {}


def _all(holds: dict[str, list[int]]) -> set[int]:
    return {f for fragments in holds.values() for f in fragments}


def _task_fragments(encoded: str) -> set[int]:
    """The fragments a pickled rewrite task reads."""
    return {f.id for f in pickle.loads(base64.b64decode(encoded)).fragments}


class CompactionKind(KindSpec[CompactionPlan]):
    """A compaction as a job kind: planned on the driver, its rewrites run by the compact stage on Spark.

    A rewrite of existing rows: it reads no checkpoints and holds no fragment (a live compaction leaves every
    fragment to the jobs that plan meanwhile, and re-reads their holds before it commits).
    """

    kinds = (JobKind.COMPACTION,)

    @property
    def planner(self) -> typing.Callable[..., PlanSummary]:
        return plan_compaction

    def held_fragments(self, plan: CompactionPlan) -> set[int]:
        return set()

    def keeps_checkpoint(self, plan: CompactionPlan, key: typing.Any) -> bool:
        return False


COMPACTION = CompactionKind()
