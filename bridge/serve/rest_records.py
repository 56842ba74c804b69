"""The Agent Tool records over REST: tool search, surfaces, declarations, invocation with the
result envelope as the body, persisted large results, and the health and readiness probes."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from bridge.arguments import pointer_token
from bridge.envelopes import error_result
from bridge.identity import Identity
from bridge.model import BridgeError, new_id
from bridge.policy import unknown_tool
from bridge.serve.rest_http import (
    ApiError,
    JSONBody,
    ServeContext,
    endpoint,
    query_bool,
    query_int,
    query_list,
    retry_after_headers,
    search_query,
    status_for,
)
from bridge.text import quoted

__all__ = ["MAX_SEARCH_LIMIT", "records_routes"]

MAX_SEARCH_LIMIT = 100


_INVOKE_KEYS = frozenset({"tool", "arguments", "version"})


def _invoke_request(body: Any) -> tuple[str, dict[str, Any], int | None]:
    if not isinstance(body, dict):
        raise ApiError(
            400,
            "invalid_arguments",
            "the request body must be a JSON object {tool, arguments, version?}",
            pointer="",
        )
    # a misspelt key (`argumnets`) would otherwise run the tool with no arguments
    unknown = next((key for key in body if key not in _INVOKE_KEYS), None)
    if unknown is not None:
        raise ApiError(
            400,
            "invalid_arguments",
            f"unknown key {quoted(unknown)}; the body takes tool, arguments and version",
            pointer="/" + pointer_token(unknown)[:60],
        )
    tool = body.get("tool")
    if not isinstance(tool, str) or not tool:
        raise ApiError(
            400,
            "invalid_arguments",
            "`tool` must name a tool (exposed name, alias or tool_id)",
            pointer="/tool",
        )
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ApiError(
            400, "invalid_arguments", "`arguments` must be a JSON object", pointer="/arguments"
        )
    version = body.get("version")
    if version is not None and (
        not isinstance(version, int) or isinstance(version, bool) or version < 1
    ):
        raise ApiError(
            400, "invalid_arguments", "`version` must be a positive integer", pointer="/version"
        )
    return tool, arguments, version


# The parameters of GET /search, and those that may be given more than once (`tags=a&tags=b`).
SEARCH_PARAMS = ("q", "limit", "namespace", "tags", "tag", "kind", "read_only", "include_schema")
_LIST_PARAMS = frozenset({"tags", "tag"})


def _check_search_params(request: Request) -> None:
    """A misspelt filter (`readonly=true`) would silently widen the search, and a repeated one
    would keep one value of several: both are the caller's mistake, said as such."""
    for name in request.query_params:
        if name not in SEARCH_PARAMS:
            raise ApiError(
                400,
                "invalid_arguments",
                f"unknown query parameter {name[:60]!r}; /search takes " + ", ".join(SEARCH_PARAMS),
                details={"parameter": name[:60]},
            )
        if name not in _LIST_PARAMS and len(request.query_params.getlist(name)) > 1:
            raise ApiError(
                400,
                "invalid_arguments",
                f"query parameter {name!r} is given more than once; give it once",
                details={"parameter": name},
            )


