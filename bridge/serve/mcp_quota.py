"""Caps on the handshake-era MCP sessions one client holds over HTTP, so that no client can take
the room of the others: each client (a static token, an OAuth subject, else an address) holds at
most `server.mcp_max_sessions_per_client` sessions, and all clients together
`server.mcp_max_sessions`.

An `initialize` that would pass a cap makes room first by ending an idle session (no request in
progress, no open `GET` stream): the client's own longest idle one, else, when the bridge as a
whole is full, the longest idle one of the client holding the most sessions. The session is ended
as its client's `DELETE` would end it, so its id answers 404 from then on. When every session it
could end is in use, the `initialize` is refused: 429 at the client's own cap, 503 at the
bridge's.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.serve.mcp_gate import CLIENT_SCOPE_KEY, METHOD_SCOPE_KEY, send_jsonrpc_error

__all__ = ["SessionQuota"]

log = logging.getLogger("bridge.serve.mcp")

_SESSION_HEADER = b"mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"
# the protocol-version headers the SDK serves in the handshake era (none at all included)
_HANDSHAKE_ERA = frozenset([None, *(v.encode() for v in HANDSHAKE_PROTOCOL_VERSIONS)])


@dataclass(eq=False)
class _Held:
    """One open session: whose it is, what a request ending it must carry (the SDK's user of the
    request that opened it, and that request's Host, which passed the DNS-rebinding check), and
    its requests in progress."""

    client: str
    user: Any
    host: bytes
    in_flight: int = 1
    idle_since: float = 0.0


class _Full(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class SessionQuota:
    """ASGI wrapper of the SDK's `/mcp` endpoint keeping the session caps. It sits behind the
    gate (`mcp_gate.py`), which leaves the client's key and a POST's method in the scope."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        per_client: int,
        total: int,
        idle_timeout: float,
        security: TransportSecuritySettings | None = None,
        path: str = "/mcp",
    ) -> None:
        self.app = app
        # the SDK's Host, Origin and Content-Type checks, made before a session is ended to make
        # room: a request they refuse (a web page's cross-site POST) ends nothing
        self._security = TransportSecurityMiddleware(security)
        self.per_client = per_client
        self.total = total
        self.idle_timeout = idle_timeout
        self.path = path
        self._sessions: dict[str, _Held] = {}
        self._count: Counter[str] = Counter()  # sessions held and being opened, by client
        self._opening = 0
        # idle sessions, longest idle first: all of them, and each client's
        self._idle: OrderedDict[str, None] = OrderedDict()
        self._idle_of: dict[str, OrderedDict[str, None]] = {}

    def held(self, client: str) -> int:
        """Sessions `client` holds or is opening."""
        return self._count[client]

    def idle(self, client: str) -> int:
        """Sessions of `client` with no request in progress."""
        return len(self._idle_of.get(client, ()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session_id: str | None = None
        version: bytes | None = None
        for key, value in scope["headers"]:
            if key == _SESSION_HEADER:
                session_id = value.decode("latin-1")
            elif key == _VERSION_HEADER:
                version = value
        if session_id is not None:
            await self._serve_session(session_id, scope, receive, send)
        elif scope.get(METHOD_SCOPE_KEY) == "initialize" and version in _HANDSHAKE_ERA:
            await self._open(scope, receive, send)
        else:  # the 2026-07-28 era (no session), or a request the SDK refuses without one
            await self.app(scope, receive, send)

    # ------------------------------------------------------------------ requests of a session

    async def _serve_session(
        self, session_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        held = self._sessions.get(session_id)
        if held is None:  # ended, or never opened: the SDK answers 404
            await self.app(scope, receive, send)
            return
        self._busy(session_id, held)
        try:
            await self.app(scope, receive, send)
        finally:
            self._done(session_id, held)
            if scope["method"] == "DELETE" and held.client == scope.get(CLIENT_SCOPE_KEY):
                self._forget(session_id)

    def _uncount(self, client: str) -> None:
        self._count[client] -= 1
        if not self._count[client]:
            del self._count[client]

    def _busy(self, session_id: str, held: _Held) -> None:
        if not held.in_flight:
            self._unidle(session_id, held.client)
        held.in_flight += 1

    def _unidle(self, session_id: str, client: str) -> None:
        del self._idle[session_id]
        own = self._idle_of[client]
        del own[session_id]
        if not own:
            del self._idle_of[client]

    def _done(self, session_id: str, held: _Held) -> None:
        held.in_flight -= 1
        if not held.in_flight and self._sessions.get(session_id) is held:
            # the SDK's idle countdown restarts as the request ends, a moment before this
            held.idle_since = time.monotonic()
            self._idle[session_id] = None
            self._idle_of.setdefault(held.client, OrderedDict())[session_id] = None

    def _forget(self, session_id: str) -> _Held | None:
        held = self._sessions.pop(session_id, None)
        if held is None:
            return None
        self._uncount(held.client)
        if session_id in self._idle:
            self._unidle(session_id, held.client)
        return held

    # ------------------------------------------------------------------ opening one

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = await self._security.validate_request(Request(scope), is_post=True)
        if refused is not None:
            await refused(scope, receive, send)
            return
        client: str = scope.get(CLIENT_SCOPE_KEY, "")
        try:
            ending = self._make_room(client)
        except _Full as full:
            log.warning("MCP initialize of %s refused: %s", client, full.message)
            await send_jsonrpc_error(
                send, full.status, full.code, full.message, headers=[(b"retry-after", b"1")]
            )
            return
        # counted from now on, so that openings at once cannot pass the caps together
        self._count[client] += 1
        self._opening += 1
        opened: tuple[str, _Held] | None = None

        async def watch(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                for key, value in message.get("headers", ()):
                    if key == _SESSION_HEADER and opened is None:
                        held = _Held(client, scope.get("user"), _host_of(scope))
                        opened = value.decode("latin-1"), held
                        self._sessions[opened[0]] = held
                        self._opening -= 1  # held now: still counted as the client's
            await send(message)

        try:
            if ending is not None:
                log.info(
                    "MCP session %s… of %s ended to make room for a new session of %s",
                    ending[0][:8],
                    ending[1].client,
                    client,
                )
                await self._end(*ending)
            await self.app(scope, receive, watch)
        finally:
            if opened is None:
                self._opening -= 1
                self._uncount(client)
            else:
                self._done(*opened)

    def _make_room(self, client: str) -> tuple[str, _Held] | None:
        """The idle session to end before `client` opens one, taken off the books at once (two
        openings never pick the same one); _Full when a cap is reached and none can be ended."""
        self._expire()
        if self._count[client] >= self.per_client:
            own = self._idle_of.get(client)
            if not own:
                whose = "this token" if client.startswith("token") else "this client address"
                raise _Full(
                    429,
                    INVALID_REQUEST,
                    f"{whose} holds its {self.per_client} MCP sessions "
                    "(server.mcp_max_sessions_per_client), each with a request in "
                    "progress: end one (DELETE /mcp) before opening another",
                )
            return self._take(next(iter(own)))
        if len(self._sessions) + self._opening >= self.total:
            if not self._idle_of:
                raise _Full(
                    503,
                    INTERNAL_ERROR,
                    f"the bridge holds its {self.total} MCP sessions "
                    "(server.mcp_max_sessions), each with a request in progress: "
                    "retry later",
                )
            # the client's own first; else one of the client holding the most (its fair share
            # or more)
            whose = client
            if whose not in self._idle_of:
                whose = max(self._idle_of, key=self._count.__getitem__)
            return self._take(next(iter(self._idle_of[whose])))
        return None

    def _take(self, session_id: str) -> tuple[str, _Held]:
        held = self._forget(session_id)
        assert held is not None
        return session_id, held

    def _expire(self) -> None:
        """Take off the books the sessions idle past the idle timeout: the SDK has ended them."""
        deadline = time.monotonic() - self.idle_timeout
        while self._idle:
            session_id = next(iter(self._idle))
            if self._sessions[session_id].idle_since > deadline:
                break
            self._forget(session_id)

    async def _end(self, session_id: str, held: _Held) -> None:
        """End a session through the SDK, as its client's DELETE would."""
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "scheme": "http",
            "method": "DELETE",
            "path": self.path,
            "raw_path": self.path.encode(),
            "root_path": "",
            "query_string": b"",
            "client": None,
            "server": None,
            "headers": [(b"host", held.host), (_SESSION_HEADER, session_id.encode())],
        }
        if held.user is not None:
            scope["user"] = held.user

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: Message) -> None:
            pass

        try:
            await self.app(scope, receive, discard)
        except Exception as exc:  # it may have ended meanwhile: room is made either way
            log.debug("ending MCP session %s… failed: %s", session_id[:8], exc)


def _host_of(scope: Scope) -> bytes:
    for key, value in scope["headers"]:
        if key == b"host":
            return bytes(value)
    return b"127.0.0.1"
