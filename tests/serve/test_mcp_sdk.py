"""The MCP SDK server members bridge/serve/mcp_sdk.py relies on are where it reads them: an SDK
release that moves one fails here, naming it, instead of the frontend silently losing session
state or leaving streams open at shutdown."""

from __future__ import annotations

import inspect

from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


def test_the_session_proxy_keeps_its_connection() -> None:
    assert "self._connection" in inspect.getsource(ServerSession), (
        "mcp SDK: ServerSession no longer keeps `_connection`; update bridge/serve/mcp_sdk.session_connection"
    )


def test_the_session_manager_keeps_its_transports_by_session_id() -> None:
    assert "self._server_instances" in inspect.getsource(StreamableHTTPSessionManager.__init__), (
        "mcp SDK: StreamableHTTPSessionManager no longer keeps `_server_instances`; "
        "update bridge/serve/mcp_sdk.open_transports"
    )


def test_the_session_manager_keeps_what_a_session_is_taken_up_with() -> None:
    """A session opened by another replica is registered, owned, run and discarded as the
    manager's own (bridge/serve/mcp_sdk.adopt_session)."""
    init = inspect.getsource(StreamableHTTPSessionManager.__init__)
    run = inspect.getsource(StreamableHTTPSessionManager.run)
    for member, where in (
        ("self._session_owners", init),
        ("self._task_group", run),
        ("self._lifespan_state", run),
    ):
        assert member in where, (
            f"mcp SDK: StreamableHTTPSessionManager no longer keeps `{member[5:]}`; "
            "update bridge/serve/mcp_sdk.adopt_session"
        )
    assert hasattr(StreamableHTTPSessionManager, "_discard_session"), (
        "mcp SDK: StreamableHTTPSessionManager no longer has `_discard_session`; "
        "update bridge/serve/mcp_sdk.adopt_session and end_session"
    )


def test_a_transport_counts_its_requests_in_flight_and_a_runner_shapes_results() -> None:
    """The lean path of tools/call (bridge/serve/mcp_lean.py) counts its requests as the
    transport's own and shapes its results as the server runner does."""
    from mcp.server.runner import ServerRunner
    from mcp.server.streamable_http import StreamableHTTPServerTransport

    init = inspect.getsource(StreamableHTTPServerTransport.__init__)
    handle = inspect.getsource(StreamableHTTPServerTransport.handle_request)
    for member in ("self._requests_in_flight", "self._idle_timeout", "self.idle_scope"):
        assert member in init and member in handle, (
            f"mcp SDK: StreamableHTTPServerTransport no longer keeps `{member[5:]}`; "
            "update bridge/serve/mcp_sdk.RequestInFlight"
        )
    assert list(inspect.signature(ServerRunner._serialize).parameters) == [
        "self",
        "method",
        "version",
        "result",
    ], "mcp SDK: ServerRunner._serialize changed; update bridge/serve/mcp_sdk.result_shaper"
    serializing = inspect.getsource(ServerRunner._serialize)
    assert "self.server.cache_hints" in serializing, (
        "mcp SDK: ServerRunner no longer reads `server.cache_hints` when it shapes a result; "
        "update bridge/serve/mcp_sdk._Shaping"
    )
    stamping = inspect.getsource(ServerRunner._stamp_server_info)
    assert "self.server.server_info_stamp" in stamping, (
        "mcp SDK: ServerRunner no longer stamps results with `server.server_info_stamp`; "
        "update bridge/serve/mcp_sdk._Shaping"
    )
