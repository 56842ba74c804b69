"""The JSON the console's pages read beyond the REST API: who the caller is, the upstreams, the
catalog page (filtered listing and search), a tool's page (its facts, alternatives, versions and
exports), the difference of two of its versions, and a call that streams its progress. Every
answer is made from the caller's own surface: a tool it hides is answered as a missing one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from bridge.envelopes import error_result
from bridge.identity import Identity
from bridge.model import ToolDeclaration, ToolProgress, ToolResult, new_id
from bridge.policy import unknown_tool
from bridge.serve.console.diff import signature_diff
from bridge.serve.console.listing import CatalogFilters, CatalogListing, tool_summary
from bridge.serve.rest_http import (
    ApiError,
    JSONBody,
    ServeContext,
    decimal,
    endpoint,
    query_bool,
    query_int,
    search_query,
    status_for,
)
from bridge.surface import Surface
from bridge.translate import providers
from bridge.translate.mcp import render_tool
from bridge.translate.wire import json_safe

__all__ = ["API_PREFIX", "MAX_PAGE", "TOKEN_PLACEHOLDER", "console_api_routes"]

API_PREFIX = "/ui/api"
MAX_PAGE = 200
DEFAULT_PAGE = 50
# What the exports write where the caller's token goes: the console never puts a token in them.
TOKEN_PLACEHOLDER = "${A2T_BRIDGE_TOKEN}"
_PLACEMENTS = ("loaded", "deferred", "blocked")
_ALTERNATIVES = 20


def _filters(request: Request) -> CatalogFilters:
    params = request.query_params
    placement = params.get("placement") or None
    if placement is not None and placement not in _PLACEMENTS:
        raise ApiError(
            400,
            "invalid_arguments",
            "query parameter 'placement' must be loaded, deferred or blocked",
            details={"parameter": "placement"},
        )
    return CatalogFilters(
        upstream=params.get("upstream") or None,
        kind=params.get("kind") or None,
        tag=params.get("tag") or None,
        read_only=query_bool(request, "read_only"),
        destructive=query_bool(request, "destructive"),
        placement=placement,
    )


def _example_value(schema: Any) -> Any:
    """A placeholder value of a schema's type, for the `curl` export."""
    if not isinstance(schema, dict):
        return ""
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    return {"integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}.get(
        kind or "string", ""
    )


def _base_url(ctx: ServeContext, request: Request) -> str:
    public = ctx.server.public_url
    return (public or str(request.base_url)).rstrip("/")


def _exports(ctx: ServeContext, request: Request, decl: ToolDeclaration) -> dict[str, Any]:
    """The tool in the forms a designer takes away: an MCP client's config entry for the bridge
    with the tool's MCP listing, a `curl` of its A2T invocation, and its function declarations
    for OpenAI, Anthropic and Gemini (`bridge.translate.providers`)."""
    base = _base_url(ctx, request)
    out: dict[str, Any] = {}
    out["mcp_config"] = {
        "mcpServers": {
            "a2t-bridge": {
                "type": "http",
                "url": f"{base}/mcp",
                "headers": {"Authorization": f"Bearer {TOKEN_PLACEHOLDER}"},
            }
        }
    }
    schema = decl.input_schema
    found = schema.get("properties")
    props: dict[str, Any] = found if isinstance(found, dict) else {}
    required = [r for r in schema.get("required") or [] if r in props]
    arguments = {name: _example_value(props[name]) for name in required}
    body = json.dumps({"arguments": arguments}, ensure_ascii=False)
    out["curl"] = (
        f"curl -s -X POST {shlex.quote(f'{base}/tools/{decl.tool_id}:invoke')} \\\n"
        f'  -H "Authorization: Bearer $A2T_BRIDGE_TOKEN" \\\n'
        f"  -H 'Content-Type: application/json' \\\n"
        f"  -d {shlex.quote(body)}"
    )
    renderers: dict[str, Any] = {
        "mcp_tool": lambda: render_tool(decl).model_dump(
            mode="json", by_alias=True, exclude_none=True
        ),
        "openai": lambda: providers.to_openai(decl),
        "anthropic": lambda: providers.to_anthropic(decl),
        "gemini": lambda: providers.to_gemini(decl),
    }
    for key, render in renderers.items():
        try:
            out[key] = render()
        except Exception as exc:  # a schema a format cannot carry: said, the others still given
            out[key] = {"error": f"this tool cannot be written in this format: {exc}"}
    return out


