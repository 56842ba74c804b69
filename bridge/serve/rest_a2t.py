"""The a2t dialect (the Go reference's shapes) served under `/a2t`: the capabilities document at
`/.well-known/a2t-capabilities.json`, tools and groups (one group per upstream) with `q` answered
by tool search, execution, and a `group_refresh` meta when the catalog changed since the caller's
last view."""

from __future__ import annotations

from collections import deque
from typing import Any

from cachetools import LRUCache
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from bridge.catalog import Catalog, CatalogChange
from bridge.envelopes import error_result
from bridge.model import BridgeError, ToolDeclaration, new_id
from bridge.serve.rest_http import (
    ApiError,
    JSONBody,
    ServeContext,
    decimal,
    endpoint,
    query_int,
    search_query,
)
from bridge.surface import Surface
from bridge.text import QUOTED_CHARS, quoted
from bridge.translate import a2t

__all__ = [
    "GENERATION_HEADER",
    "GROUPS_PATH",
    "HISTORY_DECLARATIONS",
    "MAX_GROUPS",
    "MAX_TOOLS",
    "TOOLS_PATH",
    "CatalogViews",
    "a2t_routes",
]

TOOLS_PATH = "/a2t/tools"
GROUPS_PATH = "/a2t/groups"
MAX_TOOLS = 10_000
MAX_GROUPS = 1_000
DEFAULT_TOOLS = 100
SEARCH_MATCHES = 100  # `q` on tools: the best ranked matches, as many as GET /search gives at most
DEFAULT_GROUPS = 50
# Sent on every listing and execute response; a client that echoes it on execute gets exact
# group_refresh notices even when it shares its address and token with other clients.
GENERATION_HEADER = "A2T-Catalog-Generation"
# Declarations the change history holds in all, besides its 2048 changes: each change keeps the
# declarations it made, and those replaced since live on only there (an upstream of many tools
# declared again at each reconnect kept 2048 listings of them). Older changes go first.
HISTORY_DECLARATIONS = 10_000


class CatalogViews:
    """Which catalog generation each caller last listed, and which declarations changed at each
    generation, so an execute response can name the groups the caller should re-list."""

    def __init__(
        self,
        catalog: Catalog,
        history: int = 2048,
        callers: int = 10_000,
        declarations: int = HISTORY_DECLARATIONS,
    ) -> None:
        self.catalog = catalog
        self.history = history
        self.declarations = declarations
        self._changes: deque[tuple[int, list[ToolDeclaration], str | None]] = deque()
        self._held = 0  # declarations in `_changes`
        self._seen: LRUCache[str, int] = LRUCache(maxsize=callers)
        self._unsubscribe = catalog.subscribe(self._on_change)

    def _on_change(self, change: CatalogChange) -> None:
        decls = [*change.added, *change.updated, *change.removed]
        if len(decls) > self.declarations:
            decls = []  # kept as a change of its whole upstream
        self._changes.append((self.catalog.generation, decls, change.upstream))
        self._held += len(decls)
        while len(self._changes) > self.history or self._held > self.declarations:
            self._held -= len(self._changes.popleft()[1])

    def close(self) -> None:
        self._unsubscribe()

    def saw(self, caller: str) -> None:
        self._seen[caller] = self.catalog.generation

    def last_seen(self, caller: str) -> int | None:
        return self._seen.get(caller)

    def changed_groups(self, since: int, surface: Surface) -> list[str]:
        """Groups (upstreams) with a change the surface can see after generation `since`. When the
        history no longer reaches back that far (or the server restarted), every visible group."""
        current = self.catalog.generation
        if since == current:
            return []
        oldest = self._changes[0][0] if self._changes else current + 1
        if since > current or since < oldest - 1:
            return sorted({d.namespace for d in self.catalog.declarations() if surface.visible(d)})
        groups: set[str] = set()
        for generation, decls, upstream in self._changes:
            if generation <= since:
                continue
            for decl in decls:
                if surface.place(decl).state != "blocked":
                    groups.add(decl.namespace)
            slot = (
                self.catalog.slots.get(upstream) if upstream and not decls else None
            )  # None: gone since
            if (
                upstream
                and slot is not None
                and any(surface.visible(d) for d in slot.tools.values())
            ):
                groups.add(upstream)
        return sorted(groups)


def _group_description(kind: str, name: str, state: str) -> str:
    return f"Tools of the {kind} upstream {name!r} ({state})."


