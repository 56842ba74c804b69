"""The MCP frontend's calls of catalog tools through the invocation pipeline: each call run in its
handler's task (the client's cancellation cancels it, and with it the pipeline and the upstream
call), rendered as the `tools/call` result the client was listed for, and answered
`dependency_unavailable` when a stopping server's grace ends while it runs."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext

from bridge.envelopes import error_result
from bridge.identity import Identity
from bridge.model import BridgeError, ToolDeclaration, ToolResult, new_id
from bridge.runtime import Bridge
from bridge.serve.mcp_connect import connected
from bridge.translate.mcp_results import render_result

__all__ = ["Calls"]

log = logging.getLogger("bridge.serve.mcp")

# how a call's result is rendered: (result, protocol version, output schema) -> the answer
Render = Callable[[ToolResult, str | None, dict[str, Any] | None], Any]


class Calls:
    """The calls of one frontend: `running` holds the tasks of the calls in the pipeline."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.running: set[asyncio.Task[Any]] = set()
        self._stop_cancelled: set[asyncio.Task[Any]] = set()  # cancelled as the server stops

    def cancel_running(self) -> None:
        """A stopping server's grace is about to end: cancel the calls still running; each is
        answered `dependency_unavailable`."""
        for handler in list(self.running):
            self._stop_cancelled.add(handler)
            handler.cancel()

    async def run(
        self,
        ctx: ServerRequestContext[Any, Any],
        ref: str,
        arguments: dict[str, Any],
        output_schema: dict[str, Any] | None,
        options: dict[str, Any],
        identity: Identity | None,
        render: Render = render_result,
    ) -> Any:
        """The call of `ref` through the pipeline (with its `options` and the caller's
        `identity`), rendered by `render` for a client that was listed `output_schema`: a
        `CallToolResult`, or what another `render` makes of the result it ends with."""
        handler = asyncio.current_task()
        assert handler is not None
        self.running.add(handler)
        try:
            result = await self.bridge.invoker.invoke(ref, arguments, identity=identity, **options)
            error = result.error
            if error is not None and error.error_code == "account_not_connected":
                result = await connected(
                    ctx, self.bridge, ref, arguments, options, identity, result
                )
        except asyncio.CancelledError:
            if handler not in self._stop_cancelled:
                raise
            handler.uncancel()
            stopping = BridgeError(
                "the bridge is stopping; the call was cancelled before it ended",
                error_class="dependency_unavailable",
                recoverability="retry_later",
            )
            return render_result(
                error_result(stopping, invocation_id=new_id("inv")),
                ctx.protocol_version,
                output_schema,
            )
        finally:
            self.running.discard(handler)
            self._stop_cancelled.discard(handler)
        if (
            output_schema is not None
            and result.persisted is not None
            and result.structured_content is None
        ):
            # a tool listed with an outputSchema must answer structured content (clients check):
            # a result kept in the store sends its structured content whole, its text as the preview
            ref = str(result.persisted.persisted_ref.get("ref"))
            stored = self.bridge.invoker.get_persisted(ref, options["surface"], away_as_none=True)
            if stored is not None:
                result = result.model_copy(
                    update={"structured_content": json.loads(stored[1]).get("structured_content")}
                )
        return render(result, ctx.protocol_version, output_schema)

    def failed(
        self,
        exc: Exception,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        decl: ToolDeclaration | None,
        output_schema: dict[str, Any] | None,
    ) -> types.CallToolResult:
        """The result of a call of `name` that raised `exc`: a bridge error's envelope, else
        the bridge's own failure (logged)."""
        if not isinstance(exc, BridgeError):
            log.exception("tools/call %s failed", name, exc_info=exc)
            exc = BridgeError(
                "the bridge failed to handle this call; it was logged",
                error_class="execution_failed",
            )
        envelope = error_result(exc, invocation_id=new_id("inv"), decl=decl)
        return render_result(envelope, ctx.protocol_version, output_schema)
