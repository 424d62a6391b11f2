"""Package errors as Airflow task outcomes: what the operators and the sensors share.

Here (the hooks layer) because operators and sensors are sibling layers that cannot import each
other, and both need the same rule: a package error that a retry cannot fix fails the task once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from geneva_provider.core.errors import GenevaError


def fails_without_retry(method: Callable[..., Any]) -> Callable[..., Any]:
    """Makes a task method (``execute``, ``poke``, ``execute_complete``) fail for good on a deterministic error.

    A package error that a retry cannot fix (bad input, a UDF bug) is raised again as itself *and*
    an ``AirflowFailException`` (which Airflow does not retry): callers still catch ``ColumnError``,
    ``InvalidArgumentError``...; conflicts and infrastructure errors still retry.
    """
    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        from airflow.sdk.exceptions import AirflowFailException

        try:
            return method(self, *args, **kwargs)
        except GenevaError as exc:
            if exc.retryable or isinstance(exc, AirflowFailException):  # already converted by an inner method
                raise
            # ``from None``: the same error, not a second copy of its message chained above it in the task log.
            raise no_retry(exc) from None

    return run


def no_retry(exc: GenevaError) -> Exception:
    """``exc`` as an instance of its own class and of ``AirflowFailException`` (same message)."""
    failed = _no_retry_class(type(exc))(*exc.args)
    failed.__traceback__ = exc.__traceback__
    return failed


@functools.cache
def _no_retry_class(cls: type[GenevaError]) -> type[Exception]:
    from airflow.sdk.exceptions import AirflowFailException

    return type(cls.__name__, (cls, AirflowFailException), {"__module__": cls.__module__,
                                                              "__doc__": cls.__doc__})
