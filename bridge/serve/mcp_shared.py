"""Handshake-era MCP sessions shared by replicas through Redis (`redis.url`), so that a load
balancer may send each request of a session to any replica.

The `/mcp` endpoint is wrapped so that:

- an `initialize` that opens a session writes its record (the negotiated protocol version, the
  client's parameters, the surface, the principal) to Redis before the client learns the
  session's id;
- every request of a session reads the record first (one round trip, which also pushes its
  expiry back): a session this replica does not hold yet is taken up from it, served as if it
  had been opened here; one that has no record (ended, expired) answers 404 on every replica,
  and a copy held here is ended;
- a `DELETE` removes the record and tells the other replicas, which end their copies, before
  its answer is sent;
- the resource subscriptions and logging level of a session are shared as well
  (bridge/serve/mcp_shared_features.py).

While Redis cannot be reached, requests of the handshake era that need a session answer HTTP
503 with a JSON-RPC error naming Redis; the 2026-07-28 era, which needs none, is served as
always.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp_types import INTERNAL_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.runtime import Bridge
from bridge.serve.mcp_gate import METHOD_SCOPE_KEY, SURFACE_SCOPE_KEY, send_jsonrpc_error
from bridge.serve.mcp_notices import FeatureNotices
from bridge.serve.mcp_sdk import adopt_session, end_session, held_session, session_connection
from bridge.serve.mcp_session import ChangeNotifier
from bridge.serve.mcp_shared_features import FOLLOWED_METHODS, SharedFeatures
from bridge.serve.rest_http import read_body, replaying
from bridge.shared_state import Notice, SessionRecord, SharedState, SharedStateUnavailable

__all__ = ["SESSION_RECORD_KEY", "SharedSessionGate", "shared_gate", "shared_record"]

log = logging.getLogger("bridge.serve.mcp")

# Where the gate leaves, in the scope of a session's request, the session's record as Redis had it
SESSION_RECORD_KEY = "a2t_bridge.session_record"

_SESSION_HEADER = b"mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"
_HANDSHAKE_ERA = frozenset([None, *HANDSHAKE_PROTOCOL_VERSIONS])
_RETRY_AFTER = [(b"retry-after", b"1")]


def shared_gate(endpoint: ASGIApp, frontend: Any) -> ASGIApp:
    """`endpoint` (the SDK's `/mcp`) behind the shared-session gate when the frontend's bridge
    shares sessions through Redis (`redis.url`), else `endpoint` itself. The frontend's SDK
    server then also tells its change notifier of each session opened here, so that changes
    reach its stream, and what each session follows (resource updates, log messages) is shared
    through its feature notices."""
    bridge: Bridge = frontend.bridge
    server: Any = frontend.server
    notifier: ChangeNotifier = frontend.notifier
    notices: FeatureNotices = frontend.feature_notices
    shared = bridge.shared
    if shared is None:
        return endpoint
    features = SharedFeatures(notices, shared)

    async def track(ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        if ctx.method == "initialize":
            scope = getattr(ctx.request, "scope", None)
            name = scope.get(SURFACE_SCOPE_KEY) if isinstance(scope, dict) else None
            surface = bridge.surfaces.get(name) if isinstance(name, str) else None
            connection = session_connection(ctx.session)
            if surface is not None and connection is not None:
                notifier.state_for(connection, surface)
                features.hold(connection, surface.name)
        elif ctx.method in FOLLOWED_METHODS:
            record = shared_record(ctx.request)
            if record is not None:
                await features.changed(record, ctx.method, ctx.params)
        return result

    server.middleware.append(track)
    return SharedSessionGate(
        endpoint,
        shared,
        lambda: server.session_manager,
        notifier,
        features,
        max_body_bytes=bridge.config.server.max_body_bytes,
    )


def shared_record(request: Any) -> SessionRecord | None:
    """The session's record the gate read for this request (None without shared sessions)."""
    scope = getattr(request, "scope", None)
    record = scope.get(SESSION_RECORD_KEY) if isinstance(scope, dict) else None
    return record if isinstance(record, SessionRecord) else None


def _owner(scope: Scope) -> dict[str, Any] | None:
    user = scope.get("user")
    if isinstance(user, AuthenticatedUser):
        return dict(authorization_context(user))
    return None


class SharedSessionGate:
    """ASGI wrapper of the SDK's `/mcp` endpoint keeping handshake-era sessions in Redis.
    `manager` gives the SDK's session manager (built with the app); the `notifier` is given
    each connection taken up from a record, and the changes other replicas publish; `features`
    what the sessions follow."""

    def __init__(
        self,
        app: ASGIApp,
        shared: SharedState,
        manager: Callable[[], Any],
        notifier: ChangeNotifier,
        features: SharedFeatures,
        *,
        max_body_bytes: int,
    ) -> None:
        self.app = app
        self.shared = shared
        self._manager = manager
        self._notifier = notifier
        self.features = features
        self._max_body_bytes = max_body_bytes
        self._adopting: dict[str, asyncio.Future[None]] = {}
        self._listening = False
        self._tasks: set[asyncio.Task[None]] = set()

    def _on_notice(self, notice: Notice) -> None:
        kind = notice.get("kind")
        if kind == "catalog":
            work = self._notifier.remote_change(notice)
        elif kind == "ended":
            work = self.on_notice(notice)
        else:
            self.features.on_notice(notice)
            return
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._listening:
            # a replica holds streams only once it has served a request: it listens from then on
            self._listening = True
            self.shared.link.on_notice(self._on_notice)
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session_id: str | None = None
        version: str | None = None
        for key, value in scope["headers"]:
            if key == _SESSION_HEADER:
                session_id = value.decode("latin-1")
            elif key == _VERSION_HEADER:
                version = value.decode("latin-1")
        if version not in _HANDSHAKE_ERA:  # the 2026-07-28 era: no session
            await self.app(scope, receive, send)
        elif session_id is not None:
            await self._serve_session(session_id, scope, receive, send)
        elif scope["method"] == "POST" and scope.get(METHOD_SCOPE_KEY) == "initialize":
            await self._open(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _refuse(self, send: Send, exc: SharedStateUnavailable, what: str) -> None:
        message = (
            f"{what}: the MCP session state store (Redis at {exc.url}) cannot be reached "
            f"({exc.reason}); retry shortly, or speak the 2026-07-28 protocol, which needs "
            "no session"
        )
        await send_jsonrpc_error(
            send,
            503,
            INTERNAL_ERROR,
            message,
            {"unavailable": "redis", "retryAfter": 1},
            headers=_RETRY_AFTER,
        )

    # ------------------------------------------------------------------ a session's requests

    async def _serve_session(
        self, session_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            record = await self.shared.sessions.fetch(session_id)
        except SharedStateUnavailable as exc:
            await self._refuse(send, exc, "this request of an MCP session cannot be served")
            return
        manager = self._manager()
        if record is None:
            if held_session(manager, session_id) is not None:  # ended or expired elsewhere
                await end_session(manager, session_id)
            await self.app(scope, receive, send)  # the SDK answers 404
            return
        if held_session(manager, session_id) is None:
            if record.owner != _owner(scope):  # as the SDK answers another principal's session
                await send_jsonrpc_error(send, 404, -32600, "Session not found")
                return
            await self._adopt(manager, record, scope)
        scope[SESSION_RECORD_KEY] = record
        self.features.seen(record)
        if scope["method"] != "DELETE":
            await self.app(scope, receive, send)
            return
        # the answer (a few bytes) is held until the record is gone and the other replicas are
        # told, so no replica serves the session once its client has read that it ended
        answer: list[Message] = []

        async def hold(message: Message) -> None:
            answer.append(message)

        await self.app(scope, receive, hold)
        if answer and answer[0]["type"] == "http.response.start" and answer[0]["status"] < 400:
            await self.forget(session_id)
        for message in answer:
            await send(message)

    async def _adopt(self, manager: Any, record: SessionRecord, scope: Scope) -> None:
        """Take the session up here, once however many of its requests arrive at once."""
        pending = self._adopting.get(record.session_id)
        if pending is not None:
            await asyncio.shield(pending)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._adopting[record.session_id] = done
        try:
            await adopt_session(
                manager,
                record.session_id,
                scope.get("user"),
                record.protocol_version,
                record.client_params,
                lambda connection: self._adopted(connection, record),
            )
            log.info("MCP session %s… taken up from the shared state", record.session_id[:8])
        finally:
            del self._adopting[record.session_id]
            done.set_result(None)

    def _adopted(self, connection: Any, record: SessionRecord) -> None:
        self._notifier.adopt(connection, record)
        self.features.hold(connection, record.surface, record)

    async def forget(self, session_id: str) -> None:
        """The session ended here: its record goes, and the other replicas end their copies."""
        try:
            await self.shared.sessions.delete(session_id)
        except SharedStateUnavailable as exc:
            log.info(
                "MCP session %s… ended here, its record stays until it expires: %s",
                session_id[:8],
                exc,
            )
            return
        await self.shared.link.publish({"kind": "ended", "session": session_id})

    async def on_notice(self, notice: Notice) -> None:
        """Another replica ended a session: end the copy held here, which closes its streams."""
        session_id = notice.get("session")
        if notice.get("kind") == "ended" and isinstance(session_id, str):
            manager = self._manager()
            if held_session(manager, session_id) is not None:
                await end_session(manager, session_id)

    # ------------------------------------------------------------------ opening one

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.shared.available and not await self.shared.check():
            exc = SharedStateUnavailable(
                self.shared.link.url, self.shared.link.reason or "unreachable"
            )
            await self._refuse(send, exc, "no MCP session can be opened")
            return
        body = await read_body(receive, self._max_body_bytes)
        if body is None:
            return
        params = json.loads(body).get("params") or {}
        if not isinstance(params, dict):
            params = {}
        asked = params.get("protocolVersion")
        record = SessionRecord(
            session_id="",
            protocol_version=asked
            if asked in HANDSHAKE_PROTOCOL_VERSIONS
            else LATEST_HANDSHAKE_VERSION,
            client_params=params,
            surface=str(scope.get(SURFACE_SCOPE_KEY, "")),
            owner=_owner(scope),
        )
        failed: SharedStateUnavailable | None = None

        async def watch(message: Message) -> None:
            nonlocal failed
            if failed is not None:
                return  # the client was answered the failure instead
            if message["type"] == "http.response.start" and message["status"] < 400:
                for key, value in message.get("headers", ()):
                    if key == _SESSION_HEADER:
                        record.session_id = value.decode("latin-1")
                        try:
                            await self.shared.sessions.create(record)
                        except SharedStateUnavailable as exc:
                            failed = exc
                            await self._refuse(send, exc, "no MCP session can be opened")
                            return
            await send(message)

        await self.app(scope, replaying(body, receive), watch)
        if failed is not None and record.session_id:
            await end_session(self._manager(), record.session_id)
