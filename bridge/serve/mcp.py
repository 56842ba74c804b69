"""The MCP frontend: the bridge as an MCP server, over stdio and streamable HTTP, in both protocol
eras (2025-11-25 handshake and 2026-07-28).

Each caller sees one surface: its loaded tools in `tools/list`, plus the `search_tools` and
`call_tool` meta tools whenever the surface defers anything. Calls run through the invocation
pipeline; every error envelope comes back as an `isError` result that says what to do next.
On HTTP, bearer tokens from `server.tokens` pick the surface (the same tokens as the REST API)
and the SDK's Host/Origin checks guard against DNS rebinding.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import warnings
from collections.abc import Callable
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from bridge import __version__
from bridge.model import BridgeError, ToolDeclaration, ToolProgress
from bridge.runtime import Bridge
from bridge.serve.auth import IDENTITY_SCOPE_KEY, caller_facts, caller_identity
from bridge.serve.mcp_asking import asker_for
from bridge.serve.mcp_calls import Calls
from bridge.serve.mcp_gate import (
    CALLER_SURFACE,
    SURFACE_SCOPE_KEY,
    MCPAuthGate,
    transport_security_for,
)
from bridge.serve.mcp_lean import LeanCalls
from bridge.serve.mcp_meta import (
    CALL_TOOL,
    SEARCH_TOOLS,
    call_arguments,
    meta_tools,
    search_arguments,
    search_payload,
)
from bridge.serve.mcp_notices import FeatureNotices
from bridge.serve.mcp_prompts import PromptHandlers
from bridge.serve.mcp_quota import SessionQuota
from bridge.serve.mcp_resources import RESOURCE_NOT_FOUND, ResourceHandlers, resource_error
from bridge.serve.mcp_rounds import Rounds
from bridge.serve.mcp_sdk import open_transports, session_connection
from bridge.serve.mcp_session import ChangeNotifier, SessionState, listing_for
from bridge.serve.mcp_shared import shared_gate, shared_record
from bridge.surface import Surface
from bridge.telemetry import CallOrigin, from_meta, valid_traceparent, valid_tracestate
from bridge.telemetry.context import TRACEPARENT
from bridge.translate.mcp import is_modern, render_output_schema, render_tool
from bridge.upstream import CALLER_ASKS

__all__ = ["MCPFrontend"]

log = logging.getLogger("bridge.serve.mcp")

RESULTS_URI = "bridge://results/"

# Longest a search waits for catalog changes still being indexed, in seconds.
SEARCH_INDEX_WAIT = 2.0
# Seconds before a stopping HTTP server's grace ends at which calls still running are cancelled
# and answered, so that each request has finished when the grace is over.
STOP_MARGIN = 0.5

INSTRUCTIONS = (
    "Tools from many upstream services, federated by one bridge. When the tool you need is not in "
    "your tool list, call search_tools with a few keywords; then call a match by name if it was "
    "added to your tool list, or through call_tool."
)


# The keyword of the SDK server's handler of each method the frontend answers (`on_<name>`).
_HANDLER_NAMES = {
    "tools/list": "list_tools",
    "tools/call": "call_tool",
    "resources/list": "list_resources",
    "resources/templates/list": "list_resource_templates",
    "resources/read": "read_resource",
    "resources/subscribe": "subscribe_resource",
    "resources/unsubscribe": "unsubscribe_resource",
    "prompts/list": "list_prompts",
    "prompts/get": "get_prompt",
    "completion/complete": "completion",
    "logging/setLevel": "set_logging_level",
}
# What handshake-era clients are told changes (the 2026-07-28 era derives it from listen).
_NOTIFIES = NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True)


class _BridgeServer(Server[Any]):
    """The SDK's low-level server, advertising `tools.listChanged` to handshake-era clients on
    every transport (the HTTP session manager builds its own initialization options)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or _NOTIFIES, experimental_capabilities, extensions
        )


_CURSOR = re.compile(r"o[0-9]{1,12}")


def _cursor(offset: int) -> str:
    return f"o{offset}"


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    if _CURSOR.fullmatch(cursor):
        return int(cursor[1:])
    raise MCPError(
        INVALID_PARAMS,
        f"invalid cursor {cursor[:40]!r}: pass back the nextCursor of the previous page",
    )


