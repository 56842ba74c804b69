"""The lean path of `tools/call` over streamable HTTP: a plain call of a catalog tool is answered
without the SDK's server session, its memory streams and its JSON-RPC models, by the frontend's
own `tools/call` handler (the same pipeline, surfaces, policy, rate limits, audit, metrics and
spans as the SDK path), its JSON-RPC message written in the bytes the SDK would write.

It sits right in front of the SDK's `/mcp` endpoint, behind the auth gate, the session caps and
the shared-session gate, so those apply to it as to every request. A POST takes it when it is
one `tools/call` request (the gate's parsed message, `MESSAGE_SCOPE_KEY`) that

- in the handshake era names a session this server holds, opened by the same credential, whose
  client finished `initialize` and declared neither elicitation nor sampling (an upstream's
  question during the call goes to the client through the SDK's back channel);
- in the 2026-07-28 era passes the SDK's own checks of the era's headers and `_meta` envelope
  (`classify_inbound_request`, `Mcp-Param-*` headers) and declares neither capability either;
- accepts both JSON and an event stream, passes the SDK's Host, Origin and Content-Type checks,
  carries only `name`, `arguments` and a `_meta` of trace context (and the era's envelope): no
  progress token, no log level, no request state;
- calls a tool by its own name that is not deferred on the caller's surface (not `search_tools`
  or `call_tool`, which may load tools into the session).

Anything else goes to the SDK unchanged. The answer is JSON in both eras, or an event stream
with keep-alive comments and then the message once the call runs past the SDK's deferral window
(as the SDK answers on 2026-07-28; in the handshake era, whose SDK transport answers every POST
with an event stream, the era lets a server answer a POST either way and its clients take both;
JSON spares a client that closes an event stream as soon as its message is in, as the SDK's
does, a new connection for each call). A handshake-era client cancels a lean call as any other,
by `notifications/cancelled` naming its request id; a 2026-07-28 client by closing the response
stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic_core
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.streamable_http import REQUEST_CANCELLED, check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    X_MCP_HEADER_KEY,
    InboundLadderRejection,
    classify_inbound_request,
    validate_mcp_param_headers,
)
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    PROTOCOL_VERSION_META_KEY,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge.model import ToolDeclaration, ToolProgress
from bridge.serve.auth import caller_identity
from bridge.serve.http_protocol import LEAVE_SCOPE_KEY
from bridge.serve.mcp_gate import MESSAGE_SCOPE_KEY, SURFACE_SCOPE_KEY
from bridge.serve.mcp_keepalive import (
    HANDSHAKE_SSE_HEADERS,
    MODERN_SSE_HEADERS,
    KeptAlive,
    handshake_ping,
    modern_ping,
)
from bridge.serve.mcp_meta import CALL_TOOL, SEARCH_TOOLS
from bridge.serve.mcp_plain import PlainResults
from bridge.serve.mcp_sdk import (
    RequestInFlight,
    held_session,
    result_shaper,
    session_connection,
    session_owner,
)
from bridge.surface import Surface
from bridge.translate.mcp import render_output_schema

__all__ = ["LeanCalls"]

log = logging.getLogger("bridge.serve.mcp")

# Seconds a 2026-07-28 call may run before its answer becomes an event stream with keep-alive
# comments, and between those comments (and between a handshake-era stream's pings): the SDK's.
KEEPALIVE = 15.0

_MESSAGE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS_KEYS = frozenset({"name", "arguments", "_meta"})
_TRACE_META = frozenset({"traceparent", "tracestate"})
_MODERN_META = _TRACE_META | {
    PROTOCOL_VERSION_META_KEY,
    CLIENT_INFO_META_KEY,
    CLIENT_CAPABILITIES_META_KEY,
}
_HANDSHAKE = frozenset([None, *HANDSHAKE_PROTOCOL_VERSIONS])
_PARAM_HEADER = "mcp-param-"
_PARAM_KEYWORD = f'"{X_MCP_HEADER_KEY}"'  # how a schema's property names its header
# how many verdicts of `_accepted` (and of `_plain_tool`) are kept
_VERDICTS = 256
# JSON as the SDK's 2026-07-28 transport writes a message (`json.dumps` with these separators)
_encode = json.JSONEncoder(separators=(",", ":")).encode


class _Session:
    """Stands in for the SDK's per-request session proxy: the connection behind it, the client's
    parameters and capabilities, and a progress report that goes nowhere (a lean call carries no
    progress token, so the SDK would send nothing either)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self.client_params = getattr(connection, "client_params", None)
        self.client_capabilities = None

    async def report_progress(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Request:
    """Stands in for the Starlette request of a call: its ASGI scope and its headers (by lower-
    case name, the first of any given twice, as Starlette's `Headers.get` reads them)."""

    __slots__ = ("headers", "scope")

    def __init__(self, scope: Scope, headers: dict[str, str]) -> None:
        self.scope, self.headers = scope, headers


class _Call:
    """A request the lean path answers. It stands in both for the SDK's `ServerRequestContext`
    of the request (`request`, `meta`, `request_id`, `protocol_version`, `session`) and for its
    `CallToolRequestParams` (the tool's `name` and `arguments`, nothing more); it also keeps the
    caller's surface and the tool's declaration there (None for a missing or hidden tool)
    found when the request was planned, the session's id and, in the handshake era, the SDK's
    transport and connection of the session (None on 2026-07-28)."""

    __slots__ = (
        "arguments",
        "connection",
        "decl",
        "meta",
        "name",
        "protocol_version",
        "request",
        "request_id",
        "session_id",
        "surface",
        "transport",
    )
    request_state = None
    input_responses = None

    def __init__(
        self,
        request: _Request,
        message: tuple[int | str, str, dict[str, Any] | None, dict[str, Any] | None],
        protocol_version: str,
        found: tuple[Surface, ToolDeclaration | None],
        session: tuple[str | None, Any, Any],
    ) -> None:
        self.request = request
        self.request_id, self.name, self.arguments, self.meta = message
        self.protocol_version = protocol_version
        self.surface, self.decl = found
        self.session_id, self.transport, self.connection = session

    @property
    def session(self) -> _Session:
        return _Session(self.connection)


async def _unheard(progress: ToolProgress) -> None:
    """Where a lean call's progress goes: nowhere, as the SDK sends none without a token."""


class LeanCalls:
    """ASGI wrapper of the SDK's `/mcp` endpoint answering plain `tools/call` requests itself
    with the frontend's `tools/call` handler (in its span when the bridge traces). `frontend`
    also gives the surfaces, the default surface and the schemas the SDK checks
    `Mcp-Param-*` headers against. `enabled` may be turned off, sending every request to the
    SDK; `served` counts the requests answered here, `plain.written` their plain results."""

    def __init__(
        self, app: ASGIApp, frontend: Any, security: TransportSecuritySettings | None
    ) -> None:
        self.app = app
        self.frontend = frontend
        self.handler: Callable[[Any, Any], Awaitable[Any]] = self._call
        tracing = frontend.bridge.telemetry.tracing
        if tracing is not None:
            from bridge.serve.traced import traced_mcp_handler

            self.handler = traced_mcp_handler(tracing, "tools/call", self.handler)
        self.enabled = True
        self.served = 0
        self._security = TransportSecurityMiddleware(security)
        self._verdicts: dict[tuple[str | None, str | None, str | None, str | None], bool] = {}
        # what `_modern_version` found of an envelope: its protocol version, "" when refused
        self._envelopes: dict[tuple[str, str | None, str | None, str | None, str], str] = {}
        # what `_plain_tool` found of a tool name on a surface, and at which catalog generation
        self._tools: dict[tuple[Surface, str], tuple[int, ToolDeclaration | None, int]] = {}
        self._shape = result_shaper(frontend.server)
        self.plain = PlainResults(self._shape)
        # the connection of each handshake-era session, learnt from its requests to the SDK
        self._connections: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        # the lean calls running, by session and request id, for notifications/cancelled
        self._running: dict[tuple[str, int | str], asyncio.Task[Any]] = {}
        self._cancelled: set[asyncio.Task[Any]] = set()
        frontend.server.middleware.append(self._learn)

    async def _learn(self, ctx: Any, call_next: Any) -> Any:
        """SDK middleware: notes the connection of the session each request comes on."""
        connection = session_connection(ctx.session)
        session_id = getattr(connection, "session_id", None)
        if isinstance(session_id, str) and session_id not in self._connections:
            self._connections[session_id] = connection
        return await call_next(ctx)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = scope.get(MESSAGE_SCOPE_KEY) if scope["type"] == "http" else None
        if message is not None and self.enabled and scope["method"] == "POST":
            method = message.get("method")
            if method == "tools/call":
                call = await self._plan(scope, message)
                if call is not None:
                    self.served += 1
                    if call.transport is not None:
                        await self._serve_handshake(call, send)
                    else:
                        await self._serve_modern(call, receive, send)
                    return
            elif method == "notifications/cancelled":
                self._cancel(scope, message)
        await self.app(scope, receive, send)

    # ------------------------------------------------------------------ which requests

    async def _plan(self, scope: Scope, message: dict[str, Any]) -> _Call | None:
        """The call to answer here, or None for the SDK to answer the request."""
        params = message.get("params")
        request_id = message.get("id")
        if (
            not message.keys() <= _MESSAGE_KEYS
            or not isinstance(params, dict)
            or not params.keys() <= _PARAMS_KEYS
            or not isinstance(request_id, int | str)
            or isinstance(request_id, bool)
        ):
            return None
        name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
        if (
            not isinstance(name, str)
            or name in (SEARCH_TOOLS, CALL_TOOL)
            or not (arguments is None or isinstance(arguments, dict))
            or not (meta is None or isinstance(meta, dict))
        ):
            return None
        raw = scope["headers"]
        # the first of a header given twice, as Starlette's `Headers.get` reads it
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(raw)}
        if len(headers) < len(raw) and _routing_header_twice(raw):
            return None  # a routing header given twice: the SDK says so
        get = headers.get
        key = (get("accept"), get("content-type"), get("host"), get("origin"))
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = await self._accepted(scope, key)
        if not verdict:
            return None
        version = get("mcp-protocol-version")
        session_id = get("mcp-session-id")
        if version in _HANDSHAKE:
            if meta is not None and not meta.keys() <= _TRACE_META:
                return None
            held = self._handshake_session(scope, session_id)
            if held is None:
                return None
            found = self._plain_tool(scope, name)
            if found is None:
                return None
            protocol_version = held[1].protocol_version
            session = (session_id, *held)
        elif version in MODERN_PROTOCOL_VERSIONS and session_id is None:
            if meta is None or not meta.keys() <= _MODERN_META:
                return None
            found = self._plain_tool(scope, name)
            if found is None:
                return None
            protocol_version = self._modern_version(message, headers, found, name, arguments)
            if protocol_version is None:
                return None
            session = (None, None, None)
        else:
            return None
        request = _Request(scope, headers)
        return _Call(
            request, (request_id, name, arguments, meta), protocol_version, found[:2], session
        )

    async def _accepted(
        self, scope: Scope, key: tuple[str | None, str | None, str | None, str | None]
    ) -> bool:
        """Whether the request accepts JSON and an event stream and passes the SDK's Host, Origin
        and Content-Type checks; the verdict is kept under `key`, the Accept, Content-Type, Host
        and Origin headers the checks read (they match the Host against patterns)."""
        request = Request(scope)
        has_json, has_sse = check_accept_headers(request)
        refused = await self._security.validate_request(request, is_post=True)
        verdict = has_json and has_sse and refused is None
        if len(self._verdicts) >= _VERDICTS:
            self._verdicts.clear()
        self._verdicts[key] = verdict
        return verdict

    def _handshake_session(self, scope: Scope, session_id: str | None) -> tuple[Any, Any] | None:
        """(transport, connection) of a held session the request may use, whose client
        finished `initialize` and cannot be asked; else None."""
        if session_id is None:
            return None
        manager = self.frontend.server.session_manager
        transport = held_session(manager, session_id)
        connection = self._connections.get(session_id)
        if transport is None or connection is None or transport.is_terminated:
            return None
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        if requestor != session_owner(manager, session_id):
            return None
        # `initialized` set (it is never cleared) means the SDK's `initialize_accepted` holds too
        if not connection.initialized.is_set():
            return None
        capabilities = connection.client_capabilities
        # a client that declared elicitation or sampling may be asked by an upstream
        if capabilities is None or capabilities.elicitation or capabilities.sampling:
            return None
        return transport, connection

    def _modern_version(
        self,
        message: dict[str, Any],
        headers: dict[str, str],
        found: tuple[Surface, ToolDeclaration | None, bool],
        name: str,
        arguments: dict[str, Any] | None,
    ) -> str | None:
        """The protocol version of a 2026-07-28 request the SDK's checks pass, whose client
        cannot be asked; else None. `found` is what `_plain_tool` found of the tool `name`
        called, whose schema the SDK checks `Mcp-Param-*` headers against.

        The SDK's envelope ladder (`classify_inbound_request`) reads, of a `tools/call` whose
        `_meta` holds client capabilities, the envelope's protocol version, the
        `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers and the tool's name (the
        capabilities and client info it only hands back): its verdict is kept per those values
        when the version is a string, the only kind it may accept."""
        meta = message["params"]["_meta"]  # a dict: `_plan` checked it
        capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY)
        if (  # a client that declared elicitation or sampling may be asked by an upstream
            not isinstance(capabilities, dict)
            or "elicitation" in capabilities
            or "sampling" in capabilities
        ):
            return None
        envelope = meta.get(PROTOCOL_VERSION_META_KEY)
        get = headers.get
        asked = (envelope, get("mcp-protocol-version"), get("mcp-method"), get("mcp-name"), name)
        version = self._envelopes.get(asked) if envelope.__class__ is str else None
        if version is None:
            verdict = classify_inbound_request(message, headers=headers)
            # "" for a refusal: no protocol version is the empty string
            version = (
                "" if isinstance(verdict, InboundLadderRejection) else verdict.protocol_version
            )
            if envelope.__class__ is str:
                if len(self._envelopes) >= _VERDICTS:
                    self._envelopes.clear()
                self._envelopes[asked] = version
        if not version:
            return None
        _, decl, declares = found
        if (
            declares
            and decl is not None
            and (arguments or any(key.startswith(_PARAM_HEADER) for key in headers))
            and validate_mcp_param_headers(decl.input_schema, arguments or {}, headers)
        ):
            return None
        # a routing header given twice was sent to the SDK by `_plan`, which says so
        return version

    def _plain_tool(
        self, scope: Scope, name: str
    ) -> tuple[Surface, ToolDeclaration | None, bool] | None:
        """The caller's surface, the declaration of `name` on it (None for a missing or hidden
        tool, which the pipeline answers, as on the SDK path) and whether its schema may declare
        `x-mcp-header` properties (the SDK's check of `Mcp-Param-*` headers passes every call of
        a tool whose schema declares none), when `name` needs nothing of a session: a tool not
        deferred on the surface; else None. What is found is kept per surface and name until
        the catalog changes (its generation): a surface's placements follow from its config,
        which a reload changes only with a new surface, and from the catalog."""
        bridge = self.frontend.bridge
        try:
            asked = scope[SURFACE_SCOPE_KEY]  # (the gate's; the default surface only read without)
        except KeyError:
            asked = self.frontend.default_surface
        surface = bridge.surfaces.get(asked)
        if surface is None:
            return None
        generation = bridge.catalog.generation
        key = (surface, name)
        kept = self._tools.get(key)
        if kept is None or kept[0] != generation:
            decl = surface.lookup(name)
            # 0: may be called here, 1: may be and declares x-mcp-header, 2: deferred
            verdict = 0
            if decl is not None:
                if surface.place(decl).state == "deferred":
                    verdict = 2
                elif _PARAM_KEYWORD in json.dumps(decl.input_schema, default=str):
                    verdict = 1
            if len(self._tools) >= _VERDICTS:
                self._tools.clear()
            kept = self._tools[key] = (generation, decl, verdict)
        if kept[2] == 2:
            return None
        return surface, kept[1], kept[2] == 1

    def _cancel(self, scope: Scope, message: dict[str, Any]) -> None:
        """A handshake-era `notifications/cancelled` naming a lean call cancels it (the SDK,
        which answers the notification, knows no such request)."""
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        session_id = next((v for k, v in scope["headers"] if k == b"mcp-session-id"), None)
        if session_id is None or not isinstance(request_id, int | str):
            return
        task = self._running.get((session_id.decode("latin-1"), request_id))
        if task is not None:
            self._cancelled.add(task)
            task.cancel()

    # ------------------------------------------------------------------ answering

    async def _call(self, call: _Call, params: _Call) -> Any:
        """The frontend's `tools/call` of a plain catalog tool (its handler, `_call_tool`, with
        the surface and the declaration the plan found, and the caller's headers as read)."""
        frontend, decl = self.frontend, call.decl
        output_schema: dict[str, Any] | None = None
        try:
            if decl is not None:
                output_schema = render_output_schema(decl, call.protocol_version)
            options = {
                "surface": call.surface,
                "progress": _unheard,
                "origin": frontend._origin(call),
            }
            identity = caller_identity(call.request.scope)
            return await frontend.calls.run(
                call,
                call.name,
                call.arguments or {},
                output_schema,
                options,
                identity,
                self.plain.render,
            )
        except MCPError:
            raise
        except Exception as exc:
            return frontend.calls.failed(exc, call, call.name, decl, output_schema)

    async def _answer(self, call: _Call) -> dict[str, Any]:
        """The JSON-RPC response to the call, as the SDK's dispatcher would make it."""
        try:
            result = await self.handler(call, call)
            if result.__class__ is not dict:
                result = self._shape("tools/call", call.protocol_version, result)
            return {"jsonrpc": "2.0", "id": call.request_id, "result": result}
        except MCPError as exc:
            error = exc.error.model_dump(by_alias=True, exclude_none=True, mode="json")
        except Exception:
            log.exception("tools/call %s failed", call.name)
            error = {"code": INTERNAL_ERROR, "message": "Internal error"}
        return {"jsonrpc": "2.0", "id": call.request_id, "error": error}

    async def _serve_handshake(self, call: _Call, send: Send) -> None:
        """Answer in JSON, or on an event stream with keep-alive comments once the call runs
        past `KEEPALIVE` (the era lets a server answer a POST either way, and its clients take
        both); a `notifications/cancelled` naming the call cancels it."""
        assert call.session_id is not None
        session = (b"mcp-session-id", call.session_id.encode())
        key = (call.session_id, call.request_id)
        headers = [*HANDSHAKE_SSE_HEADERS, session, (b"x-accel-buffering", b"no")]
        stream = KeptAlive(send, headers, handshake_ping, KEEPALIVE)
        with RequestInFlight(call.transport) as open_:
            task = asyncio.current_task()
            assert task is not None
            self._running[key] = task
            timer = asyncio.get_running_loop().call_later(KEEPALIVE, stream.keep_alive)
            try:
                if not open_:
                    raise asyncio.CancelledError  # the session is ending: as the SDK cancels it
                answer = await self._answer(call)
            except asyncio.CancelledError:
                if task not in self._cancelled:
                    raise
                task.uncancel()
                error = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
                answer = {"jsonrpc": "2.0", "id": call.request_id, "error": error}
            finally:
                timer.cancel()
                if stream.pinger is not None:
                    await stream.settle()
                self._cancelled.discard(task)
                if self._running.get(key) is task:
                    del self._running[key]
            body = pydantic_core.to_json(answer)  # as the SDK's transport writes a message
            if stream.open:
                event = b"event: message\r\ndata: " + body + b"\r\n\r\n"
                await send({"type": "http.response.body", "body": event, "more_body": False})
                return
            headers = [
                (b"content-type", b"application/json"),
                session,
                (b"content-length", str(len(body)).encode()),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})

    async def _serve_modern(self, call: _Call, receive: Receive, send: Send) -> None:
        """Answer in JSON, or on an event stream with keep-alive comments once the call runs past
        `KEEPALIVE`; a client that closes the stream cancels the call. The call runs in the
        request's own task, which is cancelled when the client leaves: the HTTP protocol says
        when (`LEAVE_SCOPE_KEY`), else a watcher of the connection does."""
        task = asyncio.current_task()
        assert task is not None
        stream = KeptAlive(send, MODERN_SSE_HEADERS, modern_ping, KEEPALIVE)
        left = False

        def leave() -> None:
            nonlocal left
            left = True
            task.cancel()

        on_leave = call.request.scope.get(LEAVE_SCOPE_KEY)
        watcher: asyncio.Future[None] | None = None
        if on_leave is not None:
            on_leave(leave)
        else:
            watcher = asyncio.ensure_future(_watch(receive, leave))
        timer = asyncio.get_running_loop().call_later(KEEPALIVE, stream.keep_alive)
        try:
            answer = await self._answer(call)
        except asyncio.CancelledError:
            if not left:
                raise
            task.uncancel()
            return  # the client left, and the call was cancelled
        finally:
            timer.cancel()
            if on_leave is not None:
                on_leave(None)
            if watcher is not None:
                watcher.cancel()
            if stream.pinger is not None:
                await stream.settle()
        if left:  # it left as the call ended
            task.uncancel()
            return
        if stream.open:
            data = _encode(answer)
            body = f"event: message\r\ndata: {data}\r\n\r\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        body = _encode(answer).encode()
        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]
        error = answer.get("error")
        status = ERROR_CODE_HTTP_STATUS.get(error["code"], 200) if error else 200
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _routing_header_twice(raw: list[tuple[bytes, bytes]]) -> bool:
    """Whether a header of `raw` that routes a request (`Mcp-*`) is given twice."""
    names = [key for key, _ in raw if key.startswith(b"mcp-")]
    return len(names) != len(set(names))


async def _watch(receive: Receive, leave: Callable[[], None]) -> None:
    """Call `leave` once `receive` says the client left."""
    while (await receive()).get("type") != "http.disconnect":
        pass
    leave()
