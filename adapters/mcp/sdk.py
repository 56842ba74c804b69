"""What the MCP adapter takes from the MCP SDK's client beyond its public API, in one place:
the client that refuses the server requests the bridge does not serve, requests sent and their
results read as they came (through the session's `_stamp` and `_dispatcher`), a listing's
bookkeeping (`_absorb_tool_listing`), a request's stamp (`_stamp`) and a notification's delivery
(`_on_notify`) for requests sent beside the session, the transport streams type and the SSE read timeout, and
the name the SDK gives its GET stream task, and the messages of the errors it makes up for a
closed connection. tests/adapters/test_mcp_sdk.py fails, naming the member, when an SDK release
moves one of them."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from importlib import metadata
from typing import Any

import mcp.types as types
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.exceptions import MCPError

__all__ = [
    "GET_STREAM_TASK",
    "MCP_DEFAULT_SSE_READ_TIMEOUT",
    "SDK_CLOSED",
    "SDK_HTTP_CLOSED",
    "BridgeClient",
    "TransportStreams",
    "absorb_tool_listing",
    "client_info",
    "closed_by_sdk",
    "deliver_notification",
    "send_raw",
    "session_stamp",
]

# The name the SDK gives the task that holds a streamable HTTP session's GET stream.
GET_STREAM_TASK = "StreamableHTTPTransport.handle_get_stream"


# The messages of the -32000 errors the SDK makes up, which no server sent: its dispatcher's for a
# request the connection closed under (mcp.shared.jsonrpc_dispatcher), and over streamable HTTP its
# transport's for an answer whose stream ended (`_resolve_abandoned_request`).
SDK_CLOSED = "Connection closed"
SDK_HTTP_CLOSED = (
    "SSE stream failed: ",
    "SSE stream ended ",
    "server answered a request with 202 Accepted",
)


def closed_by_sdk(exc: MCPError, *, http: bool) -> bool:
    """Whether the SDK made `exc` up for a request the connection closed under (on an HTTP
    session with `http`). A server's own error of the same code is its answer, the session
    alive: -32000 opens JSON-RPC's range of server errors, and servers use it for plain
    failures."""
    if exc.code != types.CONNECTION_CLOSED or exc.data is not None:
        return False
    return exc.message == SDK_CLOSED or (http and exc.message.startswith(SDK_HTTP_CLOSED))


def absorb_tool_listing(
    client: Client, listing: types.ListToolsResult, *, complete: bool
) -> list[types.Tool]:
    """What the session derives from a listing page, kept as the SDK's `Client.list_tools` keeps
    it (the same private call): output schemas to check results against, and on 2026-07-28 the
    x-mcp-header maps (dropping the tools whose maps are invalid, as required). The tools kept."""
    return client.session._absorb_tool_listing(listing, complete=complete).tools


def client_info() -> types.Implementation:
    try:
        version = metadata.version("a2t-bridge")
    except metadata.PackageNotFoundError:
        version = "0"
    return types.Implementation(name="a2t-bridge", version=version)


# What the bridge answers a server that asks it, as a client, for what it does not declare: the MCP
# spec has a client without the roots capability answer -32601 (method not found); the SDK's
# default is -32600 (invalid request). Sampling and elicitation go to the callbacks the client is
# given (adapters/mcp/asking.py), which refuse them alike when no caller can answer.
_REFUSALS: dict[type[Any], tuple[int, str]] = {
    types.ListRootsRequest: (types.METHOD_NOT_FOUND, "List roots not supported"),
}


class BridgeClient(Client):
    """The SDK's client, but a server asking for `roots/list` gets the error the MCP spec asks of a
    client without the capability (`_REFUSALS`), and `on_refused(method)` is called. The bridge
    does not declare it (the bridge has no roots of its own), and the SDK would declare each one a
    callback is given for, so the session's dispatch answers the request before the callback table
    is looked at."""

    def __init__(self, *args: Any, on_refused: Callable[[str], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_refused = on_refused

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        session = await super()._build_session(exit_stack)
        dispatch = session.dispatch_input_request

        async def refused(
            ctx: ClientRequestContext, request: types.InputRequest
        ) -> types.InputResponse | types.ErrorData:
            refusal = _REFUSALS.get(type(request))
            if refusal is None:
                return await dispatch(ctx, request)
            code, message = refusal
            self.on_refused(request.method)
            return types.ErrorData(code=code, message=message, data=request.method)

        session.dispatch_input_request = refused  # type: ignore[method-assign]
        return session


def session_stamp(client: Client) -> Callable[[dict[str, Any], Any], None]:
    """The session's stamp of a request (`stamp(data, opts)`): the era's `_meta` and headers,
    as `ClientSession.send_request` adds them."""
    return client.session._stamp


async def deliver_notification(client: Client, method: str, params: dict[str, Any] | None) -> None:
    """Hand a server's notification to the session's handlers (its logging callback and message
    handler), as the session does with one read from its transport."""
    await client.session._on_notify(None, method, params)  # type: ignore[arg-type]


async def send_raw(
    client: Client,
    request: types.ListToolsRequest | types.CallToolRequest,
    progress_callback: ProgressFnT | None = None,
    trace: dict[str, str] | None = None,
    authorization: str | None = None,
) -> dict[str, Any]:
    """Send `request` on the client's session as `ClientSession.send_request` does (the era's
    `_meta` and headers stamped; progress, timeout and cancellation wired by the dispatcher)
    and return its result as it came. send_request checks a result whole, so one part the
    SDK's types reject (one tool, one content block of a newer type) would throw the rest
    away; the callers check the pieces instead. The SDK's own `subscriptions/listen` sends the
    same way, through the same two private members of the session. `trace`, the W3C trace
    context, goes in `params._meta` (as MCP reserves those keys for it) and, over HTTP, in the
    request's headers too; `authorization`, the caller's own credential, in its headers only."""
    session = client.session
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: CallOptions = {}
    session._stamp(data, opts)
    if trace:
        data.setdefault("params", {}).setdefault("_meta", {}).update(trace)
        opts.setdefault("headers", {}).update(trace)
    if authorization is not None:
        opts.setdefault("headers", {})["Authorization"] = authorization
    if client.read_timeout_seconds is not None:
        opts["timeout"] = client.read_timeout_seconds
    if progress_callback is not None:
        opts["on_progress"] = progress_callback
    raw = await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts)
    ttl = raw.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
        raw["ttlMs"] = 0  # the SDK floors a negative cache hint too (2026-07-28 caching SHOULD)
    return raw
