"""Inbound auth shared by every HTTP frontend: bearer tokens from config, each bound to one
surface. With no token configured the server is open (and refuses non-loopback binds unless
told `--insecure`)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from bridge.config import ServerConfig

__all__ = ["AuthResult", "CALLER_SCOPE_KEY", "authenticate"]

# Where a frontend leaves the name of a request's token (`AuthResult.caller`) in its ASGI scope.
CALLER_SCOPE_KEY = "a2t_bridge.caller"


@dataclass(frozen=True)
class AuthResult:
    ok: bool
    surface: str | None = None
    status: int = 200
    error: str | None = None
    # who the token says the caller is, for logs and the audit stream: the token's `name`, else
    # its place in the config (`server.tokens[2]`); never the token itself. None: no token.
    caller: str | None = None


def authenticate(server: ServerConfig, authorization: str | None) -> AuthResult:
    """The surface a request may see, from its Authorization header."""
    if not server.tokens:
        return AuthResult(True, server.default_surface)
    if not authorization:
        return AuthResult(False, status=401, error="missing bearer token: send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return AuthResult(False, status=401, error="the Authorization header must be 'Bearer <token>'")
    for index, entry in enumerate(server.tokens):
        if hmac.compare_digest(entry.token.encode(), token.strip().encode()):
            return AuthResult(True, entry.surface, caller=entry.name or f"server.tokens[{index}]")
    return AuthResult(False, status=401, error="unknown bearer token")