def _progress_numbers(progress: ToolProgress) -> tuple[float, float | None]:
    if progress.percent is not None:
        return float(progress.percent), 100.0
    if progress.current_step is not None:
        return float(progress.current_step), float(
            progress.total_steps
        ) if progress.total_steps is not None else None
    return float(progress.sequence), None


class MCPFrontend:
    """One MCP server over a started (or starting) `Bridge`.

    `http_app()` gives the Starlette app for streamable HTTP (`/mcp` beside any extra routes);
    `server.run(read, write, server.create_initialization_options())` serves any stream pair
    (stdio: see `run_stdio`). Call `aclose()` when done.
    """

    def __init__(
        self,
        bridge: Bridge,
        *,
        default_surface: str | None = None,
        page_size: int = 100,
        debounce: float = 0.1,
        session_load_limit: int = 256,
        listing_waits_for_start: bool = False,
    ) -> None:
        self.bridge = bridge
        self._surface_asked = default_surface
        self._listing_waits_for_start = listing_waits_for_start
        self.page_size = page_size
        self.notifier = ChangeNotifier(
            bridge, debounce=debounce, session_load_limit=session_load_limit
        )
        self.sessions: SessionQuota | None = None  # the session caps of the HTTP app, once built
        self.lean: LeanCalls | None = None  # its lean path of tools/call, once built
        self.calls = Calls(bridge)
        self._rendered: dict[tuple[str, bool], types.Tool] = {}
        self._rendered_generation = -1
        self._unwatch: list[Callable[[], None]] = []  # the metrics this frontend shows
        self._meta_schemas = {tool.name: tool.input_schema for tool in meta_tools()}
        self._meta_output_schemas = {
            tool.name: tool.output_schema for tool in meta_tools() if tool.output_schema
        }
        self.feature_notices = FeatureNotices(bridge, self.notifier.bus, bridge.surfaces.get)
        self.federated = self.feature_notices.federated
        self.rounds = Rounds(shared=bridge.shared)
        self.resources = ResourceHandlers(self.feature_notices, self._surface, page_size)
        self.prompts = PromptHandlers(self.feature_notices, self._surface, page_size)
        with warnings.catch_warnings():  # logging/setLevel is served to handshake-era clients
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server = self._build_server()

    def _build_server(self) -> _BridgeServer:
        return _BridgeServer(
            "a2t-bridge",
            version=__version__,
            title="Tool federation bridge",
            instructions=INSTRUCTIONS,
            get_tool_input_schema=self._input_schema_of,
            **self._handlers(),
            on_subscriptions_listen=self._subscriptions_listen,
        )

    def _handlers(self) -> dict[str, Any]:
        """The request handlers, each in a span of its own when the bridge traces (a listen
        stream, which lasts as long as the client stays, is not traced)."""
        handlers: dict[str, Any] = {
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "resources/list": self.resources.list_resources,
            "resources/templates/list": self.resources.list_templates,
            "resources/read": self._read_resource,
            "resources/subscribe": self.resources.subscribe,
            "resources/unsubscribe": self.resources.unsubscribe,
            "prompts/list": self.prompts.list_prompts,
            "prompts/get": self.prompts.get_prompt,
            "completion/complete": self.prompts.complete,
            "logging/setLevel": self.prompts.set_logging_level,
        }
        tracing = self.bridge.telemetry.tracing
        if tracing is not None:
            from bridge.serve.traced import traced_mcp_handler

            handlers = {
                method: traced_mcp_handler(tracing, method, handler)
                for method, handler in handlers.items()
            }
        return {f"on_{_HANDLER_NAMES[method]}": handler for method, handler in handlers.items()}

    # ------------------------------------------------------------------ transports

    def http_app(
        self,
        extra_routes: list[BaseRoute] | None = None,
        host: str = "127.0.0.1",
        *,
        path: str = "/mcp",
        public_url: str | None = None,
        debug: bool = False,
    ) -> Starlette:
        """The streamable HTTP app: MCP at `path` behind the bearer-token gate and the session
        caps (`self.sessions`), `extra_routes` beside it in the same app. Its lifespan runs the
        MCP session manager."""
        server_config = self.bridge.config.server
        security = transport_security_for(host, public_url or server_config.public_url)
        app = self.server.streamable_http_app(
            streamable_http_path=path,
            custom_starlette_routes=list(extra_routes or []),  # type: ignore[arg-type]
            host=host,
            transport_security=security,
            max_sessions=server_config.mcp_max_sessions,
            session_idle_timeout=server_config.mcp_session_idle_timeout,
            debug=debug,
        )
        for index, route in enumerate(app.router.routes):
            if isinstance(route, Route) and route.path == path:
                self.lean = LeanCalls(route.endpoint, self, security)
                self.sessions = SessionQuota(
                    shared_gate(self.lean, self),
                    per_client=server_config.mcp_max_sessions_per_client,
                    total=server_config.mcp_max_sessions,
                    idle_timeout=server_config.mcp_session_idle_timeout,
                    security=security,
                    path=path,
                )
                gate = MCPAuthGate(self.sessions, self.bridge)
                app.router.routes[index] = Route(path, endpoint=gate)
                break
        manager = self.server.session_manager
        self._unwatch.append(
            self.bridge.telemetry.metrics.gauge(
                "bridge_mcp_sessions_open",
                "MCP sessions open over streamable HTTP",
                lambda: len(open_transports(manager)),
            )
        )
        return app

    def end_streams(self) -> None:
        """The bridge is stopping: end the streams that only wait for notices (each
        handshake-era session's GET stream, each listen stream), so that stopping waits only for
        requests in flight; they held it for its whole grace. A client reconnects, to this bridge
        once it is back or to another replica. The SDK's session manager keeps the sessions in a
        private table (`mcp_sdk.open_transports`)."""
        self.notifier.end_listening()
        try:
            manager = self.server.session_manager
        except RuntimeError:  # no HTTP app built: nothing is served over HTTP
            return
        for transport in open_transports(manager):
            transport.close_standalone_sse_stream()

    async def aclose(self) -> None:
        while self._unwatch:
            self._unwatch.pop()()
        self.federated.close()
        self.rounds.close()
        await self.feature_notices.aclose()
        await self.notifier.aclose()

    def stopping(self, grace: float) -> None:
        """The HTTP server stops and gives open requests `grace` seconds to finish: the notice
        streams end now, and calls still running `STOP_MARGIN` before the grace is over are
        cancelled (upstream too) and answered `dependency_unavailable`. The server cancelled
        them at the end of the grace, unanswered and with a traceback logged."""
        self.end_streams()
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, grace - STOP_MARGIN), self.calls.cancel_running)

    @property
    def default_surface(self) -> str:
        """The surface asked for, else the config's `server.default_surface` (a reload may change it)."""
        return self._surface_asked or self.bridge.config.server.default_surface

    # ------------------------------------------------------------------ per-request facts

    def _surface(self, ctx: ServerRequestContext[Any, Any]) -> Surface:
        name = self.default_surface
        scope = getattr(ctx.request, "scope", None)
        if isinstance(scope, dict):
            name = scope.get(SURFACE_SCOPE_KEY, name)
        surface = self.bridge.surfaces.get(name)
        if surface is None:
            raise MCPError(INVALID_REQUEST, f"no surface named {name!r} is configured")
        return surface

    def _origin(self, ctx: ServerRequestContext[Any, Any]) -> CallOrigin:
        """Who a call comes from, with the caller's trace context: `params._meta.traceparent`,
        else (over HTTP) the `traceparent` header."""
        meta = ctx.meta  # (read only when it holds a traceparent: most calls carry none)
        parent, state = from_meta(meta) if meta and TRACEPARENT in meta else (None, None)
        caller = subject = client_id = session = None
        request = ctx.request
        scope = getattr(request, "scope", None)
        if isinstance(scope, dict):
            caller, subject, client_id = caller_facts(scope.get(IDENTITY_SCOPE_KEY))
            headers = request.headers  # type: ignore[union-attr]
            session = headers.get("mcp-session-id")
            header = headers.get("traceparent") if parent is None else None
            if header is not None:
                parent = valid_traceparent(header)
                state = valid_tracestate(headers.get("tracestate")) if parent else None
        return CallOrigin(
            "mcp",
            caller,
            parent,
            state,
            session,
            ctx.request_id,
            subject=subject,
            client_id=client_id,
        )

    def _state(self, ctx: ServerRequestContext[Any, Any], surface: Surface) -> SessionState | None:
        """A handshake-era connection's state; None in the sessionless 2026-07-28 era."""
        if is_modern(ctx.protocol_version):
            return None
        # The SDK hands handlers a per-request session proxy; the connection behind it is what
        # lives as long as the client's session.
        connection = session_connection(ctx.session)
        if connection is None:
            return None
        return self.notifier.state_for(connection, surface, shared_record(ctx.request))

    def _input_schema_of(self, name: str) -> dict[str, Any] | None:
        """The schema the SDK checks a 2026-07-28 call's `Mcp-Param-*` headers against before
        dispatch: none for a tool hidden from the caller's surface, as for a missing one."""
        if name in self._meta_schemas:
            return self._meta_schemas[name]
        surface = self.bridge.surfaces.get(CALLER_SURFACE.get() or self.default_surface)
        decl = surface.lookup(name) if surface is not None else None
        return decl.input_schema if decl is not None else None

    def _render(self, decl: ToolDeclaration, protocol_version: str) -> types.Tool:
        generation = self.bridge.catalog.generation
        if generation != self._rendered_generation:
            self._rendered.clear()
            self._rendered_generation = generation
        key = (decl.tool_id, is_modern(protocol_version))
        tool = self._rendered.get(key)
        if tool is None:
            tool = self._rendered[key] = render_tool(decl, protocol_version)
        return tool

    # ------------------------------------------------------------------ tools/list

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if self._listing_waits_for_start:
            # over stdio the first listing is the whole catalog: a client that does not re-list
            # on list_changed would otherwise miss the upstreams slower than its first request
            await self.bridge.wait_started()
        surface = self._surface(ctx)
        state = self._state(ctx, surface)
        listing = listing_for(surface, state)
        offset = _offset(params.cursor if params else None)
        meta = meta_tools() if listing.meta_tools else []
        end = min(len(listing), offset + self.page_size)
        page = [
            meta[i]
            if i < len(meta)
            else self._render(listing.tools[i - len(meta)], ctx.protocol_version)
            for i in range(offset, end)
        ]
        if state is not None and offset == 0:
            state.fingerprint = listing.fingerprint
        return types.ListToolsResult(
            tools=page, next_cursor=_cursor(end) if end < len(listing) else None
        )

    # ------------------------------------------------------------------ tools/call

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        surface = self._surface(ctx)
        if self.rounds.takes(ctx, params):  # a 2026-07-28 client an upstream may ask
            return await self.rounds.call(ctx, params, surface.name, self._call_tool)
        name, arguments = params.name, params.arguments or {}
        decl: ToolDeclaration | None = None
        # the output schema the client was listed for `name`: an error result must not carry
        # structured content that fails it
        output_schema = self._meta_output_schemas.get(name)
        try:
            if name == SEARCH_TOOLS:
                return await self._search(ctx, surface, arguments)
            if name == CALL_TOOL:
                target, target_arguments = call_arguments(arguments)
                if target == SEARCH_TOOLS:
                    return await self._search(ctx, surface, target_arguments)
                if target == CALL_TOOL:
                    raise BridgeError(
                        "call_tool calls catalog tools; give the name of a tool search_tools returned",
                        error_class="invalid_arguments",
                        recoverability="change_arguments",
                    )
                return await self._invoke(ctx, surface, target, target_arguments, None)
            # a tool hidden here is answered as a missing one (the pipeline logs why)
            decl = surface.lookup(name)
            output_schema = (
                render_output_schema(decl, ctx.protocol_version) if decl is not None else None
            )
            if decl is not None and surface.place(decl).state == "deferred":
                state = self._state(ctx, surface)
                if state is None or decl.tool_id not in state.loaded:
                    raise BridgeError(
                        f"tool {decl.name!r} is deferred on this surface and its schema is not loaded "
                        "in this session; nothing was run",
                        error_class="schema_not_loaded",
                        recoverability="load_schema_then_call",
                        status="rejected",
                    )
            return await self._invoke(ctx, surface, name, arguments, output_schema)
        except MCPError:
            raise
        except Exception as exc:
            return self.calls.failed(exc, ctx, name, decl, output_schema)

    async def _invoke(
        self,
        ctx: ServerRequestContext[Any, Any],
        surface: Surface,
        ref: str,
        arguments: dict[str, Any],
        output_schema: dict[str, Any] | None,
    ) -> types.CallToolResult:
        async def report(progress: ToolProgress) -> None:
            value, total = _progress_numbers(progress)
            try:
                await ctx.session.report_progress(value, total, progress.message)
            except Exception as exc:
                log.debug("progress notice not delivered: %s", exc)

        origin, identity = self._origin(ctx), caller_identity(getattr(ctx.request, "scope", None))
        # a client that can answer an upstream's elicitation or sampling is asked during the call
        asker = asker_for(ctx)
        asking = CALLER_ASKS.set(asker) if asker is not None else None
        options: dict[str, Any] = {"surface": surface, "progress": report, "origin": origin}
        try:
            return await self.calls.run(ctx, ref, arguments, output_schema, options, identity)
        finally:
            if asking is not None:
                CALLER_ASKS.reset(asking)

    async def _search(
        self, ctx: ServerRequestContext[Any, Any], surface: Surface, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        options = search_arguments(arguments)
        query = options.pop("query")
        # the index is written on a thread: let a change that just happened become searchable
        await self.bridge.search.wait_indexed(timeout=SEARCH_INDEX_WAIT)
        result = self.bridge.find_tools(query, surface=surface, include_schema=True, **options)
        state = self._state(ctx, surface)
        catalog = self.bridge.catalog
        found = [catalog.get(ref.tool_id) for ref in result.matches]
        if state is not None:
            deferred = [d for d in found if d is not None and surface.place(d).state == "deferred"]
            grew = await self.notifier.load(state, deferred)
            if grew:
                state.fingerprint = listing_for(surface, state).fingerprint
                await ctx.session.send_notification(
                    types.ToolListChangedNotification(), related_request_id=ctx.request_id
                )
            state = None if grew is None else state  # not added (Redis away): use call_tool
        suggested = [catalog.get(ref.tool_id) for ref in result.suggestions or ()]
        native_names = {d.tool_id: d.native_name for d in (*found, *suggested) if d is not None}
        payload = search_payload(result, by_name=state is not None, native_names=native_names)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
            structured_content=payload,
        )

    # ------------------------------------------------------------------ stored results

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """`bridge://results/<ref>`: a result too large to answer inline, read through the surface
        whose call made it (as REST's `/results/<ref>`). A URI of a resource an upstream lists
        (or of its templates): read from that upstream (`ResourceHandlers`). Any other URI: a
        resource an upstream linked in a result on this surface, read from that upstream
        (`ResourceLinks`)."""
        uri = str(params.uri)
        surface = self._surface(ctx)
        if not uri.startswith(RESULTS_URI):
            upstream = await self.resources.route(surface, uri)
            if upstream is not None:
                return await self.resources.read(upstream, uri)
            return await self.resources.read_linked(uri, surface)
        ref = uri.removeprefix(RESULTS_URI)
        try:
            found = self.bridge.invoker.get_persisted(ref, surface) if ref else None
        except BridgeError as exc:  # the store's database away
            raise resource_error(uri, exc) from None
        if found is None:
            raise MCPError(
                RESOURCE_NOT_FOUND,
                f"no stored result at {uri[:100]!r}; a result's link is bridge://results/<ref>",
            )
        media_type, payload = found
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=uri, mime_type=media_type, text=payload.decode())
            ]
        )

    # ------------------------------------------------------------------ subscriptions/listen (2026-07-28)

    async def _subscriptions_listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        surface = self._surface(ctx)
        return await self.resources.listen(ctx, params, self.notifier.listen_handler(surface.name))
