"""The OpenAPI 3.1 document of the REST frontend (`GET /openapi.json`): the IETF A2T draft
routes, the a2t dialect, the Agent Tool records and the probes, with the request and response
schemas every route keeps to."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from bridge.search import MAX_QUERY_CHARS
from bridge.serve.openapi_schemas import (
    BOOL,
    INT,
    OBJ,
    STR,
    component_schemas,
    ref,
)
from bridge.serve.rest import MAX_PAGE_LIMIT
from bridge.serve.rest_a2t import GENERATION_HEADER, GROUPS_PATH, MAX_GROUPS, MAX_TOOLS, TOOLS_PATH
from bridge.serve.rest_http import JSONBody, ServeContext, endpoint
from bridge.serve.rest_records import MAX_SEARCH_LIMIT

__all__ = ["openapi_document", "openapi_routes"]


_DESCRIPTIONS = {
    200: "OK",
    400: "malformed request (the error's details carry a pointer)",
    401: "missing or unknown bearer token",
    403: "the call is not permitted on the caller's surface",
    404: "no such tool, version or record on the caller's surface",
    408: "the request body did not arrive within server.body_timeout",
    409: "a pinned version can no longer be served by the upstream",
    413: "request body over server.max_body_bytes",
    422: "the tool ran and failed, or its result was refused",
    429: "rate limited (Retry-After)",
    503: "an upstream is unavailable (Retry-After when known)",
    504: "the upstream did not answer in time",
    500: "the bridge failed to answer (structured body, safe to retry)",
}
_INVOKE_ERRORS = (400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 503, 504)


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _responses(
    ok: str | dict[str, Any],
    errors: tuple[int, ...],
    *,
    error_schema: str = "ErrorBody",
    ok_headers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ok_schema = ref(ok) if isinstance(ok, str) else ok
    out: dict[str, Any] = {"200": {"description": "OK", "content": _json(ok_schema)}}
    if ok_headers:
        out["200"]["headers"] = ok_headers
    for status in errors:
        response: dict[str, Any] = {
            "description": _DESCRIPTIONS[status],
            "content": _json(ref(error_schema)),
        }
        if status in (429, 503):
            response["headers"] = {"Retry-After": {"description": "seconds", "schema": INT}}
        out[str(status)] = response
    return out


def _param(
    name: str, where: str, schema: dict[str, Any], description: str, required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "schema": schema,
        "description": description,
    }


PAGE = [
    _param(
        "pageLimit",
        "query",
        {"type": "integer", "minimum": 1},
        f"items per page (default 100, at most {MAX_PAGE_LIMIT}; larger values are clamped)",
    ),
    _param("pageCursor", "query", STR, "the `paging.next` of the previous page"),
]
TOOL_ID = _param(
    "toolId", "path", STR, "the tool's UUID (its exposed name or alias is accepted too)"
)
VERSION = _param(
    "versionNum", "path", {"type": "string", "pattern": "^[0-9]+$"}, "a version number"
)
A2T_PAGE = [
    _param(
        "q",
        "query",
        {"type": "string", "maxLength": MAX_QUERY_CHARS},
        "keyword search (tool search, best matches first)",
    ),
    _param("offset", "query", {"type": "integer", "minimum": 0}, "items to skip"),
    _param(
        "limit",
        "query",
        {"type": "integer", "minimum": 0},
        f"items per page (0 or absent: 100; at most {MAX_TOOLS})",
    ),
]
GENERATION = {
    GENERATION_HEADER: {
        "description": "catalog generation of this answer; echo it on execute",
        "schema": {"type": "string"},
    }
}


def _op(
    op_id: str,
    summary: str,
    responses: dict[str, Any],
    *,
    params: list[dict[str, Any]] | None = None,
    body: str | dict[str, Any] | None = None,
    tag: str,
    open_: bool = False,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "tags": [tag],
        "responses": responses,
    }
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {
            "required": True,
            "content": _json(ref(body) if isinstance(body, str) else body),
        }
    if open_:
        op["security"] = []
    return op


# the a2t execute routes answer a tool's outcome, errors and unknown tools included, as 200
# (404: an empty tool name in the path, which names no route)
_EXECUTE_ERRORS = (400, 401, 404, 408, 413, 500)
_GENERATION_PARAM = _param(
    GENERATION_HEADER,
    "header",
    {"type": "string", "pattern": "^[0-9]+$"},
    "the generation of the caller's last listing",
)


def openapi_document(*, server_url: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 description of every REST route of the bridge."""
    read = (400, 401, 500)
    one = (400, 401, 404, 500)
    paths: dict[str, Any] = {
        "/tools": {
            "get": _op(
                "listTools",
                "Enumerate the current version of every tool (IETF A2T)",
                _responses("ToolSignaturePage", read),
                params=[
                    *PAGE,
                    _param(
                        "tags",
                        "query",
                        STR,
                        "extension: comma-separated tags a tool must all carry",
                    ),
                    _param(
                        "tag", "query", STR, "extension: one tag a tool must carry (repeatable)"
                    ),
                ],
                tag="a2t-draft",
            )
        },
        "/tools/{toolId}": {
            "get": _op(
                "getTool",
                "The current version of one tool",
                _responses("ToolSignature", one),
                params=[TOOL_ID],
                tag="a2t-draft",
            )
        },
        "/tools/{toolId}/versions": {
            "get": _op(
                "listToolVersions",
                "Every version of a tool, newest first",
                _responses("ToolSignaturePage", one),
                params=[TOOL_ID, *PAGE],
                tag="a2t-draft",
            )
        },
        "/tools/{toolId}/versions/{versionNum}": {
            "get": _op(
                "getToolVersion",
                "One version of a tool",
                _responses("ToolSignature", one),
                params=[TOOL_ID, VERSION],
                tag="a2t-draft",
            )
        },
        "/tools/{toolId}:invoke": {
            "post": _op(
                "invokeTool",
                "Invoke the current version",
                _responses("InvokeResponse", _INVOKE_ERRORS),
                params=[TOOL_ID],
                body="InvokeRequest",
                tag="a2t-draft",
            )
        },
        "/tools/{toolId}/versions/{versionNum}:invoke": {
            "post": _op(
                "invokeToolVersion",
                "Invoke a pinned version (validated against that version's schema)",
                _responses("InvokeResponse", _INVOKE_ERRORS),
                params=[TOOL_ID, VERSION],
                body="InvokeRequest",
                tag="a2t-draft",
            )
        },
        "/.well-known/a2t-capabilities.json": {
            "get": _op(
                "a2tCapabilities",
                "a2t dialect capabilities",
                _responses("Capabilities", (401, 500)),
                tag="a2t",
            )
        },
        TOOLS_PATH: {
            "get": _op(
                "a2tListTools",
                "a2t: list tools",
                _responses("ToolsResponse", read, ok_headers=GENERATION),
                params=A2T_PAGE,
                tag="a2t",
            )
        },
        TOOLS_PATH + "/{name}": {
            "post": _op(
                "a2tExecute",
                "a2t: execute a tool (tool outcomes, errors included, are HTTP 200)",
                _responses("ExecuteResponse", _EXECUTE_ERRORS, ok_headers=GENERATION),
                params=[_param("name", "path", STR, "tool name"), _GENERATION_PARAM],
                body={"type": "object", "description": "the tool's arguments"},
                tag="a2t",
            )
        },
        GROUPS_PATH: {
            "get": _op(
                "a2tListGroups",
                "a2t: list groups (one per upstream)",
                _responses("GroupsResponse", read, ok_headers=GENERATION),
                params=[
                    _param("q", "query", STR, "substring of the group id or description"),
                    _param(
                        "parent_id",
                        "query",
                        STR,
                        "groups are all top level: any value gives an empty list",
                    ),
                    _param("offset", "query", {"type": "integer", "minimum": 0}, "items to skip"),
                    _param(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 0},
                        f"items per page (0 or absent: 50; at most {MAX_GROUPS})",
                    ),
                ],
                tag="a2t",
            )
        },
        GROUPS_PATH + "/{groupId}/tools": {
            "get": _op(
                "a2tListGroupTools",
                "a2t: list one group's tools",
                _responses("ToolsResponse", one, ok_headers=GENERATION),
                params=[_param("groupId", "path", STR, "group id (upstream name)"), *A2T_PAGE],
                tag="a2t",
            )
        },
        GROUPS_PATH + "/{groupId}/tools/{name}": {
            "post": _op(
                "a2tExecuteInGroup",
                "a2t: execute a tool of a group",
                _responses("ExecuteResponse", _EXECUTE_ERRORS, ok_headers=GENERATION),
                params=[
                    _param("groupId", "path", STR, "group id"),
                    _param("name", "path", STR, "tool name"),
                    _GENERATION_PARAM,
                ],
                body={"type": "object", "description": "the tool's arguments"},
                tag="a2t",
            )
        },
        "/search": {
            "get": _op(
                "searchTools",
                "Tool search: keywords or select:a,b",
                _responses("ToolSearchResult", read),
                params=[
                    _param(
                        "q",
                        "query",
                        {"type": "string", "maxLength": MAX_QUERY_CHARS},
                        "keywords, or select:name1,name2; may be left out when a filter lists tools by itself",
                    ),
                    _param(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 1},
                        f"best matches returned (default 10, at most {MAX_SEARCH_LIMIT})",
                    ),
                    _param("namespace", "query", STR, "only this upstream"),
                    _param("kind", "query", STR, "only this tool kind"),
                    _param("tags", "query", STR, "comma-separated tags"),
                    _param("read_only", "query", BOOL, "only (non-)read-only tools"),
                    _param("include_schema", "query", BOOL, "add each match's input schema"),
                ],
                tag="records",
            )
        },
        "/surfaces/{name}": {
            "get": _op(
                "getSurface",
                "The caller's tool surface",
                _responses("ToolSurface", one),
                params=[
                    _param("name", "path", STR, "surface name"),
                    _param(
                        "deferred_limit",
                        "query",
                        {"type": "integer", "minimum": 0},
                        "deferred refs listed (default 1000)",
                    ),
                ],
                tag="records",
            )
        },
        "/declarations/{toolId}": {
            "get": _op(
                "getDeclaration",
                "A tool's full Agent Tool declaration",
                _responses("ToolDeclaration", one),
                params=[TOOL_ID],
                tag="records",
            )
        },
        "/invoke": {
            "post": _op(
                "invokeRecord",
                "Invoke by name; the body is the result envelope",
                _responses("ToolResult", _INVOKE_ERRORS, error_schema="AnyError"),
                body="InvokeRecordRequest",
                tag="records",
            )
        },
        "/results/{ref}": {
            "get": _op(
                "getPersistedResult",
                "A persisted large result",
                _responses(OBJ, one),
                params=[_param("ref", "path", STR, "result ref")],
                tag="records",
            )
        },
        "/resources": {
            "get": _op(
                "readLinkedResource",
                "A resource an upstream linked in a result on the caller's surface, read from that upstream",
                _responses(OBJ, (400, 401, 404, 422, 500, 503, 504)),
                params=[
                    _param(
                        "uri",
                        "query",
                        STR,
                        "the URI of a resource link (or embedded resource) in a result",
                        required=True,
                    )
                ],
                tag="records",
            )
        },
        "/healthz": {
            "get": _op(
                "healthz",
                "The process is alive",
                _responses("Health", ()),
                tag="probes",
                open_=True,
            )
        },
        "/readyz": {
            "get": _op(
                "readyz",
                "Per-upstream states; 503 while an upstream is still "
                "starting, the search index takes in what the start "
                "listed, or none is ready",
                {
                    "200": {"description": "ready", "content": _json(ref("Ready"))},
                    "503": {
                        "description": "an upstream still starting (named in `starting`), the search "
                        "index still taking in what the start listed (`search: "
                        "indexing`), or no upstream ready",
                        "content": _json(ref("Ready")),
                    },
                },
                tag="probes",
                open_=True,
            )
        },
        "/openapi.json": {
            "get": _op("openapi", "This document", _responses(OBJ, ()), tag="probes", open_=True)
        },
        "/metrics": {
            "get": _op(
                "metrics",
                "Prometheus metrics; open without a token when telemetry.metrics_public",
                {
                    "200": {
                        "description": "the Prometheus text format (OpenMetrics when asked)",
                        "content": {"text/plain": {"schema": STR}},
                    },
                    "401": {"description": _DESCRIPTIONS[401], "content": _json(ref("ErrorBody"))},
                },
                tag="probes",
            )
        },
    }
    schemas = component_schemas()
    schemas["AnyError"] = {"anyOf": [ref("ToolResult"), ref("ErrorBody")]}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Tool federation bridge: A2T REST",
            "version": "0.1.0",
            "description": "The federated catalog over the IETF A2T draft (root), the a2t dialect (/a2t) and Agent Tool records. "
            "Errors carry an Agent Tool error_class; 4xx for the caller's mistakes, 5xx only for faults a retry may cure. "
            "MCP (streamable HTTP) is served on the same port at /mcp.",
        },
        "servers": [{"url": server_url or "/"}],
        "security": [{"bearer": []}, {}],  # open when no token is configured
        "tags": [{"name": "a2t-draft"}, {"name": "a2t"}, {"name": "records"}, {"name": "probes"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token from server.tokens; each is bound to one surface",
                }
            },
        },
    }


def openapi_routes(ctx: ServeContext) -> list[BaseRoute]:
    document = openapi_document(server_url=ctx.server.public_url)

    @endpoint
    async def openapi(request: Request) -> Response:
        return JSONBody(document)

    return [Route("/openapi.json", openapi, methods=["GET"])]
