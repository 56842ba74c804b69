"""The MCP SDK client members adapters/mcp/sdk.py relies on are where it reads them: an SDK
release that moves one fails here, naming it, instead of every listing or call failing with a
bare AttributeError (or a GET stream given up unnoticed)."""

from __future__ import annotations

import inspect

import mcp.client.streamable_http as streamable_http
import mcp.shared.jsonrpc_dispatcher as dispatcher
from mcp import Client
from mcp.client.session import ClientSession

from adapters.mcp import sdk


def test_the_client_builds_its_session_in_one_overridable_method() -> None:
    assert inspect.iscoroutinefunction(getattr(Client, "_build_session", None)), (
        "mcp SDK: Client._build_session is gone; update adapters/mcp/sdk.BridgeClient"
    )


def test_the_session_stamps_and_dispatches_raw_requests() -> None:
    init = inspect.getsource(ClientSession.__init__)
    assert "self._stamp" in init, (
        "mcp SDK: ClientSession no longer sets `_stamp`; update adapters/mcp/sdk.send_raw"
    )
    assert "self._dispatcher" in init, (
        "mcp SDK: ClientSession no longer sets `_dispatcher`; update adapters/mcp/sdk.send_raw"
    )


def test_the_session_absorbs_a_listing_page() -> None:
    absorb = getattr(ClientSession, "_absorb_tool_listing", None)
    assert absorb is not None, (
        "mcp SDK: ClientSession._absorb_tool_listing is gone; update adapters/mcp/sdk"
    )
    assert "complete" in inspect.signature(absorb).parameters


def test_the_get_stream_task_is_named_as_the_adapter_looks_for_it() -> None:
    assert (
        streamable_http.StreamableHTTPTransport.handle_get_stream.__qualname__
        == sdk.GET_STREAM_TASK
    )
    assert "start_soon(transport.handle_get_stream" in inspect.getsource(streamable_http), (
        "mcp SDK: the GET stream no longer runs as a task of its own; update adapters/mcp/get_stream.py"
    )


def test_the_transport_types_and_timeouts_are_importable() -> None:
    assert sdk.TransportStreams is not None
    assert (
        isinstance(sdk.MCP_DEFAULT_SSE_READ_TIMEOUT, int | float)
        and sdk.MCP_DEFAULT_SSE_READ_TIMEOUT > 0
    )


def test_the_errors_the_sdk_makes_up_for_a_closed_connection_say_what_the_adapter_reads() -> None:
    # read by closed_by_sdk: the SDK's own -32000 errors are a lost connection, a server's its
    # answer
    assert f'message="{sdk.SDK_CLOSED}"' in inspect.getsource(dispatcher), (
        "mcp SDK: the dispatcher's error for a closed connection changed; "
        "update adapters/mcp/sdk.SDK_CLOSED"
    )
    transport = inspect.getsource(streamable_http)
    assert "code: int = CONNECTION_CLOSED" in transport, (
        "mcp SDK: _resolve_abandoned_request changed; update adapters/mcp/sdk"
    )
    for text in sdk.SDK_HTTP_CLOSED:
        assert f'"{text}' in transport or f'f"{text}' in transport, (
            f"mcp SDK: no error made up as {text!r}; update adapters/mcp/sdk.SDK_HTTP_CLOSED"
        )


def test_the_session_routes_a_notification_it_is_handed() -> None:
    """A call sent beside the session (adapters/mcp/lean.py) hands the notifications on its
    stream to the session, which routes them as those it reads itself."""
    on_notify = getattr(ClientSession, "_on_notify", None)
    assert on_notify is not None, (
        "mcp SDK: ClientSession._on_notify is gone; update adapters/mcp/sdk.deliver_notification"
    )
    assert list(inspect.signature(on_notify).parameters) == ["self", "dctx", "method", "params"]
