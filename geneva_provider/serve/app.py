"""The FastAPI app: the Lance Namespace REST protocol over any :class:`lance_namespace.LanceNamespace`.

One generic handler per route of :func:`~geneva_provider.serve.routes.routes`: it builds the operation's request
with the client's own pydantic model (the JSON body, the object ``id`` from the path split on the delimiter --
``$`` unless the ``delimiter`` query parameter says otherwise, the delimiter alone being the root namespace --
and the query parameters), calls the namespace method of the same name in a worker thread, and answers its
``to_dict()`` with the spec's success status.  Errors are the spec's ``ErrorResponse`` (:mod:`.errors`).

Extension routes the spec lacks, ``GET /v1/jobs/{job_id}``, ``GET /v1/jobs`` and ``POST /v1/jobs/{job_id}/cancel``,
call the namespace's ``describe_job`` / ``list_jobs`` / ``cancel_job`` when it has them (501 otherwise).

Secrets: a response never carries ``storage_options`` (a describe of a table on an object store would hand out
its credentials), and every error message has the values of ``secrets`` masked.  Auth is a bearer token
compared in constant time; without ``token`` the app must be built with ``auth=False``.
"""

from __future__ import annotations

import hmac
import json
import logging
import typing
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from lance_namespace.errors import UnauthenticatedError

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.serve.errors import error_body
from geneva_provider.serve.routes import BINARY, Route, routes

if TYPE_CHECKING:
    from lance_namespace import LanceNamespace

log = logging.getLogger(__name__)

DELIMITER = "$"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
SECRET_FIELDS = ("storage_options",)
PLAIN_TYPES = ("int", "str", "bool")
JOB_OPERATIONS = ("describe_job", "list_jobs", "cancel_job")  # extension routes: 501 when the namespace lacks them
NOT_IMPLEMENTED = 501


def object_id(raw: str, delimiter: str) -> list[str]:
    """The spec's ``string identifier``: the parts joined by the delimiter; the delimiter alone is the root ([])."""
    return [] if raw == delimiter else raw.split(delimiter)


def _query_value(value: str) -> Any:
    """A query parameter as the request model's strict fields want it: JSON when it parses (10, true), else text."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def _without_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_secrets(v) for k, v in value.items() if k not in SECRET_FIELDS}
    if isinstance(value, list):
        return [_without_secrets(v) for v in value]
    return value


def _plain(value: Any, response_type: str = "") -> Any:
    """A namespace method's answer as JSON data: a client model's ``to_dict()``, a pydantic model's dump; where the
    spec answers a bare value (``count_table_rows``: an int), a one-field model's value."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    elif hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if response_type in PLAIN_TYPES and isinstance(value, dict):
        values = [v for k, v in value.items() if k not in ("context", "identity")]
        return values[0] if len(values) == 1 else value
    return value


