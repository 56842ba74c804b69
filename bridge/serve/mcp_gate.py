"""The HTTP gate of the `/mcp` endpoint: the caller (a static token or an OAuth access token)
whose identity picks a request's surface and under whom its sessions are counted, the check of a
POST's body (one JSON-RPC message, each key of its objects given once), and the SDK's
DNS-rebinding protection (the Host and Origin a request may name)."""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_REQUEST, PARSE_ERROR
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge.config import ServerConfig
from bridge.documents import RepeatedKey, repeated_key_at, unique_object
from bridge.identity import AuthFailure, Identity
from bridge.runtime import Bridge
from bridge.serve.auth import authorization, identify, refusal_headers
from bridge.serve.rest_http import ApiError, error_response, read_body, replaying

__all__ = [
    "CALLER_SURFACE",
    "CLIENT_SCOPE_KEY",
    "MESSAGE_SCOPE_KEY",
    "METHOD_SCOPE_KEY",
    "SURFACE_SCOPE_KEY",
    "MCPAuthGate",
    "send_jsonrpc_error",
    "transport_security_for",
]

log = logging.getLogger("bridge.serve.mcp")

SURFACE_SCOPE_KEY = "a2t_bridge.surface"
# The same, for what the SDK asks before dispatch with a tool's name alone (the schema it checks
# a 2026-07-28 call's Mcp-Param headers against): set in the request's task.
CALLER_SURFACE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "a2t_bridge_caller_surface", default=None
)
# Where the gate leaves, in the scope, the key the caller's sessions are counted under (its static
# token, its OAuth subject, else its address) and the JSON-RPC method of a POST: for the session
# caps (`mcp_quota.py`).
CLIENT_SCOPE_KEY = "a2t_bridge.client"
METHOD_SCOPE_KEY = "a2t_bridge.method"
# The JSON-RPC message of a POST as the gate read it, for the lean `tools/call` path
# (`mcp_lean.py`), which so reads no body twice.
MESSAGE_SCOPE_KEY = "a2t_bridge.message"


class MCPAuthGate:
    """ASGI wrapper of the `/mcp` endpoint: static bearer tokens from `server.tokens`, each bound
    to a surface, and OAuth access tokens of `server.oauth`, whose claims pick it (with neither
    configured, everyone gets `server.default_surface`). A refused request gets 401 (403 for a
    missing scope, 503 while the identity provider cannot be read) with a JSON body saying why and
    a challenge naming the resource metadata. An accepted one carries its surface in the scope
    and, as the SDK's authenticated user, its principal (a digest of a static token; an OAuth
    caller's issuer, subject and client id), so a handshake-era session stays bound to it.

    A POST's body is read whole here and let on only when it is one JSON-RPC message whose
    objects give each key once; anything else is answered HTTP 400 with a JSON-RPC error of one
    sentence: `-32700` for a body that is not JSON, `-32600` for JSON that is no JSON-RPC message
    (a batch, a bare value, an object without `"jsonrpc": "2.0"` and a method) or that gives a key
    twice in one object (`data.pointer` names the object, `data.key` the key)."""

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
            try:
                message = _message_of(whole)
            except _Refused as refused:
                await send_jsonrpc_error(send, 400, refused.code, refused.message, refused.data)
                return
            scope[MESSAGE_SCOPE_KEY] = message
            scope[METHOD_SCOPE_KEY] = message.get("method")
            receive = replaying(whole, receive)
        scope[SURFACE_SCOPE_KEY] = caller.surface
        CALLER_SURFACE.set(caller.surface)  # this request's task and those it starts
        user = None
        if caller.via != "open":  # an open caller is no principal
            user = _principal(caller, authorization(scope) if caller.via == "static" else None)
            if user is not None:
                scope["user"] = user
        scope[CLIENT_SCOPE_KEY] = _client_key(caller, user, scope)
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
        return AuthenticatedUser(
            AccessToken(
                token=f"sha256:{digest}",
                client_id=f"token:{digest}",
                scopes=[f"surface:{caller.surface}"],
            )
        )
    if caller.via in ("jwt", "introspection"):
        return AuthenticatedUser(
            AccessToken(
                token=f"oauth:{caller.via}",
                client_id=caller.client_id or "",
                scopes=sorted(caller.scopes),
                subject=caller.subject,
                claims={"iss": caller.issuer},
            )
        )
    return None


