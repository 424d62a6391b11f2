"""Package errors as Airflow task outcomes: what the operators and the sensors share.

Here (the hooks layer) because operators and sensors are sibling layers that cannot import each
other, and both need the same rule: a package error that a retry cannot fix fails the task once.

Airflow fails a task without retrying it only for an ``AirflowFailException``, and callers catch
the package's own classes (``ColumnError``...), so such an error is raised as its *fail-once twin*:
a class declared below that is both.  The twins are written out (not made at run time), carry the
names of the classes they stand for, and are left out of the error registry (``register=False``):
a payload of a twin names the package class.  A test checks that every registered class a retry
cannot fix has its twin.

A connection id Airflow does not know is such an error too (:func:`airflow_connection`): a retry
cannot define it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

from geneva_provider.core import errors

if TYPE_CHECKING:
    from airflow.sdk import Connection
    from airflow.sdk.definitions.retry_policy import RetryPolicy


def fails_without_retry(method: Callable[..., Any]) -> Callable[..., Any]:
    """Makes a task method (``execute``, ``poke``, ``execute_complete``) fail for good on a deterministic error.

    A package error that a retry cannot fix (bad input, a UDF bug) is raised again as itself *and*
    an ``AirflowFailException`` (which Airflow does not retry): callers still catch ``ColumnError``,
    ``InvalidArgumentError``...; conflicts and infrastructure errors still retry.
    """
    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except errors.GenevaError as exc:
            if exc.retryable or isinstance(exc, AirflowFailException):  # already converted by an inner method
                raise
            # ``from None``: the same error, not a second copy of its message chained above it in the task log.
            raise no_retry(exc) from None

    return run


def no_retry(exc: errors.GenevaError) -> Exception:
    """``exc`` as its fail-once twin: an instance of its own class and of ``AirflowFailException`` (same message).

    An error of a class without a twin (a subclass defined elsewhere) takes its nearest ancestor's.
    """
    twin = next(FAILS_ONCE[cls] for cls in type(exc).__mro__ if cls in FAILS_ONCE)
    failed = twin(*exc.args)
    failed.__traceback__ = exc.__traceback__
    return failed


class GenevaError(errors.GenevaError, AirflowFailException, register=False):
    """A GenevaError that fails its task once."""


class InvalidArgumentError(errors.InvalidArgumentError, AirflowFailException, register=False):
    """An InvalidArgumentError that fails its task once."""


class TableNotFoundError(errors.TableNotFoundError, AirflowFailException, register=False):
    """A TableNotFoundError that fails its task once."""


class TableExistsError(errors.TableExistsError, AirflowFailException, register=False):
    """A TableExistsError that fails its task once."""


class ColumnError(errors.ColumnError, AirflowFailException, register=False):
    """A ColumnError that fails its task once."""


class UDFDefinitionError(errors.UDFDefinitionError, AirflowFailException, register=False):
    """A UDFDefinitionError that fails its task once."""


class UDFImportError(errors.UDFImportError, AirflowFailException, register=False):
    """A UDFImportError that fails its task once."""


class UDFExecutionError(errors.UDFExecutionError, AirflowFailException, register=False):
    """A UDFExecutionError that fails its task once."""


class SparkEnvironmentError(errors.SparkEnvironmentError, AirflowFailException, register=False):
    """A SparkEnvironmentError that fails its task once."""


class ResourceUnavailableError(errors.ResourceUnavailableError, AirflowFailException, register=False):
    """A ResourceUnavailableError that fails its task once."""


class PlanFormatError(errors.PlanFormatError, AirflowFailException, register=False):
    """A PlanFormatError that fails its task once."""


class CheckpointMissingError(errors.CheckpointMissingError, AirflowFailException, register=False):
    """A CheckpointMissingError that fails its task once."""


class ConcurrentOverwriteError(errors.ConcurrentOverwriteError, AirflowFailException, register=False):
    """A ConcurrentOverwriteError that fails its task once."""


class ColumnReplacedError(errors.ColumnReplacedError, AirflowFailException, register=False):
    """A ColumnReplacedError that fails its task once."""


class VerificationError(errors.VerificationError, AirflowFailException, register=False):
    """A VerificationError that fails its task once."""


class MalformedEventError(errors.MalformedEventError, AirflowFailException, register=False):
    """A MalformedEventError that fails its task once."""


class JobNotFoundError(errors.JobNotFoundError, AirflowFailException, register=False):
    """A JobNotFoundError that fails its task once."""


class JobCancelledError(errors.JobCancelledError, AirflowFailException, register=False):
    """A JobCancelledError that fails its task once."""


class CorruptCheckpointError(errors.CorruptCheckpointError, AirflowFailException, register=False):
    """A CorruptCheckpointError that fails its task once."""


class TableVersionGoneError(errors.TableVersionGoneError, AirflowFailException, register=False):
    """A TableVersionGoneError that fails its task once."""


def airflow_connection(conn_id: str, argument: str, define: str) -> Connection:
    """The Airflow connection ``conn_id``; a missing one is the package's ``InvalidArgumentError``.

    Airflow's own ``AirflowNotFoundException`` is retried like any failure (the task fails minutes
    later, after its retries); bad input fails the task once (:func:`fails_without_retry`), with a
    message naming ``argument`` (the operator argument that names the connection), the id and how to
    define it (``define``: its type and host).
    """
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise errors.InvalidArgumentError(
            f"{argument} '{conn_id}': no such Airflow connection; define it ({define}) in the UI, with "
            f"`airflow connections add {conn_id} --conn-type <type> --conn-host <host>`, or as "
            f"AIRFLOW_CONN_{conn_id.upper()}") from None


class StorageAccessError(errors.StorageAccessError, AirflowFailException, register=False):
    """A StorageAccessError that fails its task once."""


# package class -> its fail-once twin
FAILS_ONCE: dict[type[errors.GenevaError], type[errors.GenevaError]] = {
    twin.__mro__[1]: twin for twin in (
        GenevaError, InvalidArgumentError, TableNotFoundError, TableExistsError, ColumnError, UDFDefinitionError,
        UDFImportError,
        UDFExecutionError, SparkEnvironmentError, ResourceUnavailableError, PlanFormatError, CheckpointMissingError,
        ConcurrentOverwriteError, ColumnReplacedError, VerificationError, MalformedEventError, JobNotFoundError,
        JobCancelledError, CorruptCheckpointError, TableVersionGoneError, StorageAccessError)}


# Exceptions from outside the package that a retry can fix: the storage or the network was away for a moment.
TRANSIENT = (ConnectionError, TimeoutError, OSError)


@functools.cache
def retry_policy() -> RetryPolicy | None:
    """The retry policy the package's operators set by default (Airflow 3.3+; None before, where the fail-once
    twins above are the whole mapping).

    One rule per registered package error class, the most derived first, so a class is judged by its own
    ``retryable`` before its base's: lost Python workers and executors (``UDFWorkerDiedError``), an
    unreachable Spark server or storage, commit conflicts past the commit budget (``CommitError``) and a
    stage whose runner died retry; bad input, a UDF bug, a schema error, an unknown table or column fail
    at once, whatever ``retries`` says (the task log shows the error, the package's reason first, then the
    decision and why).  Then I/O errors from outside the package (``OSError``, ``ConnectionError``,
    ``TimeoutError``) retry; anything else keeps the task's own ``retries``.  A DAG overrides it per task
    with ``retry_policy=`` (or in ``default_args``).
    """
    try:
        from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule
    except ImportError:  # Airflow before 3.3: no retry policies
        return None
    by_depth = sorted(errors.error_classes(), key=lambda cls: len(cls.__mro__), reverse=True)
    rules = [RetryRule(exception=cls, action=RetryAction.RETRY if cls.retryable else RetryAction.FAIL,
                       reason=f"{cls.__name__}: " + ("a retry can fix it" if cls.retryable else
                                                     "a retry cannot fix it (bad input, a UDF bug, a schema error)"))
             for cls in by_depth]
    rules.append(RetryRule(exception=list(TRANSIENT), action=RetryAction.RETRY,
                           reason="an I/O error: the storage or the network may be back on the next try"))
    return ExceptionRetryPolicy(rules=rules, default=RetryAction.DEFAULT)
