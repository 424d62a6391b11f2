"""Running the app: the namespace a database URI is served as, and uvicorn with a graceful stop.

The namespace is the ``geneva`` implementation when one is registered with ``lance_namespace`` (the package's
GenevaNamespace: tables plus backfills, views and indexes), else Lance's own ``DirectoryNamespace`` over the
same root (tables only; the job operations answer "unsupported").  Storage options travel as ``storage.*``
properties and are masked in every error message.

uvicorn stops on SIGTERM / SIGINT: it refuses new connections, lets the requests in flight finish (at most
``GRACE_SECONDS``), then the namespace's ``close()`` runs if it has one.  A background job still running then
is not waited for: it stops with the process and is left resumable -- its stages restart from their
checkpoints, as after any crash.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from lance_namespace import LanceNamespace

log = logging.getLogger(__name__)

GRACE_SECONDS = 30


def namespace_for(uri: str, storage_options: Mapping[str, str] | None = None) -> LanceNamespace:
    """The namespace ``serve`` serves for a database URI (see the module docstring)."""
    import lance_namespace

    properties = {"root": uri, **{f"storage.{k}": str(v) for k, v in (storage_options or {}).items()}}
    registered = getattr(lance_namespace, "_REGISTERED_IMPLS", {})
    return lance_namespace.connect("geneva" if "geneva" in registered else "dir", properties)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_auth(host: str, token: str | None, auth: bool) -> None:
    """Refuses a server anyone could use: no token, unless ``--no-auth`` on a loopback address."""
    if auth and not token:
        raise InvalidArgumentError(
            "serve: no token configured; set GENEVA_SERVE_TOKEN, or pass --token-conn-id ID (an Airflow connection "
            "whose password is the token), or --no-auth with --host 127.0.0.1")
    if not auth and not is_loopback(host):
        raise InvalidArgumentError(f"serve: --no-auth is only allowed on a loopback address, not --host {host}")


def serve(namespace: LanceNamespace, *, host: str, port: int, token: str | None, auth: bool = True,
          secrets: tuple[str, ...] = ()) -> None:
    """Serves ``namespace`` until SIGTERM / SIGINT (see the module docstring for what a stop leaves)."""
    import uvicorn

    from geneva_provider.serve.app import app

    check_auth(host, token, auth)
    config = uvicorn.Config(app(namespace, token=token, auth=auth, secrets=secrets), host=host, port=port,
                            log_level="info", access_log=False, timeout_graceful_shutdown=GRACE_SECONDS)
    log.info("serving %s on http://%s:%d (auth: %s)", type(namespace).__name__, host, port,
             "bearer token" if auth else "none, loopback only")
    try:
        uvicorn.Server(config).run()
    finally:
        close = getattr(namespace, "close", None)
        if callable(close):
            close()
