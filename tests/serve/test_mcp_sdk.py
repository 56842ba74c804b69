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
