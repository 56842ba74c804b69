"""MCP upstreams: the bridge as an MCP client of one server, over stdio or streamable HTTP.

One long-lived session per upstream, held by a dedicated task that owns the transport and the
SDK session (entered and left in that one task); the full `tools/list` cursor loop; change
notices (`notifications/tools/list_changed`, or a `subscriptions/listen` stream on
2026-07-28) reported to the catalog, coalesced; calls with progress and cancellation
forwarded; a server that exits or goes away reported as `unavailable` with the reason.

Listings and call results are read as they came and checked piece by piece with the SDK's
types: a tool the SDK rejects is skipped (with a warning naming it and why), the others kept;
a content block of a type the SDK does not know is kept as it came, the known ones checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from adapters.http.proxy import loopback_mounts
from adapters.http.tls import added_cas, system_cas
from adapters.mcp.asking import ServerRequests
from adapters.mcp.calls import ToolCalls
from adapters.mcp.config import MCPConfig
from adapters.mcp.features import ServerFeatures
from adapters.mcp.get_stream import GetStreamWatch
from adapters.mcp.http import quiet_sdk_refusals
from adapters.mcp.http_session import HTTPSessionCare
from adapters.mcp.listing import ToolListing
from adapters.mcp.notices import NoticeClient, NoticePosts
from adapters.mcp.sdk import (
    MCP_DEFAULT_SSE_READ_TIMEOUT,
    BridgeClient,
    client_info,
)
from adapters.mcp.stdio import LINE_LIMIT, StdioChild
from bridge.masking import masked
from bridge.model import BridgeError
from bridge.processes import minimal_environment
from bridge.upstream import Upstream, UpstreamConfig, UpstreamEvent

if TYPE_CHECKING:
    from adapters.mcp.wire import AiohttpTransport

__all__ = ["MCPUpstream"]

log = logging.getLogger("bridge.adapters.mcp")

_LISTEN_RETRY = (0.5, 30.0)  # first and longest pause before re-opening a dropped listen stream
_RELIST_GAP = (
    1.0  # seconds: change notices re-list at most this often (a burst or a loop costs one listing)
)


class MCPUpstream(
    HTTPSessionCare, ToolListing, ToolCalls, ServerFeatures, ServerRequests, Upstream
):
    kind: ClassVar[str] = "mcp"
    config_model: ClassVar[type[UpstreamConfig]] = MCPConfig
    reads_resources: ClassVar[bool] = True

    def __init__(self, config: UpstreamConfig) -> None:
        super().__init__(config)
        self.config: MCPConfig = config  # type: ignore[assignment]
        self._init_features()
        self._askers: list[Any] = []  # the Askers of the calls in flight whose callers can answer
        self._client: Client | None = None
        self._http: httpx2.AsyncClient | None = None  # the HTTP session's client, while open
        self._wire: AiohttpTransport | None = None  # the pooled connections under it, if aiohttp's
        self._owner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._probe_now = asyncio.Event()  # a liveness probe is wanted before ping_interval is up
        self._doubt: asyncio.Future[None] | None = (
            None  # a probe asked by an HTTP 400, until it ends
        )
        self._http_session: dict[
            str, str
        ] = {}  # the headers naming the HTTP session (id, protocol version)
        self._session_forgotten = False  # the server said it no longer knows the HTTP session
        self._closing = False
        self._lost_reason: str | None = None
        self._child: StdioChild | None = None
        self.protocol_version: str | None = None
        self.server_info: types.Implementation | None = None
        self.skipped_tools: dict[str, str] = {}  # tool name -> why the last listing left it out
        self._relist_asked = (
            False  # a tools_changed event is out (or timed) and no listing has begun since
        )
        self._relist_timer: asyncio.TimerHandle | None = None
        self._listed_at = float("-inf")
        self._connected_at = float("-inf")
        self._stream_renewals = (
            0  # sessions replaced in a row because their GET stream was given up on
        )
        self._renew_timer: asyncio.TimerHandle | None = None
        self._refused_methods: set[str] = (
            set()
        )  # requests of the server refused so far (each logged once)
        self._notices: NoticePosts | None = None  # the HTTP session's POSTs that carry no request
        self.lost_notifications: dict[
            str, int
        ] = {}  # method -> POSTs of it the server never answered
        self._session_listed = False  # the session's first listing is done (its start is over)
        self._certificate: str | None = (
            None  # a server certificate that failed its check, since start
        )
        self._tls: ssl.SSLContext | None = None  # with the CAs of `ca_file`, read at each start

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._owner is not None:
            await self.close()
        self._closing = False
        self._lost_reason = None
        self._wake = asyncio.Event()
        self._probe_now = asyncio.Event()
        self._doubt = None
        self._http_session = {}
        self._session_forgotten = False
        self._notices = None
        self._session_listed = False
        self._certificate = None
        cfg = self.config
        self._tls = added_cas(cfg.resolve_path(cfg.ca_file), cfg.ca_file) if cfg.ca_file else None
        self._cancel_relist()
        self._cancel_renewal()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(
            lambda f: f.cancelled() or f.exception()
        )  # retrieved even if start() gave up
        self._ready = ready
        self._owner = asyncio.create_task(self._own_session(ready), name=f"mcp-session:{self.name}")
        try:
            await asyncio.shield(ready)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        self._closing = True
        self._cancel_relist()
        self._cancel_renewal()
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
                client = BridgeClient(
                    await self._transport(stack),
                    mode=self.config.protocol,
                    cache=None,  # a federating bridge always wants the server's current answer
                    message_handler=self._on_message,
                    logging_callback=self._on_log,
                    client_info=client_info(),
                    on_refused=self._on_refused,
                    sampling_callback=self._sampling,
                    elicitation_callback=self._elicitation,
                )
                await stack.enter_async_context(client)
                if self.config.protocol in MODERN_PROTOCOL_VERSIONS:
                    await self._discover(client)
                self.protocol_version = client.protocol_version
                self.server_info = client.server_info
                async with anyio.create_task_group() as tasks:
                    if self.protocol_version in MODERN_PROTOCOL_VERSIONS and _lists_change(client):
                        tasks.start_soon(self._listen, client)
                    if self.config.ping_interval or self.config.transport == "http":
                        tasks.start_soon(self._keepalive, client)
                    self._client = client
                    self._connected_at = asyncio.get_running_loop().time()
                    ready.set_result(None)
                    log.info(
                        "mcp upstream %s: connected (protocol %s)", self.name, self.protocol_version
                    )
                    await self._wake.wait()
                    tasks.cancel_scope.cancel()
        except BaseException as exc:
            failure = exc
        finally:
            self._client = self._http = None
        if not ready.done():
            text = self._failure_text(failure, connecting=True)
            certificate = self._certificate or (
                self._certificate_failure(_leaf(failure)) if failure is not None else None
            )
            error: Exception = (
                BridgeError(text, error_class="dependency_unavailable", recoverability="setup")
                if certificate
                else ConnectionError(text)
            )
            error.__cause__ = (
                _leaf(failure) if failure is not None else None
            )  # what the catalog looks at (EMFILE, say)
            ready.set_exception(error)
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
                env=minimal_environment() | cfg.env,
                cwd=cfg.working_dir(),
                shutdown_timeout=cfg.shutdown_timeout,
                secrets=cfg.secrets(),
                on_lost=self._on_child_lost,
                max_line=cfg.max_line_bytes,
            )
            return self._child.connect()
        read_timeout = max(MCP_DEFAULT_SSE_READ_TIMEOUT, cfg.timeout * 2)
        quiet_sdk_refusals()
        # until the first listing, half of start_timeout at most, so that the listing has the other half
        self._notices = NoticePosts(min(cfg.ping_timeout, cfg.start_timeout / 2), self._notice_lost)
        # the SDK's create_mcp_http_client, with the TLS context made once; aiohttp loads with the
        # first HTTP upstream (a stdio one needs none of it)
        from adapters.mcp.wire import AiohttpTransport, proxied_by_environment

        tls = self._tls or system_cas()
        self._wire = None if proxied_by_environment() else AiohttpTransport(tls)
        wire = {} if self._wire is None else {"transport": self._wire}
        http = NoticeClient(
            headers=dict(cfg.headers),
            timeout=httpx2.Timeout(cfg.start_timeout, read=read_timeout),
            verify=tls,
            event_hooks={"response": [self._on_http_response]},
            mounts=loopback_mounts(cfg.url),
            watch=GetStreamWatch(self._get_stream_given_up),
            notices=self._notices,
            on_error=self._on_http_error,
            **wire,
        )
        await stack.enter_async_context(http)
        self._http = http
        stack.push_async_callback(
            self._end_http_session, http
        )  # once the session has closed, before the client
        assert cfg.url is not None
        return streamable_http_client(
            cfg.url,
            http_client=http,
            terminate_on_close=False,
            max_sse_event_size=cfg.max_response_bytes,
        )

    async def _discover(self, client: Client) -> None:
        """A pinned modern version skips the probe; ask the server for its real capabilities
        (whether it serves change subscriptions) and keep the pin if it does not answer."""
        try:
            with anyio.fail_after(self.config.ping_timeout):
                raw = await client.session.send_discover(self.config.protocol)
            client.session.adopt(types.DiscoverResult.model_validate(raw))
        except (MCPError, TimeoutError, ValueError, RuntimeError) as exc:
            log.info(
                "mcp upstream %s: server/discover not answered (%s); keeping %s",
                self.name,
                exc,
                self.config.protocol,
            )

    async def _settled(self, exc: BaseException, what: str) -> BridgeError:
        """`exc` as a BridgeError, once a liveness probe an HTTP 400 asked for has ended (at most
        `ping_timeout`): a session the server no longer knows makes it `dependency_unavailable`."""
        doubt = self._doubt
        if doubt is not None and isinstance(exc, MCPError):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(doubt), self.config.ping_timeout + 1)
        return self._call_error(exc, what)

    def _on_child_lost(self, reason: str) -> None:
        self._lost_reason = reason
        self._wake.set()

    def _failure_text(self, exc: BaseException | None, *, connecting: bool) -> str:
        if self._child is not None and self._child.lost_reason:
            return self._child.lost_reason
        where = (
            f"`{' '.join(self.config.argv()[:1])}`"
            if self.config.transport == "stdio"
            else self.config.display_url()
        )
        if exc is None:
            return f"the session with {where} ended"
        leaf = _leaf(exc)
        if isinstance(leaf, FileNotFoundError) and self.config.transport == "stdio":
            detail = f"cannot start {where}: {leaf.strerror or leaf}" + (
                f" ({leaf.filename})" if leaf.filename else ""
            )
        elif isinstance(leaf, httpx2.TransportError):
            detail = (
                self._certificate_failure(leaf)
                or f"HTTP connection to {where} failed: {type(leaf).__name__}: {leaf or 'no answer'}"
            )
        elif isinstance(leaf, MCPError):
            detail = f"{where} answered with MCP error {leaf.code}: {leaf.message}"
        elif isinstance(leaf, (TimeoutError, asyncio.CancelledError)):
            detail = f"{where} did not answer"
        else:
            detail = f"{'connecting to' if connecting else 'session with'} {where} failed: {type(leaf).__name__}: {leaf}"
        if self._child is not None and self._child.returncode is not None:
            detail += f" ({self._child.describe_exit()})"
        return masked(detail if len(detail) < 1000 else detail[:997] + "...", self.config.secrets())

    # ------------------------------------------------------------------ session tasks

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools_changed("notifications/tools/list_changed")
        elif self._feature_notice(message):
            pass
        elif isinstance(message, Exception):
            log.warning(
                "mcp upstream %s: transport error: %s",
                self.name,
                masked(str(message), self.config.secrets()),
            )

    def _on_refused(self, method: str) -> None:
        """A server asked for what the bridge does not declare (roots), or what no caller of the
        call can answer: said once per method, not at every call of a tool that asks."""
        if method not in self._refused_methods:
            self._refused_methods.add(method)
            log.warning(
                "mcp upstream %s: the server sent %s, which the bridge does not declare or the "
                "call's caller cannot answer; refused",
                self.name,
                method,
            )

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        """A log message of the server (`notifications/message`), logged as its stderr lines are:
        at INFO, `debug` ones at DEBUG; an object as its JSON, cut to LINE_LIMIT characters."""
        data = (
            params.data
            if isinstance(params.data, str)
            else json.dumps(params.data, ensure_ascii=False, default=str)
        )
        if len(data) > LINE_LIMIT:
            data = data[: LINE_LIMIT - 3] + "..."
        where = f" {params.logger}" if params.logger else ""
        log.log(
            logging.DEBUG if params.level == "debug" else logging.INFO,
            "mcp upstream %s: log %s%s: %s",
            self.name,
            params.level,
            where,
            masked(data, self.config.secrets()),
        )
        self._log_notice(params)

    def _tools_changed(self, reason: str) -> None:
        """Ask the catalog to re-list, coalesced: while a request is out and no listing has begun
        since, more notices fold into it, and re-lists begin at least _RELIST_GAP apart; a server
        that announces changes in a loop costs one listing a gap, not one per notice, and a
        change announced during a listing is still listed after it."""
        if self._relist_asked or self._closing:
            return
        self._relist_asked = True
        event = UpstreamEvent("tools_changed", reason=reason)
        loop = asyncio.get_running_loop()
        wait = self._listed_at + _RELIST_GAP - loop.time()
        if wait <= 0:
            self.emit(event)
        else:
            self._relist_timer = loop.call_later(wait, self._emit_relist, event)

    def _emit_relist(self, event: UpstreamEvent) -> None:
        self._relist_timer = None
        if not self._closing:
            self.emit(event)

    def _listing_begun(self) -> None:
        """A listing covers every change announced before it."""
        self._cancel_relist()
        self._listed_at = asyncio.get_running_loop().time()

    def _cancel_relist(self) -> None:
        if self._relist_timer is not None:
            self._relist_timer.cancel()
            self._relist_timer = None
        self._relist_asked = False

    async def _listen(self, client: Client) -> None:
        """2026-07-28 delivers change notices only on a `subscriptions/listen` stream; keep one
        open, re-open it when it drops (and re-list then: notices may have been missed)."""
        pause = _LISTEN_RETRY[0]

        def opened() -> None:
            nonlocal pause
            pause = _LISTEN_RETRY[0]

        while True:
            try:
                if await self._listen_stream(
                    client, lambda: self._tools_changed("subscriptions/listen"), opened
                ):
                    continue  # opened again at once, following other resources
            except ListenNotSupportedError:
                return
            except Exception as exc:
                log.info("mcp upstream %s: listen stream ended: %s", self.name, exc)
            await anyio.sleep(pause)
            pause = min(pause * 2, _LISTEN_RETRY[1])
            self._tools_changed("listen stream re-opened")

    async def _keepalive(self, client: Client) -> None:
        """A server that stops answering is reported like one that went away. It is probed every
        `ping_interval` seconds (if any), and at once when an HTTP answer asks for it."""
        try:
            while True:
                with anyio.move_on_after(self.config.ping_interval):
                    await self._probe_now.wait()
                self._probe_now.clear()
                doubt = self._doubt
                try:
                    with anyio.fail_after(self.config.ping_timeout):
                        if self.protocol_version in MODERN_PROTOCOL_VERSIONS:
                            await client.session.send_discover(
                                self.protocol_version
                            )  # ping is gone in this era
                        else:
                            await client.session.send_ping()
                except MCPError as exc:
                    if exc.code == types.METHOD_NOT_FOUND:
                        self._clear_doubt(doubt)
                        continue  # answered, just not this method: alive
                    self._lost_reason = self._failure_text(exc, connecting=False)
                    if doubt is not None:
                        self._session_forgotten = True
                        self._lost_reason = (
                            f"{self.config.display_url()} answered HTTP 400 for the session, and a liveness "
                            f"probe failed: the server ended it or restarted ({self._lost_reason})"
                        )
                except TimeoutError:
                    self._lost_reason = (
                        f"no answer to a liveness probe within {self.config.ping_timeout:g}s"
                    )
                except Exception as exc:
                    self._lost_reason = self._failure_text(exc, connecting=False)
                else:
                    self._clear_doubt(doubt)
                    continue
                self._wake.set()
                return
        finally:
            self._clear_doubt(self._doubt)

    def _clear_doubt(self, doubt: asyncio.Future[None] | None) -> None:
        """The probe `doubt` waited for has ended (the session lost, if it was)."""
        if doubt is None:
            return
        if self._doubt is doubt:
            self._doubt = None
        if not doubt.done():
            doubt.set_result(None)

    # ------------------------------------------------------------------ listing and calls

    def _session(self) -> Client:
        client = self._client
        if client is None:
            if self._certificate is not None:
                raise self._unavailable("not connected")
            raise BridgeError(
                f"MCP upstream {self.name!r} is not connected: {self._lost_reason or 'starting'}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=self.config.retry_initial,
            )
        return client

    async def health(self) -> dict[str, Any]:
        details: dict[str, Any] = {
            "transport": self.config.transport,
            "protocol_version": self.protocol_version,
        }
        if self.server_info is not None:
            details["server"] = {"name": self.server_info.name, "version": self.server_info.version}
        if self._child is not None:
            details["pid"] = self._child.pid
            details["stderr_tail"] = list(self._child.stderr_tail)[-5:]
        if self.skipped_tools:
            details["skipped_tools"] = dict(self.skipped_tools)
        if self.lost_notifications:
            details["lost_notifications"] = dict(self.lost_notifications)
        return details


def _lists_change(client: Client) -> bool:
    """Whether the server announces changes: of its tools, prompts or resources."""
    caps = client.server_capabilities
    resources = caps.resources
    return any(
        bool(kind and kind.list_changed) for kind in (caps.tools, caps.prompts, resources)
    ) or bool(resources and resources.subscribe)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc
