"""The frontends' spans, when the bridge traces: one `SERVER` span per REST request (HTTP
conventions: `POST /invoke`) and one per MCP request (MCP conventions: `tools/call {tool}` with
`mcp.method.name`, `mcp.session.id`, `jsonrpc.request.id`, `gen_ai.operation.name`,
`gen_ai.tool.name`), each the child of the caller's W3C trace context: the `traceparent`
header, or for MCP `params._meta.traceparent` first. The sampler decides here, once per
request: a request whose trace it drops gets no span, and its calls pass the trace context on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import MCPError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.telemetry import from_meta, valid_traceparent, valid_tracestate
from bridge.telemetry.tracing import Tracing, failed

__all__ = ["TracedHTTP", "traced_mcp_handler"]

Handler = Callable[[Any, Any], Awaitable[Any]]


class TracedHTTP:
    """ASGI middleware: a span for each HTTP request but those of `skip` (MCP's endpoint, whose
    requests are traced per JSON-RPC method)."""

    def __init__(self, app: ASGIApp, tracing: Tracing, skip: str = "/mcp") -> None:
        self.app = app
        self.tracing = tracing
        self.skip = skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] == self.skip
            or scope["path"].startswith(self.skip + "/")
        ):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        parent = valid_traceparent(headers.get("traceparent"))
        state = valid_tracestate(headers.get("tracestate")) if parent else None
        passed = self.tracing.dropped(parent, state)
        if passed is not None:  # no span: the request's calls pass the trace context on
            with self.tracing.unsampled(passed):
                await self.app(scope, receive, send)
            return
        method = scope["method"]
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": scope["path"],
            "url.scheme": scope.get("scheme", "http"),
        }
        if scope.get("client"):
            attributes["client.address"] = scope["client"][0]
        if agent := headers.get("user-agent"):
            attributes["user_agent.original"] = agent
        span = self.tracing.server_span(method, attributes, parent, state)

        ended: dict[str, Any] = {}  # what the response tells, set on the span in one go

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                ended["http.response.status_code"] = status = message["status"]
                if status >= 500:
                    failed(span, str(status))
            await send(message)

        with self.tracing.active(span):
            try:
                await self.app(scope, receive, sending)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route:
                    span.update_name(f"{method} {route}")
                    ended["http.route"] = route
                if ended:
                    span.set_attributes(ended)


def traced_mcp_handler(tracing: Tracing, method: str, handler: Handler) -> Handler:
    """`handler` (a low-level MCP server's handler of `method`) in a span of its own."""

    async def traced(ctx: Any, params: Any) -> Any:
        parent, state = from_meta(ctx.meta)
        request = ctx.request
        headers = request.headers if isinstance(getattr(request, "scope", None), dict) else None
        if (
            headers is not None
            and parent is None
            and (parent := valid_traceparent(headers.get("traceparent")))
        ):
            state = valid_tracestate(headers.get("tracestate"))
        passed = tracing.dropped(parent, state)
        if passed is not None:  # no span: the request's calls pass the trace context on
            with tracing.unsampled(passed):
                return await handler(ctx, params)
        attributes: dict[str, Any] = {"mcp.method.name": method, "network.transport": "pipe"}
        if ctx.request_id is not None:
            attributes["jsonrpc.request.id"] = str(ctx.request_id)
        if ctx.protocol_version:
            attributes["mcp.protocol.version"] = ctx.protocol_version
        if headers is not None:
            attributes["network.transport"] = "tcp"
            if session := headers.get("mcp-session-id"):
                attributes["mcp.session.id"] = session
        name = method
        if method == "tools/call" and params is not None:
            name = f"tools/call {params.name}"
            attributes.update(
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": params.name}
            )
        elif method == "resources/read" and params is not None:
            attributes["mcp.resource.uri"] = str(params.uri)[:200]
        span = tracing.server_span(name, attributes, parent, state)
        with tracing.active(span):
            try:
                result = await handler(ctx, params)
            except MCPError as exc:
                failed(span, str(exc.code))
                raise
            if isinstance(result, types.CallToolResult) and result.is_error:
                failed(span, "tool_error")
            return result

    return traced
