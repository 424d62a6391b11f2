"""Telling a store that cannot be reached from one that throttles (core).

Lance retries a failed object-store request and then reports it; its namespace layer calls any
such failure "throttled", which sends a user looking at request rates when the endpoint is wrong
or the store is down.  A connection that never opened is reported as what it is, naming the table
and the endpoint (never the storage options' secrets).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from geneva_provider.core.errors import GenevaError, StorageUnreachableError

# What Lance's HTTP client says when no connection could be made (refused, DNS, unreachable host).
_NO_CONNECTION = ("error sending request", "connection refused", "tcp connect error", "dns error",
                  "failed to lookup address", "no route to host", "network is unreachable")
_RETRIES = re.compile(r"after (\d+) retries")


def is_unreachable(exc: BaseException) -> bool:
    """True when ``exc`` says no connection to the store could be made (not a refused or throttled request)."""
    text = str(exc).lower()
    return any(marker in text for marker in _NO_CONNECTION)


def endpoint_of(storage_options: dict[str, str] | None) -> str | None:
    """The store endpoint the options name (scheme, host and port only: no user info, path or query)."""
    for key, value in (storage_options or {}).items():
        if "endpoint" in key.lower() and isinstance(value, str) and "://" in value:
            parts = urlsplit(value)
            host = parts.hostname or ""
            netloc = f"{host}:{parts.port}" if parts.port else host
            return urlunsplit((parts.scheme, netloc, "", "", ""))
    return None


def unreachable_error(exc: BaseException, subject: str, storage_options: dict[str, str] | None
                      ) -> StorageUnreachableError:
    """The package's error for a store ``subject`` could not connect to."""
    endpoint = endpoint_of(storage_options)
    retries = _RETRIES.search(str(exc))
    tried = f" (after {retries.group(1)} retries)" if retries else ""
    at = f" at {endpoint}" if endpoint else ""
    return StorageUnreachableError(
        f"{subject}: could not connect to the object store{at}{tried}: the connection was refused or the host is "
        "down or unreachable; check the endpoint in the storage options and that the "
        "store is running")


@contextmanager
def reaching(subject: str, storage_options: dict[str, str] | None) -> Iterator[None]:
    """Turns a failure to connect to the store inside the block into :class:`StorageUnreachableError`."""
    try:
        yield
    except GenevaError:
        raise
    except Exception as exc:
        if is_unreachable(exc):
            raise unreachable_error(exc, subject, storage_options) from None
        raise
