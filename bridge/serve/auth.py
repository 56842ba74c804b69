"""Inbound auth shared by every HTTP frontend: each request's caller identified once
(`bridge.identity`), the challenge a refused request gets, and the RFC 9728 protected resource
metadata at `/.well-known/oauth-protected-resource` (and its `/mcp` form) when `server.oauth`
is configured. With no token and no `oauth` the server is open (and refuses non-loopback binds
unless told `--insecure`)."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from bridge.config import ServerConfig
from bridge.identity import AuthFailure, Identity, challenge, resource_metadata
from bridge.runtime import Bridge

__all__ = [
    "IDENTITY_SCOPE_KEY",
    "METADATA_PATH",
    "authorization",
    "caller_facts",
    "caller_identity",
    "identified",
    "identify",
    "refusal_headers",
    "resource_metadata_routes",
]

IDENTITY_SCOPE_KEY = "a2t_bridge.identity"
METADATA_PATH = "/.well-known/oauth-protected-resource"


async def identify(bridge: Bridge, scope: Scope) -> Identity | AuthFailure:
    """The request's caller, identified at its first asking and kept in its scope. The server
    settings are read at each request: a reload may change the tokens and `oauth`."""
    found = scope.get(IDENTITY_SCOPE_KEY)
    if found is None:
        server = bridge.config.server
        # with neither tokens nor `oauth` everyone is let in: no header is read then
        header = authorization(scope) if server.tokens or server.oauth is not None else None
        found = scope[IDENTITY_SCOPE_KEY] = await bridge.identity.identify(server, header)
    return found


def authorization(scope: Scope) -> str | None:
    """The request's `Authorization` header (the first, as Starlette's `Headers.get` reads it)."""
    value: bytes
    for key, value in scope["headers"]:
        if key == b"authorization":
            return value.decode("latin-1")
    return None


def identified(scope: Scope) -> Identity | AuthFailure:
    """The caller `identify` found for this request before its route ran."""
    found = scope.get(IDENTITY_SCOPE_KEY)
    if found is None:
        raise RuntimeError(
            "the REST routes are served behind the Entrance (bridge.serve.app.build_app)"
        )
    return found


def metadata_url(server: ServerConfig, scope: Scope, suffix: str = "") -> str | None:
    """Where the protected resource metadata is, for a challenge: under `server.public_url`, else
    under the scheme and Host the request came with. None without `server.oauth`."""
    if server.oauth is None:
        return None
    base = server.public_url
    if not base:
        host = Headers(scope=scope).get("host") or "localhost"
        base = f"{scope.get('scheme', 'http')}://{host}"
    return f"{base.rstrip('/')}{METADATA_PATH}{suffix}"


def refusal_headers(
    server: ServerConfig, failure: AuthFailure, scope: Scope, suffix: str = ""
) -> dict[str, str]:
    """`WWW-Authenticate` for a refused request (and `Retry-After` when the issuer is down)."""
    headers = {
        "WWW-Authenticate": challenge(
            error=failure.error,
            description=failure.description,
            metadata_url=metadata_url(server, scope, suffix),
            scopes=list(failure.scopes),
        )
    }
    if failure.status == 503:
        headers["Retry-After"] = "5"
    return headers


def caller_identity(scope: object) -> Identity | None:
    """The identity `identify` accepted for a request with this ASGI scope (None over
    stdio, for a refused request, or with no scope)."""
    found = scope.get(IDENTITY_SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Identity) else None


def caller_facts(found: object) -> tuple[str | None, str | None, str | None]:
    """(caller, subject, client id) of a request's identity for `CallOrigin`: a static token's
    name as caller and client id; an OAuth token's `sub` and client id. Never the token."""
    if not isinstance(found, Identity) or found.via == "open":
        return None, None, None
    caller = found.client_id if found.via == "static" else found.subject or found.client_id
    return caller, found.subject, found.client_id


def resource_metadata_routes(bridge: Bridge) -> list[Route]:
    """`GET /.well-known/oauth-protected-resource` and `…/mcp` (RFC 9728, the form a client
    builds from the `/mcp` resource's path): the same document, 404 without `server.oauth`."""

    async def metadata(request: Request) -> Response:
        oauth = bridge.config.server.oauth
        if oauth is None:
            body = {
                "error": {
                    "error_class": "invalid_arguments",
                    "error_code": "route_not_found",
                    "message": f"no route {request.url.path}: server.oauth is not configured",
                    "recoverability": "change_arguments",
                },
                "status": 404,
            }
            return JSONResponse(body, status_code=404)
        return JSONResponse(resource_metadata(oauth), headers={"Cache-Control": "max-age=300"})

    return [
        Route(METADATA_PATH, metadata, methods=["GET"]),
        Route(f"{METADATA_PATH}/mcp", metadata, methods=["GET"]),
    ]