def _client_key(caller: Identity, user: AuthenticatedUser | None, scope: Scope) -> str:
    """Whom a request's sessions count against: its static token (by digest), its OAuth issuer
    and subject (else client id), or, with neither configured, its address."""
    if user is not None and caller.via == "static":
        return f"token sha256:{user.access_token.client_id.removeprefix('token:')[:12]}"
    if user is not None:
        return f"oauth {caller.issuer} {caller.subject or caller.client_id}"
    client = scope.get("client")
    return f"address {client[0] if client else 'unknown'}"


async def send_jsonrpc_error(
    send: Send,
    status: int,
    code: int,
    message: str,
    data: dict[str, Any] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """A JSON-RPC error without a request id, as the SDK answers what its transport refuses."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = data
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}, ensure_ascii=False).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


class _Refused(Exception):
    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


# JSON's reader as the SDK's accepts it (NaN and infinities pass, for the pipeline to refuse with
# the argument's place), but refusing a key given twice, which the SDK would take the last of
_READER = json.JSONDecoder(object_pairs_hook=unique_object)


def _message_of(body: bytes) -> dict[str, Any]:
    """The one JSON-RPC message `body` holds (a request, a notification or a response);
    _Refused when it holds none."""
    text = ""
    try:
        text = body.decode()
        message = _READER.decode(text)
    except RepeatedKey as exc:
        pointer, key = repeated_key_at(text) or ("", exc.key)
        raise _Refused(
            INVALID_REQUEST,
            f"the request body gives the key {key!r} twice in one object; give each key once",
            {"pointer": pointer, "key": key},
        ) from None
    except UnicodeDecodeError:
        raise _Refused(PARSE_ERROR, "the request body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _Refused(
            PARSE_ERROR,
            f"the request body is not valid JSON: {exc.msg} at line "
            f"{exc.lineno} column {exc.colno}",
            {"line": exc.lineno, "column": exc.colno},
        ) from None
    except RecursionError:
        raise _Refused(PARSE_ERROR, "the request body nests too deep to read") from None
    except ValueError as exc:  # an integer of more digits than the interpreter converts
        raise _Refused(PARSE_ERROR, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        what = (
            "an array (a batch, which MCP does not take)"
            if isinstance(message, list)
            else f"a bare {_json_type(message)}"
        )
        raise _Refused(
            INVALID_REQUEST,
            f"the request body is {what}; send one JSON-RPC message, an object, per request",
        )
    method = message.get("method")
    response = "id" in message and ("result" in message or "error" in message)
    if message.get("jsonrpc") != "2.0" or not (isinstance(method, str) or response):
        raise _Refused(
            INVALID_REQUEST,
            'the request body is no JSON-RPC 2.0 message: it needs "jsonrpc": "2.0" and a "method"',
        )
    return message


def _json_type(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def transport_security_for(host: str, public_url: str | None = None) -> TransportSecuritySettings:
    """DNS-rebinding protection (the SDK's Host and Origin checks), always on: loopback names,
    the bound host when it is a name or a specific address, and the public URL's host."""
    hosts, origins = list(_LOOPBACK_HOSTS), list(_LOOPBACK_ORIGINS)
    wildcard = host in ("", "0.0.0.0", "::", "[::]")
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if (
        not wildcard and f"{name}:*" not in hosts
    ):  # another loopback address (127.0.0.2) too: clients name it
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
            "address clients use",
            host or "all interfaces",
        )
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
