"""Exceptions as the spec's ``ErrorResponse``: its error code, the HTTP status the spec answers with, a clean message.

The codes are ``lance_namespace.errors.ErrorCode``; the statuses follow the client's ``_response_types_map``
(400 bad input, 401, 403, 404 not found, 406 unsupported, 409 conflict, 503 unavailable, 5XX the rest).  The
package's own errors (:mod:`geneva_provider.core.errors`) keep their message: it names the table / column /
argument at fault.  Every message passes through :func:`scrub`, so no storage option value (a credential)
reaches a response.
"""

from __future__ import annotations

from collections.abc import Iterable

from lance_namespace.errors import ErrorCode, LanceNamespaceError
from pydantic import ValidationError

from geneva_provider.core import errors as gp
from geneva_provider.core.filters import lance_reason

STATUS: dict[ErrorCode, int] = {
    ErrorCode.UNSUPPORTED: 406,
    ErrorCode.INVALID_INPUT: 400, ErrorCode.INVALID_TABLE_STATE: 400, ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR: 400,
    ErrorCode.UNAUTHENTICATED: 401, ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.NAMESPACE_NOT_FOUND: 404, ErrorCode.TABLE_NOT_FOUND: 404, ErrorCode.TABLE_INDEX_NOT_FOUND: 404,
    ErrorCode.TABLE_TAG_NOT_FOUND: 404, ErrorCode.TRANSACTION_NOT_FOUND: 404, ErrorCode.TABLE_VERSION_NOT_FOUND: 404,
    ErrorCode.TABLE_COLUMN_NOT_FOUND: 404, ErrorCode.TABLE_BRANCH_NOT_FOUND: 404,
    ErrorCode.NAMESPACE_ALREADY_EXISTS: 409, ErrorCode.NAMESPACE_NOT_EMPTY: 409, ErrorCode.TABLE_ALREADY_EXISTS: 409,
    ErrorCode.TABLE_INDEX_ALREADY_EXISTS: 409, ErrorCode.TABLE_TAG_ALREADY_EXISTS: 409,
    ErrorCode.CONCURRENT_MODIFICATION: 409, ErrorCode.TABLE_BRANCH_ALREADY_EXISTS: 409,
    ErrorCode.THROTTLING: 429, ErrorCode.SERVICE_UNAVAILABLE: 503, ErrorCode.INTERNAL: 500,
}

# The package's errors, most specific first (TableExistsError is an InvalidArgumentError).  A job the spec has
# no code for: its "not found" is 404 with the nearest code, TRANSACTION_NOT_FOUND (a job is an asynchronous
# transaction of the table).
PACKAGE_CODES: tuple[tuple[type[gp.GenevaError], ErrorCode], ...] = (
    (gp.TableExistsError, ErrorCode.TABLE_ALREADY_EXISTS),
    (gp.TableNotFoundError, ErrorCode.TABLE_NOT_FOUND),
    (gp.JobNotFoundError, ErrorCode.TRANSACTION_NOT_FOUND),
    (gp.InvalidArgumentError, ErrorCode.INVALID_INPUT),
    (gp.ColumnError, ErrorCode.INVALID_INPUT),
    (gp.UDFDefinitionError, ErrorCode.INVALID_INPUT),
    (gp.SparkServerUnreachableError, ErrorCode.SERVICE_UNAVAILABLE),
)

MASK = "***"


def error_code(exc: BaseException) -> ErrorCode:
    """The spec's code for an exception raised while serving a request."""
    if isinstance(exc, LanceNamespaceError):
        return exc.code
    if isinstance(exc, NotImplementedError):
        return ErrorCode.UNSUPPORTED
    if isinstance(exc, ValidationError):
        return ErrorCode.INVALID_INPUT
    return next((code for cls, code in PACKAGE_CODES if isinstance(exc, cls)), ErrorCode.INTERNAL)


def scrub(message: str, secrets: Iterable[str]) -> str:
    """The message with every secret value (4 characters or more; shorter ones would mask ordinary words) masked."""
    for value in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
        message = message.replace(value, MASK)
    return message


def error_body(exc: BaseException, operation: str, secrets: Iterable[str],
               unsupported: int = STATUS[ErrorCode.UNSUPPORTED]) -> tuple[int, dict[str, object]]:
    """The HTTP status and the ``ErrorResponse`` JSON for ``exc`` (``unsupported``: the status of code 0 -- the
    spec's 406, or 501 for the job routes the spec lacks); the detail is the exception's type only."""
    from lance_namespace_urllib3_client.models import ErrorResponse

    code = error_code(exc)
    if isinstance(exc, NotImplementedError) and not str(exc):
        message = f"{operation} is not supported by this namespace"
    elif isinstance(exc, gp.GenevaError):
        message = " ".join(str(exc).split())
    else:  # Lance's own: cut short, without the Rust source paths
        message = " ".join(lance_reason(exc, 1000).split())
    body = ErrorResponse(code=int(code), error=scrub(message, secrets)[:2000], detail=type(exc).__name__,
                         instance=operation)
    return (unsupported if code == ErrorCode.UNSUPPORTED else STATUS.get(code, 500)), body.to_dict()
