"""The HTTP gate of the `/mcp` endpoint: the caller (a static token or an OAuth access token)
whose identity picks a request's surface, and the SDK's DNS-rebinding protection (the Host and
Origin a request may name)."""

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

from bridge.config import ServerConfig
from bridge.identity import AuthFailure, Identity
from bridge.runtime import Bridge
from bridge.serve.auth import identify, refusal_headers
from bridge.serve.rest_http import ApiError, error_response, read_body, replaying

__all__ = ["CALLER_SURFACE", "SURFACE_SCOPE_KEY", "MCPAuthGate", "transport_security_for"]

log = logging.getLogger("bridge.serve.mcp")

SURFACE_SCOPE_KEY = "a2t_bridge.surface"
# The same, for what the SDK asks before dispatch with a tool's name alone (the schema it checks
# a 2026-07-28 call's Mcp-Param headers against): set in the request's task.
CALLER_SURFACE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "a2t_bridge_caller_surface", default=None
)


class MCPAuthGate:
    """ASGI wrapper of the `/mcp` endpoint: static bearer tokens from `server.tokens`, each bound
    to a surface, and OAuth access tokens of `server.oauth`, whose claims pick it (with neither
    configured, everyone gets `server.default_surface`). A refused request gets 401 (403 for a
    missing scope, 503 while the identity provider cannot be read) with a JSON body saying why and
    a challenge naming the resource metadata. An accepted one carries its surface in the scope
    and, as the SDK's authenticated user, its principal (a digest of a static token; an OAuth
    caller's issuer, subject and client id), so a handshake-era session stays bound to it."""

    def __init__(self, app: ASGIApp, bridge: Bridge) -> None:
        self.app = app
        self.bridge = bridge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        server = self.bridge.config.server  # read at each request: a reload may change the tokens
        caller = await identify(self.bridge, scope)
        if isinstance(caller, AuthFailure):
            await _refuse(server, caller, scope, send)
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
        scope[SURFACE_SCOPE_KEY] = caller.surface
        CALLER_SURFACE.set(caller.surface)  # this request's task and those it starts
        user = _principal(caller, Headers(scope=scope).get("authorization"))
        if user is not None:
            scope["user"] = user
        await self.app(scope, receive, send)


async def _refuse(server: ServerConfig, failure: AuthFailure, scope: Scope, send: Send) -> None:
    error = {"error": failure.error or "invalid_token", "error_description": failure.description}
    body = json.dumps(error).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    challenge = refusal_headers(server, failure, scope, "/mcp")
    headers += [(k.lower().encode(), v.encode()) for k, v in challenge.items()]
    await send({"type": "http.response.start", "status": failure.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _principal(caller: Identity, header: str | None) -> AuthenticatedUser | None:
    """The SDK's user for a session's owner: never the token itself."""
    if caller.via == "static" and header:
        digest = hashlib.sha256(header.partition(" ")[2].strip().encode()).hexdigest()[:24]
        return AuthenticatedUser(AccessToken(token=f"sha256:{digest}", client_id=f"token:{digest}",
                                             scopes=[f"surface:{caller.surface}"]))
    if caller.via in ("jwt", "introspection"):
        return AuthenticatedUser(AccessToken(token=f"oauth:{caller.via}", client_id=caller.client_id or "",
                                             scopes=sorted(caller.scopes), subject=caller.subject,
                                             claims={"iss": caller.issuer}))
    return None


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