def _parameters(schema: Any) -> list[dict[str, Any]]:
    """The rows of a schema's table: one per property, nested objects' properties after their
    parent as `parent.child`."""
    rows: list[dict[str, Any]] = []

    def walk(node: Any, prefix: str, depth: int) -> None:
        if not isinstance(node, dict) or depth > 4:
            return
        props = node.get("properties")
        if not isinstance(props, dict):
            return
        required = set(node.get("required") or [])
        for name, prop in props.items():
            prop = prop if isinstance(prop, dict) else {}
            kind = prop.get("type")
            if kind is None and "$ref" in prop:
                kind = prop["$ref"].rsplit("/", 1)[-1]
            if kind is None:
                kind = " | ".join(
                    str(p.get("type", "?"))
                    for p in prop.get("anyOf") or prop.get("oneOf") or []
                    if isinstance(p, dict)
                )
            if kind == "array" and isinstance(prop.get("items"), dict):
                kind = f"array of {prop['items'].get('type', 'any')}"
            constraints = {
                k: prop[k]
                for k in (
                    "enum",
                    "format",
                    "pattern",
                    "minimum",
                    "maximum",
                    "minLength",
                    "maxLength",
                    "default",
                )
                if k in prop
            }
            rows.append(
                {
                    "name": f"{prefix}{name}",
                    "type": kind if isinstance(kind, str) else " | ".join(map(str, kind or [])),
                    "required": name in required,
                    "description": prop.get("description") or prop.get("title") or "",
                    "constraints": json_safe(constraints),
                }
            )
            walk(prop, f"{prefix}{name}.", depth + 1)

    walk(schema, "", 0)
    return rows


