"""What the MCP frontend takes from the MCP SDK's server beyond its public API, in one place: the
connection behind a request's session proxy (what lives as long as a client's session), the
session manager's table of open streamable HTTP transports and of their owners, and the manager's
members a session opened by another replica is taken up with (its task group, lifespan state,
owners and discard); for the lean `tools/call` path (`mcp_lean.py`), a transport's count of
requests in flight and idle countdown, and the server runner's shaping of a result for the wire.
tests/serve/test_mcp_sdk.py fails, naming the member, when an SDK release moves one of them."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner, serve_connection
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import InitializeRequestParams

__all__ = [
    "RequestInFlight",
    "adopt_session",
    "end_session",
    "held_session",
    "open_transports",
    "result_shaper",
    "session_connection",
    "session_owner",
]

log = logging.getLogger("bridge.serve.mcp")


def session_connection(session: Any) -> Any:
    """The connection behind the per-request session proxy the SDK hands a handler."""
    return session._connection


def open_transports(manager: Any) -> list[Any]:
    """The streamable HTTP transports a session manager holds open (one per session)."""
    return list(manager._server_instances.values())


def held_session(manager: Any, session_id: str) -> Any:
    """The transport of a session the manager holds, or None."""
    return manager._server_instances.get(session_id)


def session_owner(manager: Any, session_id: str) -> Any:
    """The authorization context of the credential that opened a session (None without one)."""
    return manager._session_owners.get(session_id)


class RequestInFlight:
    """`with RequestInFlight(transport) as open_:` counts a request served beside the transport
    as one in flight on its session, as the transport's own `handle_request` does: the session's
    idle countdown stops meanwhile and starts again when its last request ends. `open_` is False
    (and nothing is counted) when the idle period already ran out and the session is ending."""

    __slots__ = ("_scope", "_timeout", "_transport")

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._scope: Any = None  # the idle countdown's scope, once the request is counted
        self._timeout = 0.0

    def __enter__(self) -> bool:
        transport = self._transport
        scope, timeout = transport.idle_scope, transport._idle_timeout
        if scope is None or timeout is None:
            return not transport.is_terminated
        if scope.cancel_called or transport.is_terminated:
            return False
        transport._requests_in_flight += 1
        scope.deadline = math.inf
        self._scope, self._timeout = scope, timeout
        return True

    def __exit__(self, *exc: object) -> None:
        scope = self._scope
        if scope is not None:
            transport = self._transport
            transport._requests_in_flight -= 1
            if not transport._requests_in_flight:
                scope.deadline = anyio.current_time() + self._timeout


def result_shaper(server: Any) -> Callable[[str, str, Any], dict[str, Any]]:
    """`shape(method, protocol_version, result)`: a handler's result as the SDK's server puts it
    on the wire (dumped, sieved by the protocol version's surface, stamped with `serverInfo` on
    2026-07-28)."""
    shaping: Any = _Shaping(server)
    runner = ServerRunner(shaping, None, None)  # type: ignore[arg-type]  # shaping reads neither
    return runner._serialize


class _Shaping:
    """The server as the runner's shaping reads it: its cache hints (the server's own table)
    and its `serverInfo` stamp, dumped once. The SDK deep-copies the stamp into each result, for
    a handler that keeps and changes the result it returned; a shaped result of the lean path is
    written out at once and never changed, so each holds the one stamp. Both are plain
    attributes, as the runner reads them for each result."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self.cache_hints = server.cache_hints
        self.server_info_stamp: dict[str, Any] = server.server_info_stamp

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


async def end_session(manager: Any, session_id: str) -> None:
    """End a session the manager holds (its streams close), as its client's DELETE would."""
    transport = manager._server_instances.get(session_id)
    if transport is not None:
        await manager._discard_session(session_id, transport)


async def adopt_session(
    manager: Any,
    session_id: str,
    user: Any,
    protocol_version: str,
    client_params: dict[str, Any],
    adopted: Callable[[Connection], object],
) -> None:
    """Hold a session opened by another server (a replica) as if its `initialize` had been
    answered here: a transport with its id, owned by `user`'s principal, and a connection that
    starts initialized with the protocol version and client parameters it negotiated. The
    connection is handed to `adopted` before the first request reaches it. It ends as a session
    of the manager's own does: by DELETE, by its idle timeout, or with the manager."""
    transport = StreamableHTTPServerTransport(
        mcp_session_id=session_id,
        is_json_response_enabled=manager.json_response,
        event_store=manager.event_store,
        security_settings=manager.security_settings,
        retry_interval=manager.retry_interval,
        idle_timeout=manager.session_idle_timeout,
    )
    if isinstance(user, AuthenticatedUser):
        manager._session_owners[session_id] = authorization_context(user)
    manager._server_instances[session_id] = transport
    params = InitializeRequestParams.model_validate(client_params, by_name=False)

    async def run_server(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with transport.connect() as (read_stream, write_stream):
            dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                read_stream, write_stream, inline_methods=frozenset({"initialize"})
            )
            connection = Connection.for_loop(dispatcher, session_id=session_id)
            connection.client_params = params
            connection.protocol_version = protocol_version
            connection.initialized.set()
            adopted(connection)
            task_status.started()
            try:
                with transport.idle_scope or anyio.CancelScope():
                    await serve_connection(
                        manager.app,
                        dispatcher,
                        connection=connection,
                        lifespan_state=manager._lifespan_state,
                    )
            except Exception:
                log.exception("MCP session %s… crashed", session_id[:8])
            finally:
                await manager._discard_session(session_id, transport)

    try:
        await manager._task_group.start(run_server)
    except BaseException:
        await manager._discard_session(session_id, transport)
        raise
