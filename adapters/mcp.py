"""MCP upstreams: the bridge as an MCP client of one server, over stdio or streamable HTTP.

One long-lived session per upstream, held by a dedicated task that owns the transport and the
SDK session (entered and left in that one task); the full `tools/list` cursor loop; change
notices (`notifications/tools/list_changed`, or a `subscriptions/listen` stream on
2026-07-28) reported to the catalog; calls with progress and cancellation forwarded; a server
that exits or goes away reported as `unavailable` with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import urllib.parse
from contextlib import AsyncExitStack
from importlib import metadata
from typing import Any, ClassVar, Literal

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field, model_validator

from adapters.mcp_stdio import StdioChild, redact
from bridge.model import BridgeError, UpstreamResult, UpstreamTool
from bridge.translate.mcp import progress_from_mcp, result_from_mcp, tool_from_mcp
from bridge.upstream import CallContext, Upstream, UpstreamConfig, UpstreamEvent

__all__ = ["MCPConfig", "MCPUpstream", "ProtocolMode"]

log = logging.getLogger("bridge.adapters.mcp")

ProtocolMode = Literal["auto", "legacy", "2026-07-28"]
_PYTHON_NAMES = ("python", "python3")
_LISTEN_RETRY = (0.5, 30.0)  # first and longest pause before re-opening a dropped listen stream


def _client_info() -> types.Implementation:
    try:
        version = metadata.version("a2t-bridge")
    except metadata.PackageNotFoundError:
        version = "0"
    return types.Implementation(name="a2t-bridge", version=version)


class MCPConfig(UpstreamConfig):
    """An MCP server: `command` (with `args`, `env`, `cwd`) runs it as a child over stdio, `url`
    (with `headers`) reaches it over streamable HTTP. Exactly one of the two."""

    command: str | None = Field(default=None, description="stdio: program to run (python/python3 = the bridge's own interpreter)")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: variables added to a minimal environment")
    cwd: str | None = Field(default=None, description="stdio: working folder, relative to the config file's folder")
    url: str | None = Field(default=None, description="streamable HTTP endpoint, e.g. http://127.0.0.1:9001/mcp")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP: headers sent with every request")
    protocol: ProtocolMode = Field(default="auto", description="auto | legacy (handshake era) | 2026-07-28")
    ping_interval: float | None = Field(default=30.0, gt=0, description="liveness probe every N seconds; null = off")
    ping_timeout: float = Field(default=10.0, gt=0, description="seconds a liveness probe may take")
    shutdown_timeout: float = Field(default=2.0, ge=0, description="stdio: seconds to exit after stdin closes")
    max_pages: int = Field(default=1000, ge=1, description="most tools/list pages read in one listing")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("give exactly one of `command` (a stdio server) or `url` (a streamable HTTP server)")
        if self.url:
            if self.args or self.env or self.cwd:
                raise ValueError("`args`, `env` and `cwd` apply to stdio servers (`command`), not to `url`")
            if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
                raise ValueError(f"`url` must start with http:// or https:// (got {self.url!r})")
        if self.command and self.headers:
            raise ValueError("`headers` apply to HTTP servers (`url`), not to `command`")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def argv(self) -> list[str]:
        assert self.command is not None
        command = sys.executable if self.command in _PYTHON_NAMES else self.command
        return [command, *self.args]

    def working_dir(self) -> str:
        return self.resolve_path(self.cwd) if self.cwd else self.resolve_path(".")

    def secrets(self) -> list[str]:
        """Values that must never reach a log line or an error text."""
        return [*self.env.values(), *self.headers.values()]

    def display_url(self) -> str:
        """The URL without credentials or query, for messages."""
        parts = urllib.parse.urlsplit(self.url or "")
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"


class MCPUpstream(Upstream):
    kind: ClassVar[str] = "mcp"
    config_model: ClassVar[type[UpstreamConfig]] = MCPConfig

    def __init__(self, config: UpstreamConfig) -> None:
        super().__init__(config)
        self.config: MCPConfig = config  # type: ignore[assignment]
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._lost_reason: str | None = None
        self._child: StdioChild | None = None
        self.protocol_version: str | None = None
        self.server_info: types.Implementation | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._owner is not None:
            await self.close()
        self._closing = False
        self._lost_reason = None
        self._wake = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if start() gave up
        self._ready = ready
        self._owner = asyncio.create_task(self._own_session(ready), name=f"mcp-session:{self.name}")
        try:
            await asyncio.shield(ready)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        self._closing = True
        owner, self._owner = self._owner, None
        self._client = None
        if owner is None:
            return
        self._wake.set()
        if self._ready is not None and not self._ready.done():
            owner.cancel()  # still connecting: nothing to wind down politely (the child is still reaped)
        # The owner leaves the session and stops the child; bounded even for a child that ignores
        # SIGTERM. asyncio.wait does not cancel the owner if close() itself is cancelled.
        done, _ = await asyncio.wait({owner}, timeout=self.config.shutdown_timeout + 6)
        if not done:
            owner.cancel()
            await asyncio.wait({owner}, timeout=5)

    async def _own_session(self, ready: asyncio.Future[None]) -> None:
        """Open the transport and session, serve until told to stop or the connection dies, and
        close both, all in this one task (the SDK's cancel scopes require it)."""
        failure: BaseException | None = None
        try:
            async with AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack),
                    mode=self.config.protocol,
                    cache=None,  # a federating bridge always wants the server's current answer
                    message_handler=self._on_message,
                    client_info=_client_info(),
                )
                await stack.enter_async_context(client)
                if self.config.protocol in MODERN_PROTOCOL_VERSIONS:
                    await self._discover(client)
                self.protocol_version = client.protocol_version
                self.server_info = client.server_info
                async with anyio.create_task_group() as tasks:
                    if self.protocol_version in MODERN_PROTOCOL_VERSIONS and _lists_change(client):
                        tasks.start_soon(self._listen, client)
                    if self.config.ping_interval:
                        tasks.start_soon(self._keepalive, client)
                    self._client = client
                    ready.set_result(None)
                    log.info("mcp upstream %s: connected (protocol %s)", self.name, self.protocol_version)
                    await self._wake.wait()
                    tasks.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - the owner reports every ending, none escapes
            failure = exc
        finally:
            self._client = None
        if not ready.done():
            ready.set_exception(ConnectionError(self._failure_text(failure, connecting=True)))
            return
        if not self._closing:
            reason = self._lost_reason or self._failure_text(failure, connecting=False)
            self._lost_reason = reason
            log.warning("mcp upstream %s unavailable: %s", self.name, reason)
            self.emit(UpstreamEvent("unavailable", reason=reason))

    async def _transport(self, stack: AsyncExitStack) -> Any:
        cfg = self.config
        if cfg.transport == "stdio":
            self._child = StdioChild(
                self.name,
                cfg.argv(),
                env=get_default_environment() | cfg.env,
                cwd=cfg.working_dir(),
                shutdown_timeout=cfg.shutdown_timeout,
                secrets=cfg.secrets(),
                on_lost=self._on_child_lost,
            )
            return self._child.connect()
        read_timeout = max(MCP_DEFAULT_SSE_READ_TIMEOUT, cfg.timeout * 2)
        http = create_mcp_http_client(
            headers=dict(cfg.headers), timeout=httpx2.Timeout(cfg.start_timeout, read=read_timeout)
        )
        await stack.enter_async_context(http)
        assert cfg.url is not None
        return streamable_http_client(cfg.url, http_client=http)

    async def _discover(self, client: Client) -> None:
        """A pinned modern version skips the probe; ask the server for its real capabilities
        (whether it serves change subscriptions) and keep the pin if it does not answer."""
        try:
            with anyio.fail_after(self.config.ping_timeout):
                raw = await client.session.send_discover(self.config.protocol)
            client.session.adopt(types.DiscoverResult.model_validate(raw))
        except (MCPError, TimeoutError, ValueError, RuntimeError) as exc:
            log.info("mcp upstream %s: server/discover not answered (%s); keeping %s", self.name, exc, self.config.protocol)

    def _on_child_lost(self, reason: str) -> None:
        self._lost_reason = reason
        self._wake.set()

    def _failure_text(self, exc: BaseException | None, *, connecting: bool) -> str:
        if self._child is not None and self._child.lost_reason:
            return self._child.lost_reason
        where = f"`{' '.join(self.config.argv()[:1])}`" if self.config.transport == "stdio" else self.config.display_url()
        if exc is None:
            return f"the session with {where} ended"
        leaf = _leaf(exc)
        if isinstance(leaf, FileNotFoundError) and self.config.transport == "stdio":
            detail = f"cannot start {where}: {leaf.strerror or leaf}" + (f" ({leaf.filename})" if leaf.filename else "")
        elif isinstance(leaf, httpx2.TransportError):
            detail = f"HTTP connection to {where} failed: {type(leaf).__name__}: {leaf or 'no answer'}"
        elif isinstance(leaf, MCPError):
            detail = f"{where} answered with MCP error {leaf.code}: {leaf.message}"
        elif isinstance(leaf, (TimeoutError, asyncio.CancelledError)):
            detail = f"{where} did not answer"
        else:
            detail = f"{'connecting to' if connecting else 'session with'} {where} failed: {type(leaf).__name__}: {leaf}"
        if self._child is not None and self._child.returncode is not None:
            detail += f" ({self._child.describe_exit()})"
        return redact(detail if len(detail) < 1000 else detail[:997] + "...", self.config.secrets())

    # ------------------------------------------------------------------ session tasks

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.emit(UpstreamEvent("tools_changed", reason="notifications/tools/list_changed"))
        elif isinstance(message, Exception):
            log.warning("mcp upstream %s: transport error: %s", self.name, redact(str(message), self.config.secrets()))

    async def _listen(self, client: Client) -> None:
        """2026-07-28 delivers change notices only on a `subscriptions/listen` stream; keep one
        open, re-open it when it drops (and re-list then: notices may have been missed)."""
        pause = _LISTEN_RETRY[0]
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    pause = _LISTEN_RETRY[0]
                    async for _event in subscription:
                        self.emit(UpstreamEvent("tools_changed", reason="subscriptions/listen"))
            except ListenNotSupportedError:
                return
            except Exception as exc:  # noqa: BLE001 - a dropped stream is retried, never fatal
                log.info("mcp upstream %s: listen stream ended: %s", self.name, exc)
            await anyio.sleep(pause)
            pause = min(pause * 2, _LISTEN_RETRY[1])
            self.emit(UpstreamEvent("tools_changed", reason="listen stream re-opened"))

    async def _keepalive(self, client: Client) -> None:
        """A server that stops answering is reported like one that went away."""
        assert self.config.ping_interval is not None
        while True:
            await anyio.sleep(self.config.ping_interval)
            try:
                with anyio.fail_after(self.config.ping_timeout):
                    if self.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        await client.session.send_discover(self.protocol_version)  # ping is gone in this era
                    else:
                        await client.session.send_ping()
            except MCPError as exc:
                if exc.code == types.METHOD_NOT_FOUND:
                    continue  # answered, just not this method: alive
                self._lost_reason = self._failure_text(exc, connecting=False)
            except TimeoutError:
                self._lost_reason = f"no answer to a liveness probe within {self.config.ping_timeout:g}s"
            except Exception as exc:  # noqa: BLE001
                self._lost_reason = self._failure_text(exc, connecting=False)
            else:
                continue
            self._wake.set()
            return

    # ------------------------------------------------------------------ listing and calls

    def _session(self) -> Client:
        client = self._client
        if client is None:
            raise BridgeError(
                f"MCP upstream {self.name!r} is not connected: {self._lost_reason or 'starting'}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=self.config.retry_initial,
            )
        return client

    async def list_tools(self) -> list[UpstreamTool]:
        client = self._session()
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(self.config.max_pages):
            try:
                page = await client.list_tools(cursor=cursor)
            except Exception as exc:
                raise self._call_error(exc, "tools/list") from None
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
            if cursor in seen:
                raise BridgeError(f"MCP upstream {self.name!r} repeated the tools/list cursor {cursor!r}", error_class="execution_failed")
            seen.add(cursor)
        else:
            log.warning("mcp upstream %s: tools/list still had pages after max_pages=%d", self.name, self.config.max_pages)
        return [
            tool_from_mcp(
                tool.model_dump(by_alias=True, exclude_none=True, mode="json"),
                server_id=self.name,
                protocol_version=self.protocol_version,
            )
            for tool in tools
        ]

    async def invoke(self, native_id: str, arguments: dict[str, Any], ctx: CallContext) -> UpstreamResult:
        client = self._session()

        async def forward_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.report_progress(**progress_from_mcp(progress, total, message))

        # Cancelling this coroutine (the pipeline's timeout, or the caller going away) makes the
        # SDK send notifications/cancelled for the request (or abort its POST on 2026-07-28 HTTP).
        try:
            result = await client.call_tool(
                native_id,
                arguments,
                progress_callback=forward_progress if ctx.progress_sink is not None else None,
            )
        except Exception as exc:
            raise self._call_error(exc, native_id) from None
        native_ref = {
            "source": "mcp",
            "server_id": self.name,
            "tool_name": native_id,
            "method": "tools/call",
            "mcp_protocol_version": self.protocol_version,
        }
        return result_from_mcp(result.model_dump(by_alias=True, exclude_none=True, mode="json"), native_ref=native_ref)

    def _call_error(self, exc: BaseException, what: str) -> BridgeError:
        """A failed request as a BridgeError with the right class."""
        secrets = self.config.secrets()
        if isinstance(exc, BridgeError):
            return exc
        if isinstance(exc, MCPError):
            ref = {"source": "mcp", "code": exc.code, "message": redact(exc.message, secrets)}
            text = redact(exc.message, secrets)
            if exc.code == types.CONNECTION_CLOSED or self._client is None:
                return self._unavailable(f"the connection closed during {what}")
            if exc.code == types.REQUEST_TIMEOUT:
                return BridgeError(f"{what}: {text}", error_class="timeout", recoverability="retry", status="timed_out", native_error_ref=ref)
            if exc.code == types.INVALID_PARAMS:
                if "unknown tool" in text.lower() or "not found" in text.lower():
                    self.emit(UpstreamEvent("tools_changed", reason=f"server does not know {what}"))
                    return BridgeError(f"{what}: {text}", error_class="unknown_tool", recoverability="change_arguments", native_error_ref=ref)
                return BridgeError(f"{what}: {text}", error_class="invalid_arguments", recoverability="change_arguments", native_error_ref=ref)
            if exc.code == types.METHOD_NOT_FOUND:
                return BridgeError(f"{what}: {text}", error_class="capability_gap", native_error_ref=ref)
            if exc.code == types.URL_ELICITATION_REQUIRED:
                return BridgeError(f"{what}: {text}", error_class="setup_required", recoverability="setup", status="denied", native_error_ref=ref)
            return BridgeError(f"{what}: MCP error {exc.code}: {text}", error_class="execution_failed", native_error_ref=ref)
        if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, httpx2.TransportError)) or self._client is None:
            return self._unavailable(f"{what} failed: {type(exc).__name__}")
        # The SDK raises RuntimeError for results it rejects (structured content not matching
        # the declared outputSchema, input requests it cannot answer).
        return BridgeError(f"{what}: {redact(str(exc), secrets) or type(exc).__name__}", error_class="execution_failed")

    def _unavailable(self, what: str) -> BridgeError:
        reason = self._lost_reason or (self._child.lost_reason if self._child else None)
        return BridgeError(
            f"MCP upstream {self.name!r} is unavailable: {reason or what}",
            error_class="dependency_unavailable",
            recoverability="retry_later",
            retry_after=self.config.retry_initial,
        )

    async def health(self) -> dict[str, Any]:
        details: dict[str, Any] = {"transport": self.config.transport, "protocol_version": self.protocol_version}
        if self.server_info is not None:
            details["server"] = {"name": self.server_info.name, "version": self.server_info.version}
        if self._child is not None:
            details["pid"] = self._child.pid
            details["stderr_tail"] = list(self._child.stderr_tail)[-5:]
        return details


def _lists_change(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return bool(tools and tools.list_changed)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc
