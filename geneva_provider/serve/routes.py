"""The Lance Namespace REST protocol's route table, read from the official client rather than written out by hand.

``lance-namespace-urllib3-client`` is generated from the spec's OpenAPI document: each ``*Api`` class has one
method per operation, whose ``_<op>_serialize`` twin names the HTTP method and path, whose signature names the
path / query / body parameters, and whose ``_response_types_map`` names the success status (200, or 202 for
``backfill_column``).  Reading them here keeps the server in step with the client version installed: a new
operation is served as soon as the client and :class:`lance_namespace.LanceNamespace` both have it.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import typing
from dataclasses import dataclass

from pydantic import BaseModel

BINARY = "body"  # an Arrow IPC stream body (create_table, insert_into_table, merge_insert_into_table)
PATH_PARAMS = ("id", "index_name")


@dataclass(frozen=True)
class Route:
    """One operation: ``POST /v1/table/{id}/describe`` -> ``namespace.describe_table(DescribeTableRequest)``."""

    operation: str
    method: str
    path: str
    request_model: type[BaseModel]
    query: tuple[str, ...]  # query parameters (besides ``delimiter``), copied into the request model
    body: str | None  # None (bodyless), BINARY, or the name of the JSON body parameter
    status: int  # the success status the spec gives
    response_type: str  # the spec's response: a model's name, or a plain "int" / "str" / "bytearray"


def _call_keywords(source: str, names: tuple[str, ...]) -> dict[str, object]:
    tree = ast.parse(textwrap.dedent(source))
    return {k.arg: ast.literal_eval(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
            for k in node.keywords if k.arg in names and isinstance(k.value, ast.Constant)}


def _success(source: str) -> tuple[int, str]:
    """The success status and response type of ``_response_types_map`` (``{'202': "...Response", '400': ...}``)."""
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name) and target.id == "_response_types_map" and node.value is not None:
                codes: dict[str, str] = ast.literal_eval(node.value)
                status = min(c for c in codes if c.isdigit() and c.startswith("2"))
                return int(status), codes[status]
    return 200, ""


def _route(api_class: type, operation: str) -> Route | None:
    from lance_namespace import LanceNamespace

    handler = getattr(LanceNamespace, operation, None)
    if handler is None:
        return None
    request_model = typing.get_type_hints(handler).get("request")
    if not (inspect.isclass(request_model) and issubclass(request_model, BaseModel)):
        return None
    serialize = inspect.getsource(getattr(api_class, f"_{operation}_serialize"))
    where = _call_keywords(serialize, ("method", "resource_path"))
    params = [p for p in inspect.signature(getattr(api_class, operation)).parameters
              if p != "self" and not p.startswith("_")]
    body = next((p for p in params if p == BINARY or p.endswith("_request") or p == "request_body"), None)
    query = tuple(p for p in params if p not in (*PATH_PARAMS, "delimiter") and p != body)
    return Route(operation, str(where["method"]), str(where["resource_path"]), request_model, query, body,
                 *_success(inspect.getsource(getattr(api_class, operation))))


@functools.cache
def routes() -> tuple[Route, ...]:
    """Every operation of the installed client that :class:`~lance_namespace.LanceNamespace` declares, once each."""
    import lance_namespace_urllib3_client.api as api

    seen: dict[tuple[str, str], Route] = {}
    for api_class in (c for name, c in vars(api).items() if name.endswith("Api") and inspect.isclass(c)):
        for operation in sorted(vars(api_class)):
            if operation.startswith("_") or operation.endswith(("_with_http_info", "_without_preload_content")):
                continue
            route = _route(api_class, operation)
            if route is not None:
                seen.setdefault((route.method, route.path), route)
    return tuple(seen.values())
