"""The HTTP plumbing every REST route shares: who the caller is (bearer token -> surface), request
bodies (size limit, JSON with a pointer to the problem), query parameters, the mapping of error
classes to HTTP statuses, and the one structured error body no route ever answers without."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bridge.catalog import Catalog
from bridge.config import ServerConfig
from bridge.documents import RepeatedKey, repeated_key_at, unique_object
from bridge.identity import AuthFailure, Identity
from bridge.model import ToolDeclaration, ToolError, ToolResult
from bridge.runtime import Bridge
from bridge.search import MAX_QUERY_CHARS
from bridge.serve.auth import (
    IDENTITY_SCOPE_KEY,
    caller_facts,
    caller_identity,
    identified,
    refusal_headers,
)
from bridge.store import StoreUnavailable
from bridge.surface import Surface
from bridge.telemetry import CallOrigin, valid_traceparent, valid_tracestate
from bridge.text import quoted
from bridge.translate.wire import TOOL_RESULT_KEY, WireFormatError, json_safe

__all__ = [
    "STATUS_BY_CLASS",
    "ApiError",
    "JSONBody",
    "ServeContext",
    "decimal",
    "endpoint",
    "error_response",
    "not_found",
    "query_bool",
    "query_int",
    "query_list",
    "read_body",
    "replaying",
    "result_error_response",
    "retry_after_headers",
    "status_for",
    "too_large",
    "wire_error",
]

log = logging.getLogger("bridge.serve")

# HTTP status of an error result, by error class: 4xx when the caller can fix the call, 5xx only
# for faults of an upstream or of the bridge that a retry may cure.
STATUS_BY_CLASS: dict[str, int] = {
    "unknown_tool": 404,
    "invalid_arguments": 400,
    "schema_validation_failed": 400,
    "schema_not_loaded": 400,
    "permission_denied": 403,
    "approval_rejected": 403,
    "policy_blocked": 403,
    "hook_blocked": 403,
    "sandbox_violation": 403,
    "credential_missing": 403,
    "setup_required": 403,
    "capability_gap": 409,
    "execution_failed": 422,
    "partial_failure": 422,
    "result_too_large": 422,
    "result_redacted": 422,
    "rate_limited": 429,
    "dependency_unavailable": 503,
    "canceled": 503,
    "sibling_canceled": 503,
    "streaming_fallback_discarded": 503,
    "timeout": 504,
}


def status_for(error: ToolError) -> int:
    if error.error_code == "unknown_version":
        return 404
    return STATUS_BY_CLASS.get(error.error_class, 500)


class JSONBody(Response):
    """Compact JSON; NaN and infinities (which JSON cannot carry) are sent as null."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError):
            text = json.dumps(
                json_safe(content), ensure_ascii=False, separators=(",", ":"), allow_nan=False
            )
        return text.encode()


class ApiError(Exception):
    """A request the bridge answers with an error status and a structured body."""

    def __init__(
        self,
        status: int,
        error_class: str,
        message: str,
        *,
        pointer: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        error_code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_class = error_class
        self.message = message
        self.details = dict(details or {})
        if pointer is not None:
            self.details["pointer"] = pointer
        self.headers = headers or {}
        self.error_code = error_code

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"error_class": self.error_class, "message": self.message}
        if self.error_code:
            error["error_code"] = self.error_code
        # 429 and 5xx: the same request may succeed later
        error["recoverability"] = (
            "retry_later" if self.status >= 500 or self.status == 429 else "change_arguments"
        )
        if self.details:
            error["details"] = self.details
        return {"error": error, "status": self.status}


def error_response(exc: ApiError) -> Response:
    return JSONBody(exc.body(), status_code=exc.status, headers=exc.headers)


def retry_after_headers(error: ToolError) -> dict[str, str]:
    if error.retry_after is None:
        return {}
    return {"Retry-After": str(max(1, math.ceil(error.retry_after)))}