def console_api_routes(ctx: ServeContext) -> list[BaseRoute]:
    bridge = ctx.bridge
    listing = CatalogListing(bridge)

    def seen(request: Request, surface: Surface) -> ToolDeclaration:
        """The tool a page names, as the caller's surface lets it know it: shown, or blocked
        with a reason it is told; hidden and missing alike are a 404."""
        ref = request.path_params["ref"]
        decl = surface.lookup(ref)
        if decl is None:
            raise ApiError(
                404,
                "unknown_tool",
                f"no tool {ref[:120]!r}; search the catalog for the right name",
            )
        return decl

    def alternatives(decl: ToolDeclaration, surface: Surface) -> list[dict[str, Any]]:
        """The same function from other upstreams, as tool search folds them: the matches that
        name this tool an alternative, and those it names."""
        words = (decl.native_name or decl.name).replace("_", " ").replace("-", " ")
        try:
            result = bridge.find_tools(words, surface=surface, limit=10, fold_alternatives=True)
        except Exception:
            return []
        found: dict[str, dict[str, Any]] = {}
        for match in result.matches:
            named = [a["tool_id"] for a in match.alternatives or []]
            if match.tool_id == decl.tool_id:
                ids = named
            elif decl.tool_id in named:
                ids = [match.tool_id, *named]
            else:
                continue
            for tool_id in ids:
                other = bridge.catalog.get(tool_id)
                if (
                    other is not None
                    and other.tool_id != decl.tool_id
                    and other.namespace != decl.namespace
                    and surface.visible(other)
                ):
                    found[tool_id] = tool_summary(other, surface)
        return list(found.values())[:_ALTERNATIVES]

    @endpoint
    async def session(request: Request) -> Response:
        surface = ctx.caller(request)
        found = ctx.identity(request)
        who: dict[str, Any] = {"surface": surface.name}
        if isinstance(found, Identity):
            who["via"] = found.via
            who["caller"] = found.subject or found.client_id
        counts = surface.counts()
        body = {
            **who,
            "tools": len(listing.shown(surface)),
            "loaded": counts["loaded"],
            "deferred": counts["deferred"],
            "blocked": len(listing.blocked(surface)),
            "facets": listing.facets(surface),
        }
        return JSONBody(body)

    @endpoint
    async def upstreams(request: Request) -> Response:
        surface = ctx.caller(request)
        shown = listing.facets(surface)["upstreams"]
        counts = dict(shown)
        calls = bridge.telemetry.metrics.upstream_calls(surface.name)
        items = []
        for health in bridge.catalog.health():
            item: dict[str, Any] = {
                "name": health.name,
                "kind": health.kind,
                "state": health.state,
                "tools": counts.get(health.name, 0),
                "last_listing": health.last_ok,
                "attempts": health.attempts,
            }
            if health.reason:
                item["reason"] = health.reason
            if health.next_retry_in is not None:
                item["next_retry_in"] = round(health.next_retry_in, 1)
            item["calls"], item["errors"] = calls.get(health.name, (0, 0))
            items.append(item)
        items.sort(key=lambda u: u["name"])
        return JSONBody({"items": items})

    @endpoint
    async def catalog(request: Request) -> Response:
        surface = ctx.caller(request)
        filters = _filters(request)
        query = search_query(request)
        offset = query_int(request, "offset", 0, minimum=0)
        limit = query_int(request, "limit", DEFAULT_PAGE, minimum=1, maximum=MAX_PAGE, clamp=True)
        return JSONBody(listing.page(surface, query, filters, offset, limit))

    @endpoint
    async def tool_page(request: Request) -> Response:
        surface = ctx.caller(request)
        decl = seen(request, surface)
        placement = surface.place(decl)
        history = bridge.catalog.versions.history(decl)
        body: dict[str, Any] = {
            "summary": tool_summary(decl, surface),
            "declaration": decl.to_json(),
            "placement": {"state": placement.state, "reason": placement.reason},
            "inputs": _parameters(decl.input_schema),
            "outputs": _parameters(decl.output_schema),
            "versions": [
                {
                    "version": r.version,
                    "compatibility": r.compatibility,
                    "created_at": r.created_at,
                    "digest": r.digest,
                }
                for r in history
            ],
            "alternatives": alternatives(decl, surface),
            "exports": _exports(ctx, request, decl),
        }
        if decl.blocked_detail and placement.state == "blocked":
            body["placement"]["detail"] = decl.blocked_detail
        return JSONBody(body)

    @endpoint
    async def version_diff(request: Request) -> Response:
        surface = ctx.caller(request)
        decl = seen(request, surface)
        latest = decl.version

        def number(name: str, default: int) -> int:
            raw = request.query_params.get(name)
            value = default if not raw else decimal(raw)
            if value is None or not 1 <= value <= latest:
                raise ApiError(
                    404,
                    "unknown_tool",
                    f"tool {decl.name!r} has no version {str(raw)[:20]!r} (current is {latest})",
                    error_code="unknown_version",
                )
            return value

        new = number("to", latest)
        old = number("from", max(1, new - 1))
        records = {}
        for n in {old, new}:
            record = bridge.catalog.versions.get(decl, n)
            if record is None:
                raise ApiError(
                    404,
                    "unknown_tool",
                    f"version {n} of tool {decl.name!r} is not in the store",
                    error_code="unknown_version",
                )
            records[n] = record
        diff = signature_diff(records[old].signature, records[new].signature)
        sides = {
            key: {
                "version": r.version,
                "compatibility": r.compatibility,
                "created_at": r.created_at,
                "signature": r.signature,
                "inputs": _parameters(r.signature.get("input_schema")),
                "outputs": _parameters(r.signature.get("output_schema")),
            }
            for key, r in (("from", records[old]), ("to", records[new]))
        }
        return JSONBody({"tool_id": decl.tool_id, "name": decl.name, **sides, **diff})

    async def invoke(request: Request) -> Response:
        try:
            surface = ctx.caller(request)
            body = await ctx.read_json(request)
            if not isinstance(body, dict) or not isinstance(body.get("tool"), str):
                raise ApiError(
                    400,
                    "invalid_arguments",
                    "the request body must be a JSON object {tool, arguments, version?}",
                    pointer="",
                )
            arguments = body.get("arguments", {})
            if not isinstance(arguments, dict):
                raise ApiError(
                    400,
                    "invalid_arguments",
                    "`arguments` must be a JSON object",
                    pointer="/arguments",
                )
            version = body.get("version")
            if version is not None and (
                not isinstance(version, int) or isinstance(version, bool) or version < 1
            ):
                raise ApiError(
                    400,
                    "invalid_arguments",
                    "`version` must be a positive integer",
                    pointer="/version",
                )
        except ApiError as exc:
            return JSONBody(exc.body(), status_code=exc.status, headers=exc.headers)
        decl = surface.resolve(body["tool"])
        origin = ctx.origin(request)
        return StreamingResponse(
            _call_events(bridge, decl, body["tool"], arguments, version, surface, origin),
            media_type="application/x-ndjson",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    p = API_PREFIX
    return [
        Route(f"{p}/session", session, methods=["GET"]),
        Route(f"{p}/upstreams", upstreams, methods=["GET"]),
        Route(f"{p}/catalog", catalog, methods=["GET"]),
        Route(f"{p}/tools/{{ref}}/diff", version_diff, methods=["GET"]),
        Route(f"{p}/tools/{{ref}}", tool_page, methods=["GET"]),
        Route(f"{p}/invoke", invoke, methods=["POST"]),
    ]


def _line(kind: str, **fields: Any) -> bytes:
    return (json.dumps({"type": kind, **fields}, ensure_ascii=False, default=str) + "\n").encode()


async def _call_events(
    bridge: Any,
    decl: ToolDeclaration | None,
    ref: str,
    arguments: Any,
    version: int | None,
    surface: Surface,
    origin: Any,
) -> AsyncIterator[bytes]:
    """One call as newline-delimited JSON: a `progress` line for each progress notice the
    upstream sends, then one `result` line with the envelope and the HTTP status `POST /invoke`
    would have answered. A client that goes away cancels the call, upstream too."""
    if decl is None:
        missing = error_result(unknown_tool(ref, bridge.catalog), invocation_id=new_id("inv"))
        yield _result_line(missing)
        return
    queue: asyncio.Queue[ToolProgress | None] = asyncio.Queue()

    async def sink(progress: ToolProgress) -> None:
        queue.put_nowait(progress)

    call = asyncio.ensure_future(
        bridge.invoker.invoke(
            decl.tool_id,
            arguments,
            version=version,
            surface=surface,
            progress=sink,
            origin=origin,
        )
    )
    call.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (progress := await queue.get()) is not None:
            yield _line("progress", progress=progress.to_json())
        yield _result_line(call.result())
    finally:
        if not call.done():
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await call


def _result_line(result: ToolResult) -> bytes:
    status = status_for(result.error) if result.is_error and result.error is not None else 200
    return _line("result", status=status, result=result.to_json())
