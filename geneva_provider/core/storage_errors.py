"""Telling a store that cannot be reached, or that has no credentials, from one that throttles (core).

Lance retries a failed object-store request and then reports it; its namespace layer calls any
such failure "throttled", which sends a user looking at request rates when the endpoint is wrong
or the store is down, and reports credentials that cannot be found as a ~1,000-character dump of
Rust errors.  A connection that never opened, and a store without credentials, are reported as what
they are, naming the table and the endpoint (never the storage options' secrets).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from geneva_provider.core.errors import GenevaError, InvalidArgumentError, StorageAccessError, StorageUnreachableError

# What Lance's HTTP client says when no connection could be made (refused, DNS, unreachable host).
_NO_CONNECTION = ("error sending request", "connection refused", "tcp connect error", "dns error",
                  "failed to lookup address", "no route to host", "network is unreachable")
_UNKNOWN_HOST = ("dns error", "failed to lookup address", "name or service not known", "nodename nor servname")
_REFUSED = ("connection refused",)
# What the object-store clients say when no credentials were found (AWS's chain, Google's and Azure's).
_NO_CREDENTIALS = ("failed to get aws credentials", "credentialsnotloaded",
                   "no providers in chain provided credentials", "could not find default credentials", "no credentials",
                   "missing credentials")
_RETRIES = re.compile(r"after (\d+) retries")


def is_unreachable(exc: BaseException) -> bool:
    """True when ``exc`` says no connection to the store could be made (not a refused or throttled request)."""
    text = str(exc).lower()
    return any(marker in text for marker in _NO_CONNECTION)


def lacks_credentials(exc: BaseException) -> bool:
    """True when ``exc`` says the store's client found no credentials to sign its requests with."""
    text = str(exc).lower()
    return any(marker in text for marker in _NO_CREDENTIALS)


def check_endpoints(storage_options: dict[str, str] | None, subject: str) -> None:
    """InvalidArgumentError naming an endpoint option that is not an http(s) URL with a host: the object-store
    client panics on one (a Rust backtrace on stderr) instead of saying so."""
    for key, value in (storage_options or {}).items():
        if "endpoint" not in key.lower() or not isinstance(value, str):
            continue
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            shown = value.rsplit("@", 1)[-1]  # never user info
            raise InvalidArgumentError(f"{subject}: storage option {key!r} must be an http:// or https:// URL "
                                       f"such as http://127.0.0.1:9000, got {shown!r}")


def _plain_http_refused(exc: BaseException, endpoint: str | None) -> bool:
    """True when the client refused to send a request to an ``http://`` endpoint (no ``allow_http``)."""
    text = str(exc).lower()
    return endpoint is not None and endpoint.startswith("http://") and (
        "badscheme" in text or "builder error" in text or "url scheme is not allowed" in text)


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
    text = str(exc).lower()
    host = urlsplit(endpoint).hostname if endpoint else None
    if any(marker in text for marker in _UNKNOWN_HOST) or (host is not None and not _resolves(host)):
        what = f"the host {host!r} is unknown (its name does not resolve)" if host else \
            "the store's host name does not resolve (unknown host)"
        fix = "check the host of the endpoint in the storage options"
    elif any(marker in text for marker in _REFUSED):
        what, fix = "the connection was refused", "check the endpoint's port and that the store is running"
    else:
        what = "the connection was refused or the host is down or unreachable"
        fix = "check the endpoint in the storage options and that the store is running"
    return StorageUnreachableError(f"{subject}: could not connect to the object store{at}{tried}: {what}; {fix}")


def _resolves(host: str) -> bool:
    """Whether ``host`` has an address: Lance's error after its retries says only "error sending request"."""
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return True


def credentials_error(subject: str, storage_options: dict[str, str] | None) -> StorageAccessError:
    """The package's error for a store ``subject`` found no credentials for (the options' names, never values)."""
    endpoint = endpoint_of(storage_options)
    at = f" at {endpoint}" if endpoint else ""
    given = sorted(k for k in storage_options or {} if _credential_key(k))
    has = f" (the storage options hold {', '.join(given)})" if given else " (the storage options hold none)"
    return StorageAccessError(
        f"{subject}: no credentials for the object store{at}{has}; set them in the storage options (for S3: "
        "aws_access_key_id and aws_secret_access_key) or in the environment the process runs in")


def _credential_key(key: str) -> bool:
    lowered = key.lower()
    return any(part in lowered for part in ("key", "secret", "token", "credential", "password", "sas"))


@contextmanager
def reaching(subject: str, storage_options: dict[str, str] | None) -> Iterator[None]:
    """Turns a failure to connect to the store inside the block into :class:`StorageUnreachableError`, and missing
    credentials into :class:`StorageAccessError`."""
    try:
        yield
    except GenevaError:
        raise
    except Exception as exc:
        if is_unreachable(exc):
            raise unreachable_error(exc, subject, storage_options) from None
        if lacks_credentials(exc):
            raise credentials_error(subject, storage_options) from None
        endpoint = endpoint_of(storage_options)
        if _plain_http_refused(exc, endpoint):
            raise InvalidArgumentError(f"{subject}: the object store endpoint {endpoint} is plain http: add "
                                       "allow_http='true' to the storage options (or use https)") from None
        raise