class _Server:
    """The namespace, the token and the secrets one app serves with."""

    def __init__(self, namespace: LanceNamespace, token: str | None, secrets: Iterable[str]) -> None:
        self.namespace = namespace
        self.token = token
        self.secrets = [*secrets, *([token] if token else [])]

    def error(self, exc: BaseException, operation: str) -> JSONResponse:
        status, body = error_body(exc, operation, self.secrets,
                                  unsupported=NOT_IMPLEMENTED if operation in JOB_OPERATIONS else 406)
        if status >= 500:
            log.warning("%s failed: %s", operation, body["error"])
        return JSONResponse(body, status_code=status)

    async def call(self, operation: str, run: Callable[[], Any], status: int, response_type: str = "") -> Response:
        try:
            result = await run_in_threadpool(run)
        except Exception as exc:  # noqa: BLE001 - every failure is answered as the spec's ErrorResponse
            return self.error(exc, operation)
        if isinstance(result, bytes | bytearray):
            return Response(bytes(result), status_code=status, media_type=ARROW_STREAM)
        return JSONResponse(_without_secrets(_plain(result, response_type)), status_code=status)

    def handler(self, route: Route) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            try:
                args = await self._arguments(route, request)
            except Exception as exc:  # noqa: BLE001 - a body the model refuses is bad input, answered as such
                return self.error(exc, route.operation)
            method = getattr(self.namespace, route.operation)
            return await self.call(route.operation, lambda: method(*args), route.status, route.response_type)

        handle.__name__ = route.operation
        return handle

    async def _arguments(self, route: Route, request: Request) -> list[Any]:
        delimiter = request.query_params.get("delimiter", DELIMITER)
        fields: dict[str, Any] = {}
        raw = await request.body()
        if route.body is not None and route.body != BINARY and raw:
            parsed = json.loads(raw)
            if route.body == "request_body":  # update_table_schema_metadata: the body is the metadata map
                parsed = {"metadata": parsed}
            if not isinstance(parsed, dict):
                raise InvalidArgumentError(f"{route.operation}: the request body must be a JSON object")
            fields.update(parsed)
        model_fields = route.request_model.model_fields
        fields.update({k: _query_value(v) for k, v in request.query_params.items()
                       if k in route.query and k in model_fields})
        if "index_name" in request.path_params:
            fields["index_name"] = request.path_params["index_name"]
        if "id" in request.path_params:
            fields["id"] = object_id(request.path_params["id"], delimiter)
        model = route.request_model.model_validate(fields)
        return [model, raw] if route.body == BINARY else [model]

    def job_call(self, operation: str, fields: dict[str, Any]) -> Callable[[], Any]:
        method = getattr(self.namespace, operation, None)
        if method is None:
            def unsupported() -> Any:
                raise NotImplementedError(f"{operation}: this namespace ({type(self.namespace).__name__}) has no "
                                          "job operations")
            return unsupported
        hint = typing.get_type_hints(method).get("request")
        return lambda: method(hint.model_validate(fields) if hasattr(hint, "model_validate") else fields)


def app(namespace: LanceNamespace, *, token: str | None = None, auth: bool = True,
        secrets: Iterable[str] = ()) -> FastAPI:
    """The REST app over ``namespace``; ``token`` is required unless ``auth=False``; ``secrets`` are masked."""
    if auth and not token:
        raise InvalidArgumentError("serve: no token given; pass token=... (or auth=False for a loopback-only server)")
    server = _Server(namespace, token if auth else None, secrets)
    api = FastAPI(title="geneva-provider Lance Namespace", docs_url=None, redoc_url=None, openapi_url=None)

    if auth:
        expected = f"Bearer {token}".encode()

        @api.middleware("http")
        async def bearer(request: Request, call_next: Callable[[Request], Any]) -> Response:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                exc = UnauthenticatedError("missing or wrong bearer token (Authorization: Bearer <token>)")
                status, body = error_body(exc, request.url.path, ())
                return JSONResponse(body, status_code=status, headers={"WWW-Authenticate": "Bearer"})
            response: Response = await call_next(request)
            return response

    for route in routes():
        api.add_api_route(route.path, server.handler(route), methods=[route.method], name=route.operation)

    @api.get("/v1/jobs/{job_id}", name="describe_job")
    async def describe_job(job_id: str) -> Response:
        return await server.call("describe_job", server.job_call("describe_job", {"job_id": job_id}), 200)

    @api.get("/v1/jobs", name="list_jobs")
    async def list_jobs(table: str | None = None, status: str | None = None, kind: str | None = None,
                        delimiter: str = DELIMITER) -> Response:
        """``?table=`` is a table's id as in the paths (``ns$table``), ``status`` / ``kind`` narrow the list."""
        given = {"id": object_id(table, delimiter) if table else None, "status": status, "kind": kind}
        fields = {k: v for k, v in given.items() if v is not None}
        return await server.call("list_jobs", server.job_call("list_jobs", fields), 200)

    @api.post("/v1/jobs/{job_id}/cancel", name="cancel_job")
    async def cancel_job(job_id: str) -> Response:
        return await server.call("cancel_job", server.job_call("cancel_job", {"job_id": job_id}), 200)

    return api
