"""Helpers the Geneva operators and task groups share (private).

Kept free of lance / pyarrow / numpy / pyspark at module load: Airflow imports operators in
the scheduler and dag-processor, where only DAG structure matters.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from geneva_provider.core.contracts.options import rendered_later
from geneva_provider.core.errors import InvalidArgumentError, UDFDefinitionError, UDFImportError

if TYPE_CHECKING:
    from geneva_provider.core.contracts.options import JobOptions
    from geneva_provider.core.functions.udf import UDF

# What the Spark stage operators take besides the plan (the task groups pass them to both Spark tasks).
SPARK_OPTIONS = ("conf", "py_files", "env_vars", "spark_binary", "ship_package", "cluster_credentials",
                 "openlineage_inject_parent_job_info",
                 "spark_conn_id", "deferrable", "durable", "poll_interval", "progress_interval", "in_process_rows")
IN_PROCESS_ROWS = 20_000  # the default of in_process_rows: see geneva_provider.operators.spark_backends.small_plan


def with_retry_policy(kwargs: dict[str, Any]) -> dict[str, Any]:
    """An operator's kwargs with the package's retry policy (:func:`~geneva_provider.hooks.errors.retry_policy`)
    unless the task or its ``default_args`` set one (Airflow 3.3+; before, the kwargs as they are)."""
    from geneva_provider.hooks.errors import retry_policy

    policy = retry_policy()
    if policy is not None and "retry_policy" not in kwargs and "retry_policy" not in (kwargs.get("default_args") or {}):
        kwargs["retry_policy"] = policy
    return kwargs


def in_process_rows_setting(value: int | None, who: str) -> int:
    """The most rows a plan may have to compute and run its Spark stages in the task's process: ``value``, else
    ``[geneva] in_process_rows``, else :data:`IN_PROCESS_ROWS`; 0 runs every stage on Spark."""
    if value is None:
        from airflow.sdk import conf

        text = conf.get("geneva", "in_process_rows", fallback=None)
        try:
            value = IN_PROCESS_ROWS if text is None or not text.strip() else int(text)
        except ValueError:
            raise InvalidArgumentError(f"{who}: [geneva] in_process_rows must be a whole number of rows (0: never "
                                       f"in the task's process), got {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{who}: in_process_rows must be a whole number of rows, 0 or more (0: never in "
                                   f"the task's process), got {value!r}")
    return value


def reuse_session_setting(who: str) -> bool:
    """``[geneva] reuse_connect_session`` (default true): whether a job's stages over Spark Connect resume this
    worker's warm session for the server (:mod:`geneva_provider.pipeline.spark.warm_sessions`) instead of opening
    one of their own, released when the job ends."""
    from airflow.sdk import conf

    text = (conf.get("geneva", "reuse_connect_session", fallback=None) or "true").strip().lower()
    if text not in ("true", "false", "1", "0", "yes", "no"):
        raise InvalidArgumentError(f"{who}: [geneva] reuse_connect_session must be true or false, got {text!r}")
    return text in ("true", "1", "yes")


def option_params(cls: type[JobOptions]) -> dict[str, str]:
    """The ``:param`` entries of a job's options: the plan operators take each one, templated."""
    return {name: f":param {name}: {doc} (templated)" for name, doc in cls.docs().items()}


def take_options(cls: type[JobOptions], kwargs: dict[str, Any], operator: type | None = None,
                 job: str | None = None) -> dict[str, Any]:
    """Removes ``cls``'s options from an operator's kwargs (None when not given); the rest are BaseOperator's.

    With ``operator`` (the operator class), a remaining kwarg that BaseOperator does not take either
    is refused with :class:`InvalidArgumentError` naming it and listing the valid options, rather
    than with Airflow's generic ``TypeError``.  With ``job``, the option values already known when
    the DAG is parsed are validated then too (templates and XComArgs once rendered, in ``execute``).
    """
    options = {name: kwargs.pop(name, None) for name in cls.names()}
    if operator is not None:
        reject_unknown_kwargs(operator, kwargs, valid=(*_own_parameters(operator), *cls.names()))
    if job is not None:
        cls.parse({name: value for name, value in options.items() if not rendered_later(value)}, job=job)
    return options


def reject_unknown_kwargs(operator: type, kwargs: dict[str, Any], valid: Iterable[str] | None = None,
                          subject: str | None = None) -> None:
    """Raises InvalidArgumentError for the kwargs that neither the operator (``valid``) nor BaseOperator takes.

    ``valid`` lists the operator's own arguments for the message (default: its keyword-only parameters);
    ``subject`` names who was given them (default: the operator class and its task id).
    """
    valid = set(_own_parameters(operator) if valid is None else valid)
    unknown = sorted(set(kwargs) - base_operator_parameters() - valid)
    if unknown:
        subject = subject or f"{operator.__name__} (task_id {kwargs.get('task_id')!r})"
        raise InvalidArgumentError(
            f"{subject}: unknown argument(s) {unknown}; "
            f"valid options: {sorted(valid)}, and any BaseOperator argument (retries, pool, queue, ...)")


@functools.cache
def base_operator_parameters() -> frozenset[str]:
    """The keyword arguments ``airflow.sdk.BaseOperator`` accepts."""
    from airflow.sdk import BaseOperator

    names = {name for name, p in inspect.signature(BaseOperator.__init__).parameters.items()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name != "self"}
    return frozenset({*names, "_airflow_mapped_validation_only"})