def records_routes(ctx: ServeContext) -> list[BaseRoute]:
    bridge = ctx.bridge

    @endpoint
    async def search(request: Request) -> Response:
        surface = ctx.caller(request)
        _check_search_params(request)
        query = search_query(request)
        namespace = request.query_params.get("namespace") or None
        tags = query_list(request, "tags", "tag") or None
        kind = request.query_params.get("kind") or None
        read_only = query_bool(request, "read_only")
        if (
            not query.strip()
            and namespace is None
            and tags is None
            and kind is None
            and read_only is None
        ):
            raise ApiError(
                400,
                "invalid_arguments",
                "query parameter 'q' is required (keywords, or select:a,b), "
                "unless a filter (namespace, tags, kind, read_only) lists tools by itself",
                details={"parameter": "q"},
            )
        result = bridge.find_tools(
            query,
            surface=surface,
            limit=query_int(request, "limit", 10, minimum=1, maximum=MAX_SEARCH_LIMIT, clamp=True),
            namespace=namespace,
            tags=tags,
            kind=kind,
            read_only=read_only,
            include_schema=bool(query_bool(request, "include_schema")),
        )
        return JSONBody(result.to_json())

    @endpoint
    async def get_surface(request: Request) -> Response:
        surface = ctx.caller(request)
        name = request.path_params["name"]
        # a caller reads only its own surface (an open server's callers: server.default_surface):
        # another surface's record would name the tools this one hides
        if name != surface.name:
            raise ApiError(
                404,
                "invalid_arguments",
                f"no surface {quoted(name)}",
                error_code="surface_not_found",
            )
        limit = query_int(request, "deferred_limit", 1000, minimum=0)
        return JSONBody(surface.record(include_deferred=limit > 0, limit=limit).to_json())

    @endpoint
    async def get_declaration(request: Request) -> Response:
        surface = ctx.caller(request)
        return JSONBody(ctx.visible(request.path_params["tool_id"], surface).to_json())

    @endpoint
    async def invoke(request: Request) -> Response:
        surface = ctx.caller(request)
        tool, arguments, version = _invoke_request(await ctx.read_json(request))
        decl = surface.resolve(tool)
        if decl is None:
            # the envelope the pipeline gives for a missing tool, and for one hidden here (a tool
            # blocked for another reason is refused by the pipeline with that reason)
            result = error_result(unknown_tool(tool, bridge.catalog), invocation_id=new_id("inv"))
        else:
            result = await ctx.invoke(
                request, decl.tool_id, arguments, version=version, surface=surface
            )
        if not result.is_error or result.error is None:
            return JSONBody(result.to_json())
        return JSONBody(
            result.to_json(),
            status_code=status_for(result.error),
            headers=retry_after_headers(result.error),
        )

    @endpoint
    async def get_result(request: Request) -> Response:
        surface = ctx.caller(request)
        ref = request.path_params["ref"]
        # another surface's result reads as none; the store's database away: 503 (`endpoint`)
        found = bridge.invoker.get_persisted(ref, surface)
        if found is None:
            raise ApiError(
                404,
                "invalid_arguments",
                f"no persisted result {quoted(ref)}",
                error_code="result_not_found",
            )
        media_type, payload = found
        return Response(payload, media_type=media_type)

    @endpoint
    async def read_resource(request: Request) -> Response:
        """A resource an upstream linked in a result through the caller's surface, read from that
        upstream (the MCP frontend's `resources/read`): `{contents: [{uri, mimeType?, text|blob}]}`."""
        surface = ctx.caller(request)
        uri = request.query_params.get("uri")
        if not uri:
            raise ApiError(
                400,
                "invalid_arguments",
                "query parameter 'uri' is required: the URI of a resource link in a result",
                details={"parameter": "uri"},
            )
        try:
            contents = await bridge.invoker.resource_links.read(uri, surface)
        except BridgeError as exc:
            error = exc.to_error()
            if exc.error_code == "resource_not_found":
                raise ApiError(
                    404, error.error_class, exc.message, error_code="resource_not_found"
                ) from None
            raise ApiError(
                status_for(error),
                error.error_class,
                exc.message,
                headers=retry_after_headers(error),
            ) from None
        return JSONBody({"contents": contents})

    @endpoint
    async def healthz(request: Request) -> Response:
        """ok; or, while the store cannot be written, why and since when: still alive and
        answering calls, `degraded` when a shared store's database is away (its log line names
        the store, the SQLite one's names the path and the fix), or when Redis is."""
        store = bridge.store
        body: dict[str, Any] = {"status": "ok"}
        if store.unwritable is not None:
            said = {"writable": False, "since": store.unwritable_since, "reason": store.unwritable}
            body["store"] = said
            if store.shared:
                body["status"] = "degraded"
        shared = bridge.shared
        if shared is not None and not await shared.check():
            # still serving what needs no Redis (2026-07-28 MCP, REST); a restart would not help
            body["status"] = "degraded"
            body["redis"] = shared.health()
        return JSONBody(body)

    @endpoint
    async def metrics(request: Request) -> Response:
        """The Prometheus exposition; behind the tokens unless `telemetry.metrics_public`."""
        if not bridge.config.telemetry.metrics_public:
            ctx.caller(request)
        body, content_type = bridge.telemetry.metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @endpoint
    async def readyz(request: Request) -> Response:
        # a probe needs no token and reads up or down; the counts and reasons, which tell what a
        # surface hides and where upstreams live, only a caller with a valid token (any caller
        # of an open server)
        detailed = isinstance(ctx.identity(request), Identity)
        upstreams = []
        for health in bridge.catalog.health():
            entry: dict[str, Any] = {
                "name": health.name,
                "kind": health.kind,
                "state": health.state,
            }
            if detailed:
                entry["tool_count"] = health.tool_count
                if health.reason:
                    entry["reason"] = health.reason
            upstreams.append(entry)
        enabled = [u for u in upstreams if u["state"] != "disabled"]
        # not ready while the start waits for an upstream's first attempt (the listener serves
        # from the first moment, with the tools listed so far), nor until the search index has
        # taken in what the start listed: a search would miss those tools
        starting = bridge.starting()
        search = bridge.search_state()
        upstream_ready = not enabled or any(u["state"] == "ready" for u in enabled)
        ready = not starting and search != "indexing" and upstream_ready
        body: dict[str, Any] = {"ready": ready, "starting": starting, "search": search}
        if detailed:
            body["tools"] = len(bridge.catalog)
        body["upstreams"] = upstreams
        return JSONBody(body, status_code=200 if ready else 503)

    return [
        Route("/search", search, methods=["GET"]),
        Route("/surfaces/{name}", get_surface, methods=["GET"]),
        Route("/declarations/{tool_id}", get_declaration, methods=["GET"]),
        Route("/invoke", invoke, methods=["POST"]),
        Route("/results/{ref}", get_result, methods=["GET"]),
        Route("/resources", read_resource, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        *([Route("/metrics", metrics, methods=["GET"])] if bridge.config.telemetry.metrics else []),
    ]