def result_error_response(result: ToolResult, extra: dict[str, Any] | None = None) -> Response:
    """An error result envelope as an HTTP error: status by its class, `Retry-After` when known,
    body `{error, status, x-tool-result}`."""
    assert result.error is not None
    status = status_for(result.error)
    body: dict[str, Any] = {"error": result.error.to_json(), "status": status, **(extra or {})}
    body[TOOL_RESULT_KEY] = result.to_json()
    return JSONBody(body, status_code=status, headers=retry_after_headers(result.error))


def not_found(ref: str, catalog: Catalog) -> ApiError:
    """The one answer for a tool that is missing or outside the caller's surface (naming the
    upstreams still starting, `Catalog.still_starting`)."""
    return ApiError(
        404,
        "unknown_tool",
        f"no tool {quoted(ref)}; search the catalog for the right name{catalog.still_starting(ref)}",
    )


_REST_ORIGIN = CallOrigin("rest")


class ServeContext:
    """What the REST routes share: the bridge, the caller's surface, the sorted listing of each
    surface (rebuilt only when the catalog or the surface changes)."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self._listings: dict[str, tuple[int, Surface, list[ToolDeclaration], list[str]]] = {}

    @property
    def server(self) -> ServerConfig:
        """The server settings now (a reload may change its tokens and default surface)."""
        return self.bridge.config.server

    def identity(self, request: Request) -> Identity | AuthFailure:
        """The request's caller (identified before any route ran), or why it is refused."""
        return identified(request.scope)

    def caller(self, request: Request) -> Surface:
        """The caller's surface; a refused caller gets 401 (no or a bad token), 403 (a scope
        missing) or 503 (the identity provider cannot be read), with the challenge."""
        found = self.identity(request)
        if isinstance(found, AuthFailure):
            error_class = {403: "permission_denied", 503: "dependency_unavailable"}.get(
                found.status, "credential_missing"
            )
            raise ApiError(
                found.status,
                error_class,
                found.description,
                error_code=found.error,
                headers=refusal_headers(self.server, found, request.scope),
            )
        surface = self.bridge.surfaces.get(found.surface)
        if surface is None:
            raise ApiError(
                403, "policy_blocked", f"the token's surface {found.surface!r} is not configured"
            )
        return surface

    def origin(self, request: Request) -> CallOrigin:
        """Who a call comes from (the token's name, the OAuth caller's subject and client id)
        and the caller's trace context."""
        headers = request.headers
        parent = valid_traceparent(headers.get("traceparent"))
        state = valid_tracestate(headers.get("tracestate")) if parent else None
        caller, subject, client_id = caller_facts(request.scope.get(IDENTITY_SCOPE_KEY))
        if parent is None and caller is None:
            return _REST_ORIGIN
        return CallOrigin("rest", caller, parent, state, subject=subject, client_id=client_id)

    async def invoke(
        self,
        request: Request,
        ref: str,
        arguments: Any,
        *,
        surface: Surface,
        version: int | None = None,
    ) -> ToolResult:
        """The pipeline's call for a request whose body was read, cancelled when the client
        closes the connection: the upstream call stops (an MCP cancel, an A2A CancelTask, an
        ATIP process group killed) and its concurrency slot is freed, as over MCP."""
        call = asyncio.ensure_future(
            self.bridge.invoker.invoke(
                ref,
                arguments,
                version=version,
                surface=surface,
                origin=self.origin(request),
                identity=caller_identity(request.scope),
            )
        )
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait([call, gone], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # the server stops and its grace for open requests is over: the call is cancelled
            # (upstream too) and the caller told so, not sent a plain-text 500 with a traceback logged
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            raise ApiError(
                503,
                "dependency_unavailable",
                "the bridge is stopping; the call was cancelled before it ended",
            ) from None
        finally:
            if not call.done():
                call.cancel()
            gone.cancel()
        if not call.done() or call.cancelled():
            with contextlib.suppress(asyncio.CancelledError):
                await call
            raise ApiError(
                400, "canceled", "the client closed the connection; the call was cancelled"
            )
        return call.result()

    def caller_key(self, request: Request) -> str:
        """A stable key for one caller: its token (hashed) and address."""
        token = request.headers.get("authorization") or ""
        host = request.client.host if request.client else ""
        return hashlib.sha256(f"{token}\x1f{host}".encode()).hexdigest()[:24]

    def visible(self, ref: str, surface: Surface) -> ToolDeclaration:
        decl = self.bridge.catalog.resolve(ref)
        if decl is None or not surface.visible(decl):
            raise not_found(ref, self.bridge.catalog)
        return decl

    def callable(self, ref: str, surface: Surface) -> ToolDeclaration:
        """The tool a call names, looked up before its body is read: a name the catalog does not
        hold and a tool a rule of the surface hides are the same 404 (`Surface.resolve`). A tool
        blocked for another reason (`credential_missing`, `requires_user_interaction`, ...) is
        returned: the pipeline refuses it with that reason, as over MCP."""
        decl = surface.resolve(ref)
        if decl is None:
            raise not_found(ref, self.bridge.catalog)
        return decl

    def listing(self, surface: Surface) -> tuple[list[ToolDeclaration], list[str]]:
        """Every tool the surface can see (loaded and deferred) sorted by name, and the names."""
        generation = self.bridge.catalog.generation
        cached = self._listings.get(surface.name)
        if cached is not None and cached[0] == generation and cached[1] is surface:
            return cached[2], cached[3]
        tools = sorted(
            (d for d in self.bridge.catalog.declarations() if surface.visible(d)),
            key=lambda d: d.name,
        )
        names = [d.name for d in tools]
        self._listings[surface.name] = (generation, surface, tools, names)
        return tools, names

    async def read_json(self, request: Request) -> Any:
        """The request body as JSON: 413 over `server.max_body_bytes`, 400 with the line and
        column of a syntax error."""
        limit = self.server.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large(limit)
        raw = await read_body(request.receive, limit)
        if raw is None:
            raise ApiError(
                400,
                "invalid_arguments",
                "the client closed the connection before sending the whole body",
            )
        if not raw.strip():
            raise ApiError(
                400,
                "invalid_arguments",
                "the request body is empty; send a JSON document",
                pointer="",
            )
        return parse_json(raw)


async def read_body(receive: Callable[[], Awaitable[Any]], limit: int) -> bytes | None:
    """A request's whole body, from its ASGI messages (Request.stream() adds an async generator
    a call): 413 once it passes `limit` bytes, None when the client left before sending it
    whole. The server bounds the time it may take (server.body_timeout, `http_protocol.py`):
    past it the client is answered 408, and this hears a disconnect."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            return None
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def replaying(body: bytes, receive: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    """An ASGI `receive` that gives `body`, read already, then what `receive` gives."""
    given = False

    async def replay() -> Any:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


_BIG_NUMBER = re.compile(rb"[0-9][eE][+]?[0-9]{3}|[0-9]{309}")


def _no_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotJson(f"the number {text[:40]} is too large for a 64-bit float")
    return value


class _NotJson(ValueError):
    pass


# made once: json.loads with hooks builds a new decoder at every call
_STRICT = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=unique_object)
_STRICT_FLOATS = json.JSONDecoder(
    parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=unique_object
)


def parse_json(raw: bytes) -> Any:
    """A request body as strict JSON: `NaN`, `Infinity` and numbers beyond a float's range are
    refused (Python's json module would accept them and hand the upstream a value JSON cannot
    carry), as are integers of more digits than Python converts and a key given twice in one
    object (the reader would keep the last silently; the pointer names the object)."""
    # only a number with a three-digit exponent or over 308 digits can overflow a float: other
    # bodies keep the C float parser instead of a Python call per number
    big = _BIG_NUMBER.search(raw) is not None
    text = ""
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads does
        return (_STRICT_FLOATS if big else _STRICT).decode(text)
    except RepeatedKey as exc:
        pointer, key = repeated_key_at(text) or ("", exc.key)
        raise ApiError(
            400,
            "invalid_arguments",
            f"the request body gives the key {key!r} twice in one object; give each key once",
            pointer=pointer,
            details={"key": key},
            error_code="repeated_key",
        ) from None
    except UnicodeDecodeError:
        raise ApiError(
            400, "invalid_arguments", "the request body is not UTF-8 text", pointer=""
        ) from None
    except RecursionError:  # about a thousand levels of arrays or objects: a 2 KB body
        raise ApiError(
            400,
            "invalid_arguments",
            "the request body nests too deep to read; send flatter JSON",
            pointer="",
        ) from None
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            "invalid_arguments",
            f"the request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            pointer="",
            details={"line": exc.lineno, "column": exc.colno, "position": exc.pos},
        ) from None
    except ValueError as exc:  # _NotJson, or an integer over the interpreter's digit limit
        raise ApiError(
            400, "invalid_arguments", f"the request body is not valid JSON: {exc}", pointer=""
        ) from None


def too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        "invalid_arguments",
        f"the request body is larger than {limit} bytes (server.max_body_bytes)",
        details={"max_body_bytes": limit},
    )


def wire_error(exc: WireFormatError) -> ApiError:
    return ApiError(400, "invalid_arguments", exc.message, pointer=exc.pointer)


Handler = Callable[[Request], Awaitable[Response]]


def endpoint(handler: Handler) -> Handler:
    """Every route goes through this: an ApiError becomes its structured body, a malformed wire
    document a 400 with its pointer, and anything unexpected a structured 500, never a traceback."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return error_response(exc)
        except WireFormatError as exc:
            return error_response(wire_error(exc))
        except StoreUnavailable as exc:  # a read of the store while its database is away
            error = exc.to_error()
            return error_response(
                ApiError(
                    status_for(error),
                    error.error_class,
                    exc.message,
                    error_code=exc.error_code,
                    headers=retry_after_headers(error),
                )
            )
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(
                ApiError(
                    500,
                    "execution_failed",
                    "the bridge failed to answer this request; it was logged",
                )
            )

    return wrapped


def query_int(
    request: Request,
    name: str,
    default: int,
    *,
    minimum: int,
    maximum: int | None = None,
    clamp: bool = False,
) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    digits = raw[1:] if raw.startswith("-") else raw
    try:
        # ASCII digits only: int() also reads `1_0`, ` 2 `, `+4` and other scripts' digits
        value = int(raw) if digits.isascii() and digits.isdigit() else None
    except ValueError:  # more digits than int() reads
        value = None
    if value is None:
        raise ApiError(
            400,
            "invalid_arguments",
            f"query parameter {name!r} must be an integer",
            details={"parameter": name},
        )
    if value < minimum:
        raise ApiError(
            400,
            "invalid_arguments",
            f"query parameter {name!r} must be at least {minimum}",
            details={"parameter": name},
        )
    if maximum is not None and value > maximum:
        if clamp:
            return maximum
        raise ApiError(
            400,
            "invalid_arguments",
            f"query parameter {name!r} must be at most {maximum}",
            details={"parameter": name},
        )
    return value


def search_query(request: Request) -> str:
    """The `q` of a search (empty when not given), refused when longer than tool search takes."""
    query = request.query_params.get("q") or ""
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(
            400,
            "invalid_arguments",
            f"query parameter 'q' is {len(query)} characters long; at most "
            f"{MAX_QUERY_CHARS} are taken: send the request itself, or the last turns of a conversation",
            details={"parameter": "q"},
        )
    return query


def decimal(text: str | None) -> int | None:
    """`text` as a non-negative integer when it is 1 to 19 ASCII digits (an SQLite INTEGER's
    width), else None. str.isdigit() alone also passes digits such as '²', which int() refuses."""
    if text is None or not (0 < len(text) <= 19 and text.isascii() and text.isdigit()):
        return None
    return int(text)


def query_list(request: Request, *names: str) -> list[str]:
    """Values of repeated and comma-separated query parameters (`tags=a,b&tag=c`)."""
    out: list[str] = []
    for name in names:
        for raw in request.query_params.getlist(name):
            out.extend(v.strip() for v in raw.split(",") if v.strip())
    return list(dict.fromkeys(out))


def query_bool(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ApiError(
        400,
        "invalid_arguments",
        f"query parameter {name!r} must be true or false",
        details={"parameter": name},
    )


async def _disconnected(request: Request) -> None:
    """Returns when the client has closed the connection (its body already read: the next ASGI
    message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