def _own_parameters(operator: type) -> list[str]:
    """The keyword arguments an operator class declares itself (not BaseOperator's)."""
    base = base_operator_parameters()
    return [name for name, p in inspect.signature(operator.__init__).parameters.items()
            if p.kind is p.KEYWORD_ONLY and name not in base]


Options = TypeVar("Options", bound="JobOptions")


def parse_options(cls: type[Options], operator: Any, job: str) -> Options:
    """The operator's (rendered) option attributes as typed, validated options (of the class asked for, so a
    caller reads ``BackfillOptions`` fields without a cast)."""
    return cls.parse({name: getattr(operator, name) for name in cls.names()}, job=job)


def check_dict(value: Any, name: str, job: str, expected: str, *, empty: bool = False) -> dict[str, Any]:
    """``value`` if it is a dict (non-empty unless ``empty``); else InvalidArgumentError saying what ``name`` takes."""
    if not isinstance(value, dict) or not (value or empty):
        raise InvalidArgumentError(f"{job}: {name} must be a {'' if empty else 'non-empty '}dict {expected}, "
                                   f"got {value!r}")
    return value


def import_udf(reference: str, column: str) -> UDF:
    """Imports the UDF of ``column`` from ``"package.module:name"`` (or ``"package.module.name"``).

    Raises :class:`UDFDefinitionError` naming the column and the reference when it cannot be
    imported (:class:`UDFImportError`, also an ``ImportError``) or is not a ``@udf`` function
    (also a ``TypeError``).
    """
    from geneva_provider.core.functions.udf import UDF

    if not isinstance(reference, str):
        raise UDFDefinitionError(f"column '{column}': a UDF reference is a 'package.module:name' string, "
                                 f"got {reference!r}")
    module_name, sep, attr = reference.partition(":")
    if not sep:
        module_name, _, attr = reference.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # any failure to import the module is the reference's fault
        raise UDFImportError(f"column '{column}': cannot import UDF {reference!r}: "
                             f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, UDF):
        raise UDFDefinitionError(f"column '{column}': {reference!r} is a {type(obj).__name__}, "
                                 "not a @udf function")
    return obj


def duration(value: Any, name: str, job: str) -> timedelta:
    """A non-negative duration: a timedelta, a number of seconds, or an ISO-8601 duration ('P7D', 'PT12H')."""
    parsed = _duration(value)
    if parsed is None:
        raise InvalidArgumentError(f"{job}: {name} must be a timedelta, a number of seconds or an ISO-8601 "
                                   f"duration ('P7D'), got {value!r}")
    if parsed < timedelta(0):
        raise InvalidArgumentError(f"{job}: {name} must not be negative, got {value!r}")
    return parsed


def _duration(value: Any) -> timedelta | None:
    import pendulum

    if isinstance(value, timedelta):
        return value
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return timedelta(seconds=value)
        if not isinstance(value, str):
            return None
        try:
            return timedelta(seconds=float(value))
        except ValueError:
            parsed = pendulum.parse(value.strip())
    except (OverflowError, ValueError, pendulum.parsing.exceptions.ParserError):
        return None
    return parsed if isinstance(parsed, timedelta) else None



def operation_of(value: Any, kinds: tuple[type, ...], who: str) -> Any:
    """The typed request a plan operator's ``request`` argument holds once rendered: a request model, its dict
    (``"{{ dag_run.conf['request'] }}"`` under ``render_template_as_native_obj``) or its JSON; InvalidArgumentError
    naming ``who`` and the request's ``op`` when it is not one of ``kinds``."""
    from geneva_provider.core.contracts.operations import parse_operation

    if isinstance(value, str) and value.lstrip().startswith("{'"):
        raise InvalidArgumentError(f"{who}: request {value[:80]!r}... is a Python dict's text, not JSON: render it "
                                   "as a native object (DAG(render_template_as_native_obj=True)) or with '| tojson'")
    operation = value if isinstance(value, kinds) else parse_operation(value if isinstance(value, str | bytes | dict)
                                                                       else str(value))
    if not isinstance(operation, kinds):
        ops = sorted(k.model_fields["op"].default for k in kinds)  # type: ignore[attr-defined]
        raise InvalidArgumentError(f"{who}: request op {operation.op!r} is not planned here; the ops are {ops}")
    return operation


def plan_job(operator: Any, context: Any, request: Any, *, options: dict[str, Any] | None = None,
             parallelism: int | None = None) -> dict[str, Any]:
    """Plans the job of ``request`` through the front door (``geneva_provider.operations.plan``) on the operator's
    ``lance`` connection, in the namespace its ``id`` names (the root's, or a child namespace's), as the in-process
    path plans it, and hands the plan on (:func:`planned`)."""
    from geneva_provider.hooks.lance import LanceHook
    from geneva_provider.operations import plan

    return planned(operator, context, plan(LanceHook(operator.lance_conn_id).catalog_for(request.id), request,
                                           parallelism=parallelism, airflow_run_id=context.get("run_id"),
                                           options=options))


def planned(operator: Any, context: Any, summary: Any) -> dict[str, Any]:
    """A plan task's end: the summary kept for lineage, logged, the job linked in the UI; returned for XCom (what
    the Spark and verify tasks take as ``plan``)."""
    from geneva_provider.operators.links import push_job_link

    operator._summary = summary
    operator.log.info("Plan %s of %s of table '%s': %s", summary.job_id, summary.kind, summary.table,
                      summary.describe())
    push_job_link(context, summary.job_id, summary.table, operator.lance_conn_id, summary.namespace)
    return dict(summary.to_xcom())
