"""What the MCP frontend takes from the MCP SDK's server beyond its public API, in one place: the
connection behind a request's session proxy (what lives as long as a client's session), and the
session manager's table of open streamable HTTP transports. tests/serve/test_mcp_sdk.py fails,
naming the member, when an SDK release moves one of them."""

from __future__ import annotations

from typing import Any

__all__ = ["open_transports", "session_connection"]


def session_connection(session: Any) -> Any:
    """The connection behind the per-request session proxy the SDK hands a handler."""
    return session._connection


def open_transports(manager: Any) -> list[Any]:
    """The streamable HTTP transports a session manager holds open (one per session)."""
    return list(manager._server_instances.values())
