"""An MCP upstream's calls: `tools/call` with progress and cancellation forwarded (and sent once
more, after a re-listing, when a 2026-07-28 server finds the tool's listed schema stale),
`resources/read`, each result checked piece by piece with the SDK's types (a content block of a
type the SDK does not know kept as it came), and a failed request read as a BridgeError of the
right class."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from adapters.mcp.config import MCPConfig
from adapters.mcp.http import RESUMED_TOO_OFTEN, answer_too_large
from adapters.mcp.listing import check_result
from adapters.mcp.result_head import checked_head
from adapters.mcp.sdk import (
    MCP_DEFAULT_SSE_READ_TIMEOUT,
    closed_by_sdk,
    deliver_notification,
    send_raw,
    session_stamp,
)
from adapters.mcp.stdio import UNREADABLE, StdioChild
from bridge.masking import masked
from bridge.model import BridgeError, UpstreamResult, UpstreamTool, validation_line
from bridge.translate.mcp import plain_text, progress_from_mcp, result_from_mcp
from bridge.upstream import CALLER_ASKS, CallContext

if TYPE_CHECKING:  # both load with the first HTTP upstream: they are aiohttp's
    from adapters.mcp.lean import LeanCall
    from adapters.mcp.wire import AiohttpTransport

__all__ = ["ToolCalls"]

log = logging.getLogger("bridge.adapters.mcp")

_RESOURCE_NOT_FOUND = -32002  # resources/read of an unknown URI, before 2026-07-28


class ToolCalls:
    """The calls side of `MCPUpstream` (a mixin: the upstream holds the session). `lean` may be
    turned off, sending every call through the SDK's session; `lean_calls` counts those sent
    beside it (adapters/mcp/lean.py)."""

    lean: bool = True
    lean_calls: int = 0
    _lean_key: tuple[Any, ...] = ()
    _lean_sender: LeanCall | None = None

    name: str
    config: MCPConfig
    protocol_version: str | None
    _client: Client | None
    _wake: asyncio.Event
    _certificate: str | None
    _lost_reason: str | None
    _child: StdioChild | None
    _http: httpx2.AsyncClient | None
    _wire: AiohttpTransport | None
    _http_session: dict[str, str]
    if TYPE_CHECKING:  # ServerRequests' own, after this mixin in MCPUpstream's bases

        def _asking(self) -> AbstractContextManager[None]: ...

        async def _answered(self, raw: dict[str, Any], resend: Any) -> dict[str, Any]: ...

    def _session(self) -> Client:
        raise NotImplementedError

    async def list_tools(self) -> list[UpstreamTool]:
        raise NotImplementedError

    def _tools_changed(self, reason: str) -> None:
        raise NotImplementedError

    def _on_refused(self, method: str) -> None:
        raise NotImplementedError

    def _failure_text(self, exc: BaseException | None, *, connecting: bool) -> str:
        raise NotImplementedError

    def _session_answered(self, status: int) -> None:
        raise NotImplementedError

    def _on_http_error(self, exc: Exception) -> None:
        raise NotImplementedError

    async def _settled(self, exc: BaseException, what: str) -> BridgeError:
        raise NotImplementedError

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        client = self._session()

        async def forward_progress(
            progress: float, total: float | None, message: str | None
        ) -> None:
            await ctx.report_progress(**progress_from_mcp(progress, total, message))

        progress = forward_progress if ctx.progress_sink is not None else None
        lean = self._lean_call(client)

        async def send(**more: Any) -> dict[str, Any]:
            """Send the call (with `more` of its params, by their wire names, when not None)."""
            params = {"name": native_id, "arguments": arguments}
            params.update((key, value) for key, value in more.items() if value is not None)
            if lean is not None:
                return await self._lean_send(lean, params, progress, ctx)
            request = types.CallToolRequest(
                params=types.CallToolRequestParams.model_validate(params, by_name=False)
            )
            return await send_raw(client, request, progress, ctx.trace_headers(), ctx.authorization)

        # Cancelling this coroutine (the pipeline's timeout, or the caller going away) makes the
        # SDK send notifications/cancelled for the request (or abort its POST on 2026-07-28 HTTP).
        async def resend(answers: dict[str, Any], state: str | None) -> Any:
            return await send(inputResponses=answers, requestState=state)

        try:
            try:
                if lean is not None:  # as `send` sends it, one coroutine fewer; never asks
                    params = {"name": native_id, "arguments": arguments}
                    raw = await self._lean_send(lean, params, progress, ctx)
                    if raw.get("resultType") == "input_required":
                        raw = await self._answered(raw, resend)
                else:
                    with self._asking():  # the caller answers the server's questions, if it can
                        raw = await send()
                        if raw.get("resultType") == "input_required":
                            raw = await self._answered(raw, resend)
            except MCPError as exc:
                if (
                    exc.code != types.HEADER_MISMATCH
                    or self.protocol_version not in MODERN_PROTOCOL_VERSIONS
                ):
                    raise
                # 2026-07-28: the tool's listed schema is stale; re-list (which refreshes the
                # session's header maps) and send once more, as the SDK's call_tool does.
                await self.list_tools()
                self._tools_changed(f"tools/call {native_id}: header mismatch")
                raw = await send()
            result = await self._call_result(client, native_id, raw)
        except Exception as exc:
            raise await self._settled(exc, native_id) from None
        native_ref = {
            "source": "mcp",
            "server_id": self.name,
            "tool_name": native_id,
            "method": "tools/call",
            "mcp_protocol_version": self.protocol_version,
        }
        return result_from_mcp(result, native_ref=native_ref)

    def _lean_send(
        self, lean: LeanCall, params: dict[str, Any], progress: Any, ctx: CallContext
    ) -> Awaitable[dict[str, Any]]:
        """The lean sending of a tools/call with `params`, counted (a plain function: the
        caller awaits what it gives)."""
        self.lean_calls += 1
        trace = None if ctx.traceparent is None else ctx.trace_headers()
        return lean.send(params, progress, trace, ctx.authorization)

    def _lean_call(self, client: Client) -> LeanCall | None:
        """The lean sender of a call over HTTP (adapters/mcp/lean.py) whose caller cannot answer
        the server's questions; None where the SDK's session sends it: over stdio, over httpx2's
        own transports (a proxy named by the environment), and for a caller the server's
        questions are put to (through the session's callbacks)."""
        http, wire, cfg = self._http, self._wire, self.config
        if not self.lean or http is None or wire is None or cfg.url is None:
            return None
        if CALLER_ASKS.get() is not None or client.read_timeout_seconds is not None:
            return None
        # one sender a session: it holds what its calls share
        key = (http, client, self._http_session.get("mcp-session-id"), self.protocol_version)
        if self._lean_key != key:
            import aiohttp

            from adapters.mcp.lean import LeanCall

            self._lean_key = key
            timeout = aiohttp.ClientTimeout(
                total=None,
                sock_connect=cfg.start_timeout,
                sock_read=max(MCP_DEFAULT_SSE_READ_TIMEOUT, cfg.timeout * 2),
            )
            self._lean_sender = LeanCall(
                wire.session(),
                http,
                cfg.url,
                kept=wire.kept(
                    cfg.url, connect_timeout=timeout.sock_connect, read_timeout=timeout.sock_read
                ),
                headers=cfg.headers,
                timeout=timeout,
                session_id=key[2],
                stamp=session_stamp(client),
                limit=cfg.max_response_bytes,
                what=cfg.display_url,
                modern=self.protocol_version in MODERN_PROTOCOL_VERSIONS,
                deliver=lambda method, params: deliver_notification(client, method, params),
                refused=self._on_refused,
                answered=self._session_answered,
                failed=self._on_http_error,
                unanswered=self._post_unanswered,
            )
        return self._lean_sender

    def _post_unanswered(self, exc: Exception) -> None:
        """A call's POST got no answer: the session is over, as the SDK's is when its writer
        fails on a POST, and the upstream connects again."""
        if not self._wake.is_set():
            self._lost_reason = self._lost_reason or self._failure_text(exc, connecting=False)
            self._wake.set()

    async def read_resource(self, uri: str) -> list[dict[str, Any]]:
        """`resources/read` of `uri` on the session: the contents as the server gave them. A
        server that knows no such resource (`-32002`, or `-32602` as 2026-07-28 has it) is
        `resource_not_found`."""
        client = self._session()
        what = f"resources/read {uri[:200]}"
        try:
            result = await client.read_resource(uri)
        except MCPError as exc:
            if exc.code in (_RESOURCE_NOT_FOUND, types.INVALID_PARAMS) and not self._wake.is_set():
                text = masked(exc.message, self.config.secrets())
                raise BridgeError(
                    f"{what}: {text}",
                    error_class="invalid_arguments",
                    error_code="resource_not_found",
                    recoverability="change_arguments",
                    native_error_ref={"source": "mcp", "code": exc.code, "message": text},
                ) from None
            raise await self._settled(exc, what) from None
        except Exception as exc:
            raise await self._settled(exc, what) from None
        return [
            content.model_dump(by_alias=True, exclude_none=True, mode="json")
            for content in result.contents
        ]

    async def _call_result(self, client: Client, name: str, raw: dict[str, Any]) -> dict[str, Any]:
        """A tools/call result checked piece by piece with the SDK's types: the result without
        its content as a whole (and its structured content against the tool's outputSchema,
        as the SDK's call_tool does), then each content block on its own, so a block of a
        type the SDK does not know, or one it cannot read, is kept as it came, not the cause
        of throwing away a call that already ran."""
        version = self.protocol_version or types.LATEST_PROTOCOL_VERSION
        if version in MODERN_PROTOCOL_VERSIONS and raw.get("resultType") == "input_required":
            wanted = types.InputRequiredResult.model_validate(raw, by_name=False)
            kinds = sorted({request.method for request in (wanted.input_requests or {}).values()})
            raise BridgeError(
                f"{name}: the server asked for input the bridge cannot give ({', '.join(kinds) or 'input_required'})",
                error_class="execution_failed",
            )
        blocks = raw.get("content")
        if not isinstance(blocks, list):
            check_result("tools/call", version, raw)  # the SDK's own words for what is wrong
            raise TypeError("the tools/call result has no list of content blocks")
        rest = dict(raw)
        del rest["content"]  # put back empty, last, as the blocks are checked one by one
        rest["content"] = []
        result, wire = checked_head(version, rest)
        if not result.is_error:
            await client.session.validate_tool_result(name, result)
        wire["content"] = [self._content_block(name, block) for block in blocks]
        return wire

    def _content_block(self, tool: str, block: Any) -> Any:
        """One content block, checked with the SDK's model of its type; kept as it came when
        the SDK knows no such type or rejects it (the caller still gets what the tool said)."""
        text = plain_text(block)
        if text is not None:  # what the SDK's model of it dumps, without the model
            return {"type": "text", "text": text}
        kind = block.get("type") if isinstance(block, dict) else None
        model = _CONTENT_MODELS.get(kind) if isinstance(kind, str) else None
        if model is None:
            log.info(
                "mcp upstream %s: %s returned a content block of type %r, unknown to the SDK; kept as it came",
                self.name,
                tool,
                kind if kind is not None else type(block).__name__,
            )
            return block
        try:
            return model.model_validate(block, by_name=False).model_dump(
                by_alias=True, exclude_none=True, mode="json"
            )
        except ValidationError as exc:
            log.warning(
                "mcp upstream %s: %s returned a %s block the SDK rejects (%s); kept as it came",
                self.name,
                tool,
                kind,
                validation_line(exc),
            )
            return block

    def _call_error(self, exc: BaseException, what: str) -> BridgeError:
        """A failed request as a BridgeError with the right class."""
        secrets = self.config.secrets()
        if isinstance(exc, BridgeError):
            return exc
        if isinstance(exc, MCPError):
            ref = {"source": "mcp", "code": exc.code, "message": masked(exc.message, secrets)}
            text = masked(exc.message, secrets)
            if exc.code in (types.PARSE_ERROR, types.CONNECTION_CLOSED) and answer_too_large(
                exc.message, self.config.max_response_bytes
            ):
                # made up by the SDK for an answer refused past max_response_bytes; the session goes on
                return BridgeError(
                    f"{what}: {self.config.display_url()} answered more than max_response_bytes={self.config.max_response_bytes}",
                    error_class="result_too_large",
                    recoverability="change_arguments",
                    status="too_large",
                    native_error_ref=ref,
                )
            if exc.code == types.CONNECTION_CLOSED and RESUMED_TOO_OFTEN in exc.message:
                # made up by the SDK for an answer whose stream the server kept ending; the session goes on
                return BridgeError(
                    f"{what}: {text.removeprefix('SSE stream failed: ')}",
                    error_class="execution_failed",
                    native_error_ref=ref,
                )
            closed = closed_by_sdk(exc, http=self.config.transport == "http")
            if closed or self._client is None or self._wake.is_set():
                return self._unavailable(f"the connection closed during {what}")
            if isinstance(exc.data, dict) and UNREADABLE in exc.data:
                # made up by the stdio transport for an answer it could not read: the call may
                # have run, so it fails now, never as a timeout that invites a retry
                if exc.data[UNREADABLE] == "too_long":
                    return BridgeError(
                        f"{what}: {text}",
                        error_class="result_too_large",
                        recoverability="change_arguments",
                        native_error_ref=ref,
                    )
                return BridgeError(
                    f"{what}: {text}", error_class="execution_failed", native_error_ref=ref
                )
            if exc.code == types.INVALID_PARAMS:
                if "unknown tool" in text.lower() or "not found" in text.lower():
                    self._tools_changed(f"server does not know {what}")
                    return BridgeError(
                        f"{what}: {text}",
                        error_class="unknown_tool",
                        recoverability="change_arguments",
                        native_error_ref=ref,
                    )
                return BridgeError(
                    f"{what}: {text}",
                    error_class="invalid_arguments",
                    recoverability="change_arguments",
                    native_error_ref=ref,
                )
            if exc.code == types.METHOD_NOT_FOUND:
                return BridgeError(
                    f"{what}: {text}", error_class="capability_gap", native_error_ref=ref
                )
            if exc.code == types.URL_ELICITATION_REQUIRED:
                return BridgeError(
                    f"{what}: {text}",
                    error_class="setup_required",
                    recoverability="setup",
                    status="denied",
                    native_error_ref=ref,
                )
            return BridgeError(
                f"{what}: MCP error {exc.code}: {text}",
                error_class="execution_failed",
                native_error_ref=ref,
            )
        if (
            isinstance(
                exc,
                (
                    anyio.ClosedResourceError,
                    anyio.BrokenResourceError,
                    anyio.EndOfStream,
                    httpx2.TransportError,
                ),
            )
            or self._client is None
        ):
            return self._unavailable(f"{what} failed: {type(exc).__name__}")
        if isinstance(exc, ValidationError):
            return BridgeError(
                f"{what}: the server's result is not valid MCP {self.protocol_version}: {masked(validation_line(exc), secrets)}",
                error_class="execution_failed",
            )
        # The SDK raises RuntimeError for results it rejects (structured content not matching
        # the declared outputSchema).
        return BridgeError(
            f"{what}: {masked(str(exc), secrets) or type(exc).__name__}",
            error_class="execution_failed",
        )

    def _unavailable(self, what: str) -> BridgeError:
        if self._certificate is not None:
            # a setup problem, not an outage: every attempt fails alike until the CA is trusted
            return BridgeError(
                f"MCP upstream {self.name!r}: {what}: {self._certificate}",
                error_class="dependency_unavailable",
                recoverability="setup",
            )
        reason = self._lost_reason or (self._child.lost_reason if self._child else None)
        return BridgeError(
            f"MCP upstream {self.name!r} is unavailable: {reason or what}",
            error_class="dependency_unavailable",
            recoverability="retry_later",
            retry_after=self.config.retry_initial,
        )


_CONTENT_MODELS: dict[str, type[Any]] = {
    "text": types.TextContent,
    "image": types.ImageContent,
    "audio": types.AudioContent,
    "resource_link": types.ResourceLink,
    "resource": types.EmbeddedResource,
}
