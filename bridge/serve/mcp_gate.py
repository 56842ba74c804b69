"""The HTTP gate of the `/mcp` endpoint: the bearer token that picks a request's surface, and the
SDK's DNS-rebinding protection (the Host and Origin a request may name)."""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge.runtime import Bridge
from bridge.serve.auth import CALLER_SCOPE_KEY, authenticate
from bridge.serve.rest_http import ApiError, error_response, read_body, replaying

__all__ = ["SURFACE_SCOPE_KEY", "CALLER_SURFACE", "MCPAuthGate", "transport_security_for"]

log = logging.getLogger("bridge.serve.mcp")

SURFACE_SCOPE_KEY = "a2t_bridge.surface"
# The same, for what the SDK asks before dispatch with a tool's name alone (the schema it checks
# a 2026-07-28 call's Mcp-Param headers against): set in the request's task.
CALLER_SURFACE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "a2t_bridge_caller_surface", default=None
)


class MCPAuthGate:
    """ASGI wrapper of the `/mcp` endpoint: bearer tokens from `server.tokens`, each bound to a
    surface (with no token configured, everyone gets `server.default_surface`). A refused request
    gets 401 with a JSON body saying why. An accepted one carries its surface in the scope and,
    as the SDK's authenticated user, a principal derived from the token, so a handshake-era
    session stays bound to the token that opened it."""

    def __init__(self, app: ASGIApp, bridge: Bridge) -> None:
        self.app = app
        self.bridge = bridge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        server = self.bridge.config.server  # read at each request: a reload may change the tokens
        auth = authenticate(server, header)
        if not auth.ok:
            description = auth.error or "unauthorized"
            body = json.dumps({"error": "invalid_token", "error_description": description}).encode()
            challenge = f'Bearer error="invalid_token", error_description="{description}"'
            await send(
                {
                    "type": "http.response.start",
                    "status": auth.status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", challenge.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["method"] == "POST":
            # read here, not by the SDK: a client that leaves (or is timed out) midway is no
            # error to log, and a body without a Content-Length is held to max_body_bytes too
            try:
                whole = await read_body(receive, server.max_body_bytes)
            except ApiError as refused:
                await error_response(refused)(scope, receive, send)
                return
            if whole is None:
                return
            receive = replaying(whole, receive)
        scope[SURFACE_SCOPE_KEY] = auth.surface
        if auth.caller is not None:
            scope[CALLER_SCOPE_KEY] = auth.caller
        CALLER_SURFACE.set(auth.surface)  # this request's task and those it starts
        if server.tokens and header:
            # only a digest of the token travels on; the token itself stays in the header
            principal = hashlib.sha256(header.partition(" ")[2].strip().encode()).hexdigest()[:24]
            scope["user"] = AuthenticatedUser(
                AccessToken(token=f"sha256:{principal}", client_id=f"token:{principal}", scopes=[f"surface:{auth.surface}"])
            )
        await self.app(scope, receive, send)


_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def transport_security_for(host: str, public_url: str | None = None) -> TransportSecuritySettings:
    """DNS-rebinding protection (the SDK's Host and Origin checks), always on: loopback names,
    the bound host when it is a name or a specific address, and the public URL's host."""
    hosts, origins = list(_LOOPBACK_HOSTS), list(_LOOPBACK_ORIGINS)
    wildcard = host in ("", "0.0.0.0", "::", "[::]")
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if not wildcard and f"{name}:*" not in hosts:  # another loopback address (127.0.0.2) too: clients name it
        hosts += [name, f"{name}:*"]
        origins += [f"http://{name}", f"https://{name}", f"http://{name}:*", f"https://{name}:*"]
    if public_url:
        parts = urlsplit(public_url)
        if parts.netloc:
            hosts += [parts.netloc, f"{parts.hostname}:*"]
            origins += [f"{parts.scheme}://{parts.netloc}"]
    elif wildcard:
        log.warning(
            "serving MCP on %s: Host checks accept loopback names only; set server.public_url to the "
            "address clients use", host or "all interfaces"
        )
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)
