"""The IETF A2T draft served at the root: tool enumeration with paging and a `tags` filter, one
tool, its versions, and invocation of the current or a pinned version (`POST …:invoke`, the
literal custom-method suffix)."""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from bridge.model import ToolDeclaration
from bridge.serve.rest_http import (
    ApiError,
    JSONBody,
    ServeContext,
    decimal,
    endpoint,
    query_int,
    query_list,
    result_error_response,
)
from bridge.translate import ietf

__all__ = ["DEFAULT_PAGE_LIMIT", "MAX_PAGE_LIMIT", "decode_cursor", "encode_cursor", "ietf_routes"]

DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 500


def encode_cursor(position: dict[str, Any]) -> str:
    return (
        base64.urlsafe_b64encode(json.dumps(position, separators=(",", ":")).encode())
        .decode()
        .rstrip("=")
    )


def decode_cursor(request: Request, key: str, kind: type) -> Any:
    """The position a `pageCursor` points after, or None for the first page. Cursors are opaque to
    clients; a cursor this server did not issue is a 400."""
    raw = request.query_params.get("pageCursor")
    if not raw:
        return None
    try:
        position = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        value = position[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TypeError
        return value
    except (ValueError, TypeError, KeyError, binascii.Error, RecursionError):
        raise ApiError(
            400,
            "invalid_arguments",
            "pageCursor is not a cursor this server issued; start again without it",
            details={"parameter": "pageCursor"},
        ) from None


def _paging(limit: int, next_cursor: str | None) -> dict[str, Any]:
    paging: dict[str, Any] = {"pageLimit": limit}
    if next_cursor:
        paging["next"] = next_cursor
    return paging


def _version_number(raw: str, decl: ToolDeclaration) -> int:
    number = decimal(raw)
    if number is None or number < 1:
        raise ApiError(
            404,
            "unknown_tool",
            f"tool {decl.name!r} has no version {raw[:40]!r}",
            error_code="unknown_version",
        )
    return number


def _not_an_invocation(request: Request, param: str) -> None:
    """`GET /tools/{id}:invoke` reaches the GET route of `/tools/{id}` with `:invoke` in the id:
    it is the invoke route asked with the wrong method."""
    if request.path_params[param].endswith(":invoke"):
        raise ApiError(
            405,
            "invalid_arguments",
            f"{request.method} is not allowed on {request.url.path}; invoke with POST",
            error_code="method_not_allowed",
            headers={"Allow": "POST"},
        )


def ietf_routes(ctx: ServeContext) -> list[BaseRoute]:
    bridge = ctx.bridge

    @endpoint
    async def list_tools(request: Request) -> Response:
        surface = ctx.caller(request)
        limit = query_int(
            request, "pageLimit", DEFAULT_PAGE_LIMIT, minimum=1, maximum=MAX_PAGE_LIMIT, clamp=True
        )
        after = decode_cursor(request, "after", str)
        tags = query_list(request, "tags", "tag")
        tools, names = ctx.listing(surface)
        start = bisect.bisect_right(names, after) if after is not None else 0
        page: list[ToolDeclaration] = []
        index = start
        while index < len(tools) and len(page) < limit:
            decl = tools[index]
            if not tags or all(t in decl.tags for t in tags):
                page.append(decl)
            index += 1
        more = index < len(tools) and (
            not tags or any(all(t in d.tags for t in tags) for d in tools[index:])
        )
        next_cursor = encode_cursor({"after": page[-1].name}) if page and more else None
        return JSONBody(
            {
                "items": [ietf.render_declaration(d) for d in page],
                "paging": _paging(limit, next_cursor),
            }
        )

    @endpoint
    async def get_tool(request: Request) -> Response:
        _not_an_invocation(request, "tool_id")
        surface = ctx.caller(request)
        decl = ctx.visible(request.path_params["tool_id"], surface)
        return JSONBody(ietf.render_declaration(decl))

    @endpoint
    async def list_versions(request: Request) -> Response:
        surface = ctx.caller(request)
        decl = ctx.visible(request.path_params["tool_id"], surface)
        limit = query_int(
            request, "pageLimit", DEFAULT_PAGE_LIMIT, minimum=1, maximum=MAX_PAGE_LIMIT, clamp=True
        )
        below = decode_cursor(request, "below", int)
        records = [
            r for r in bridge.catalog.versions.history(decl) if below is None or r.version < below
        ]
        page = records[:limit]
        next_cursor = encode_cursor({"below": page[-1].version}) if len(records) > limit else None
        return JSONBody(
            {
                "items": [ietf.render_version(decl, r) for r in page],
                "paging": _paging(limit, next_cursor),
            }
        )

    @endpoint
    async def get_version(request: Request) -> Response:
        _not_an_invocation(request, "version")
        surface = ctx.caller(request)
        decl = ctx.visible(request.path_params["tool_id"], surface)
        number = _version_number(request.path_params["version"], decl)
        record = bridge.catalog.versions.get(decl, number)
        if record is None:
            raise ApiError(
                404,
                "unknown_tool",
                f"tool {decl.name!r} has no version {number} (current is {decl.version})",
                error_code="unknown_version",
            )
        return JSONBody(ietf.render_version(decl, record))

    async def _invoke(request: Request, version_raw: str | None) -> Response:
        surface = ctx.caller(request)
        decl = ctx.callable(request.path_params["tool_id"], surface)
        version = _version_number(version_raw, decl) if version_raw is not None else None
        body = await ctx.read_json(request)
        arguments = ietf.parse_invocation(
            body, tool_names=(decl.name, *decl.aliases, decl.native_name)
        )
        result = await ctx.invoke(
            request, decl.tool_id, arguments, version=version, surface=surface
        )
        if result.is_error:
            return result_error_response(result)
        output_schema = decl.output_schema
        if version is not None and version != decl.version:
            record = bridge.catalog.versions.get(decl, version)
            output_schema = record.signature.get("output_schema") if record else None
        return JSONBody(ietf.render_outputs(result, output_schema))

    @endpoint
    async def invoke_current(request: Request) -> Response:
        return await _invoke(request, None)

    @endpoint
    async def invoke_pinned(request: Request) -> Response:
        return await _invoke(request, request.path_params["version"])

    return [
        # the `:invoke` routes come first: `{tool_id}` alone would also match `<id>:invoke`
        Route("/tools/{tool_id}:invoke", invoke_current, methods=["POST"]),
        Route("/tools/{tool_id}/versions/{version}:invoke", invoke_pinned, methods=["POST"]),
        Route("/tools", list_tools, methods=["GET"]),
        Route("/tools/{tool_id}", get_tool, methods=["GET"]),
        Route("/tools/{tool_id}/versions", list_versions, methods=["GET"]),
        Route("/tools/{tool_id}/versions/{version}", get_version, methods=["GET"]),
    ]
