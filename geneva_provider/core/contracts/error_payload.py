"""An error as data: the one form the package's errors take to cross a process boundary.

A spark-submit program reports to its operator, a trigger to its sensor, an executor task to the
driver.  The payload names the error's class by its registered ``code`` (see
:mod:`geneva_provider.core.errors`), never by an attribute looked up by name.  It lives apart from
the error classes so that those import nothing: a Spark worker unpickling a stage function imports
them, and must be able to report what else it lacks.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from geneva_provider.core.errors import GenevaError, error_class


class ErrorPayload(BaseModel):
    """An error as data: what a stage report, a trigger event or a Spark task result carries.

    ``code`` is a registered package error's code, or the class name of any other exception (which
    :meth:`to_exc` turns into a ``RuntimeError``: foreign classes are never looked up by name).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    message: str
    retryable: bool = True  # False: the failure is deterministic (bad input, a UDF bug), a retry cannot help

    @classmethod
    def from_exc(cls, exc: BaseException) -> ErrorPayload:
        """The payload of ``exc``: its code, message, and its class's word on retrying (others: retryable)."""
        if isinstance(exc, GenevaError):
            return cls(code=exc.code, message=str(exc), retryable=exc.retryable)
        return cls(code=type(exc).__name__, message=str(exc), retryable=True)

    @property
    def is_package_error(self) -> bool:
        """Whether the code names a registered package error class."""
        return error_class(self.code) is not None

    def describe(self) -> str:
        """``Code: message``, as a traceback's last line names an error."""
        return f"{self.code}: {self.message}"

    def to_exc(self, message: str | None = None) -> Exception:
        """The error again, with ``message`` (default: the payload's): the registered class for a package code,
        a ``RuntimeError`` otherwise."""
        text = self.message if message is None else message
        cls = error_class(self.code)
        if cls is None:
            return RuntimeError(text)
        return cls(text)