def a2t_routes(ctx: ServeContext, views: CatalogViews) -> list[BaseRoute]:
    bridge = ctx.bridge

    def generation_headers() -> dict[str, str]:
        return {GENERATION_HEADER: str(bridge.catalog.generation)}

    def tools_page(request: Request, surface: Surface, group: str | None) -> Response:
        offset = query_int(request, "offset", 0, minimum=0)
        limit = (
            query_int(request, "limit", 0, minimum=0, maximum=MAX_TOOLS, clamp=True)
            or DEFAULT_TOOLS
        )
        query = search_query(request).strip()
        if query:
            # a page of tools, counted by `total`: each upstream's tool is one of them, alternatives too
            found = bridge.find_tools(
                query,
                surface=surface,
                limit=SEARCH_MATCHES,
                namespace=group,
                fold_alternatives=False,
            )
            tools = [
                d
                for m in found.matches
                if (d := bridge.catalog.get(m.tool_id)) is not None and surface.visible(d)
            ]
        else:
            tools, _ = ctx.listing(surface)
            if group is not None:
                tools = [d for d in tools if d.namespace == group]
        page = tools[offset : offset + limit]
        views.saw(ctx.caller_key(request))
        body = {
            "tools": [a2t.render_tool(d) for d in page],
            "total": len(tools),
            "offset": offset,
            "limit": limit,
        }
        return JSONBody(body, headers=generation_headers())

    def groups_of(surface: Surface) -> list[dict[str, Any]]:
        counts: dict[str, int] = {}
        for decl in ctx.listing(surface)[0]:
            counts[decl.namespace] = counts.get(decl.namespace, 0) + 1
        out = []
        for name, slot in sorted(bridge.catalog.slots.items()):
            if counts.get(name):
                out.append(
                    a2t.render_group(
                        name,
                        name=name,
                        tool_count=counts[name],
                        description=_group_description(slot.health.kind, name, slot.health.state),
                    )
                )
        return out

    @endpoint
    async def capabilities(request: Request) -> Response:
        ctx.caller(request)
        return JSONBody(
            a2t.render_capabilities(
                TOOLS_PATH, GROUPS_PATH, max_tools=MAX_TOOLS, max_groups=MAX_GROUPS
            )
        )

    @endpoint
    async def list_tools(request: Request) -> Response:
        return tools_page(request, ctx.caller(request), None)

    @endpoint
    async def list_groups(request: Request) -> Response:
        surface = ctx.caller(request)
        offset = query_int(request, "offset", 0, minimum=0)
        limit = (
            query_int(request, "limit", 0, minimum=0, maximum=MAX_GROUPS, clamp=True)
            or DEFAULT_GROUPS
        )
        groups = groups_of(surface)
        if request.query_params.get("parent_id"):
            groups = []  # upstream groups are all top level
        query = (request.query_params.get("q") or "").strip().lower()
        if query:
            groups = [
                g for g in groups if query in g["id"].lower() or query in g["description"].lower()
            ]
        views.saw(ctx.caller_key(request))
        body = {
            "groups": groups[offset : offset + limit],
            "total": len(groups),
            "offset": offset,
            "limit": limit,
        }
        return JSONBody(body, headers=generation_headers())

    def visible_group(request: Request, surface: Surface) -> str:
        group = request.path_params["group_id"]
        if not any(g["id"] == group for g in groups_of(surface)):
            raise ApiError(
                404, "unknown_tool", f"no group {quoted(group)}", error_code="group_not_found"
            )
        return group

    @endpoint
    async def list_group_tools(request: Request) -> Response:
        surface = ctx.caller(request)
        return tools_page(request, surface, visible_group(request, surface))

    async def execute(request: Request, group: str | None) -> Response:
        surface = ctx.caller(request)
        name = request.path_params["name"]
        decl = surface.resolve(name)  # a tool hidden here is answered as a missing one
        if decl is not None and group is not None and decl.namespace != group:
            decl = None
        body = await ctx.read_json(request)
        if decl is None:
            # the reference's answer for an unknown tool: HTTP 200 with error code tool_not_found
            message = f"Tool not found: {name if len(name) <= QUOTED_CHARS else quoted(name)}{bridge.catalog.still_starting(name)}"
            missing = error_result(
                BridgeError(message, error_class="unknown_tool"), invocation_id=new_id("inv")
            )
            return JSONBody(
                a2t.render_execute(missing, refresh_meta(request, surface)),
                headers=generation_headers(),
            )
        if not isinstance(body, dict):
            raise ApiError(
                400,
                "invalid_arguments",
                "the request body must be a JSON object of tool arguments",
                pointer="",
            )
        if (
            set(body) == {"body"}
            and isinstance(body["body"], dict)
            and "body" not in (decl.input_schema.get("properties") or {})
        ):
            body = body["body"]  # the `{"body": {...}}` form some a2t clients send
        result = await ctx.invoke(request, decl.tool_id, body, surface=surface)
        return JSONBody(
            a2t.render_execute(result, refresh_meta(request, surface)), headers=generation_headers()
        )

    def refresh_meta(request: Request, surface: Surface) -> dict[str, Any] | None:
        declared = decimal(
            request.headers.get(GENERATION_HEADER)
        )  # one that is no number counts as absent
        key = ctx.caller_key(request)
        since = declared if declared is not None else views.last_seen(key)
        if since is None:
            return None
        groups = views.changed_groups(since, surface)
        if declared is None:
            views.saw(key)
        return a2t.group_refresh_meta(groups) if groups else None

    @endpoint
    async def execute_tool(request: Request) -> Response:
        return await execute(request, None)

    @endpoint
    async def execute_group_tool(request: Request) -> Response:
        return await execute(request, request.path_params["group_id"])

    return [
        Route(a2t.CAPABILITIES_PATH, capabilities, methods=["GET"]),
        Route(TOOLS_PATH, list_tools, methods=["GET"]),
        Route(TOOLS_PATH + "/{name}", execute_tool, methods=["POST"]),
        Route(GROUPS_PATH, list_groups, methods=["GET"]),
        Route(GROUPS_PATH + "/{group_id}/tools", list_group_tools, methods=["GET"]),
        Route(GROUPS_PATH + "/{group_id}/tools/{name}", execute_group_tool, methods=["POST"]),
    ]
