"""The HTTP transport of an A2A upstream: answers bounded to `max_response_bytes`, kept-alive
connections the agent closed told apart and re-sent on a fresh connection, the environment's
proxies, and the failures that say a connection was lost."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import ssl
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx

from adapters.http.httpx_compat import get_environment_proxies
from bridge.model import BridgeError

log = logging.getLogger("adapters.a2a")

__all__ = [
    "CONNECTION_LOST",
    "DRAIN_BYTES",
    "DRAIN_SECONDS",
    "DROPPED_UNANSWERED",
    "KEEPALIVE_SECONDS",
    "AnswerTooLarge",
    "BoundedTransport",
    "ReusedConnectionDropped",
    "causes",
    "cut_off",
    "lost_connection",
    "on_new_connection",
    "proxy_mounts",
    "reused_dropped",
]


# Transport failures after which no answer came: the agent may be gone, which its card then tells.
CONNECTION_LOST = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


class AnswerTooLarge(httpx.TransportError):
    """An answer (a card, a reply, a stream of events) past `max_response_bytes`."""


# What is read of an answer the SDK stopped reading, for its connection to be used again: the end
# of an event stream (the SDK stops at a task's last event, before the few bytes that end the
# stream, and a connection with an answer not read to its end is closed: a new one, with its
# TLS handshake, for every streamed call). More, or later, and the connection is closed.
DRAIN_BYTES = 64 * 1024


DRAIN_SECONDS = 0.05


# How long an idle connection is kept for the next request: less than the 5 s after which the
# servers A2A agents commonly run on (uvicorn, hypercorn, Node) close one, so that a connection
# is not reused just as the agent's side closes it (httpx keeps one 5 s, as long).
KEEPALIVE_SECONDS = 4.0


class _BoundedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, limit: int, url: httpx.URL) -> None:
        self.inner, self.limit, self.url = inner, limit, url
        self.started = self.ended = False

    async def __aiter__(self) -> Any:
        self.started = True
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise AnswerTooLarge(
                    f"{self.url.copy_with(query=None)} answered more than max_response_bytes={self.limit}"
                )
            yield chunk
        self.ended = True

    async def aclose(self) -> None:
        try:
            if self.started and not self.ended:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(DRAIN_SECONDS):
                        drained = 0
                        async for chunk in self.inner:
                            drained += len(chunk)
                            if drained > DRAIN_BYTES:
                                break
        finally:
            await self.inner.aclose()


class ReusedConnectionDropped(httpx.RemoteProtocolError):
    """A request sent on a kept-alive connection that the agent's side closed before any of the
    answer arrived: most often the agent's server closing the idle connection (uvicorn after 5 s)
    just as it was reused, or the agent restarting. The request may or may not have reached it."""


# Set while the bridge sends a request again itself (a JSON-RPC `GetTask`, a POST the transport
# does not repeat): the transport puts it on a connection opened for it, as the GETs it repeats.
_ON_NEW_CONNECTION: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "a2a_on_new_connection", default=False
)


@contextlib.contextmanager
def on_new_connection() -> Iterator[None]:
    token = _ON_NEW_CONNECTION.set(True)
    try:
        yield
    finally:
        _ON_NEW_CONNECTION.reset(token)


# Requests the transport sends again, once, when a kept-alive connection drops under them.
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


DROPPED_UNANSWERED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class _ConnectionTrace:
    """Whether a request opened a connection of its own, as httpcore's trace reports it (an
    opened connection names `connection.connect_tcp`; a reused one does not); the request's own
    trace, if any, still hears every event."""

    def __init__(self, request: httpx.Request) -> None:
        self.outer = request.extensions.get("trace")
        self.opened = False

    def install(self, request: httpx.Request) -> None:
        self.opened = False
        request.extensions["trace"] = self

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name.startswith(("connection.connect_tcp.", "connection.connect_unix_socket.")):
            self.opened = True
        if self.outer is not None:
            await self.outer(name, info)


class BoundedTransport(httpx.AsyncBaseTransport):
    """Every answer read as it arrives and refused past `limit` bytes: the SDK reads a reply
    whole, and an agent's answer (or a card) could otherwise fill the bridge's memory. Answers
    are asked for uncompressed (`Accept-Encoding: identity`), so the bytes counted are the bytes
    read. With `proxy`, requests go through that proxy.

    A request whose reused connection dropped before any of its answer arrived is sent once
    more when its method is idempotent (a card, an HTTP+JSON `GetTask`), on a connection opened
    for it, and otherwise raised as `ReusedConnectionDropped`, for the caller to decide whether
    sending it again is safe; a request the caller sends again goes on a connection opened for
    it too (`_ON_NEW_CONNECTION`)."""

    def __init__(self, limit: int, tls: ssl.SSLContext, proxy: str | None = None) -> None:
        limits = httpx.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_SECONDS
        )  # httpx's, but the expiry
        self.inner = httpx.AsyncHTTPTransport(verify=tls, proxy=proxy, limits=limits)
        # where a request is sent again: a connection of its own, closed after it. Another kept one
        # could be closing too (a server closes the connections idle since one burst of calls at once)
        self.fresh = httpx.AsyncHTTPTransport(
            verify=tls, proxy=proxy, limits=httpx.Limits(max_keepalive_connections=0)
        )
        self.limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await (
            self.fresh.handle_async_request(request)
            if _ON_NEW_CONNECTION.get()
            else self._send_kept(request)
        )
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _BoundedStream(response.stream, self.limit, request.url)
        return response

    async def _send_kept(self, request: httpx.Request) -> httpx.Response:
        trace = _ConnectionTrace(request)
        trace.install(request)
        try:
            response = await self.inner.handle_async_request(request)
        except DROPPED_UNANSWERED as exc:
            if trace.opened:
                raise
            if request.method not in _IDEMPOTENT_METHODS:
                raise ReusedConnectionDropped(
                    f"{type(exc).__name__}: {exc or 'connection lost'}", request=request
                ) from exc
            log.debug(
                "%s %s: a kept-alive connection dropped before the answer (%s); sent again on a new one",
                request.method,
                request.url.copy_with(query=None),
                type(exc).__name__,
            )
            response = await self.fresh.handle_async_request(request)
        finally:
            if trace.outer is None:
                request.extensions.pop("trace", None)
            else:
                request.extensions["trace"] = trace.outer
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
        await self.fresh.aclose()


def proxy_mounts(limit: int, tls: ssl.SSLContext) -> dict[str, httpx.AsyncBaseTransport | None]:
    """The client's transports for the proxies the environment names (HTTP_PROXY, HTTPS_PROXY,
    ALL_PROXY and NO_PROXY, as httpx reads them for a client of its own transport): a bounded
    transport through each proxy, None (the client's own, direct and bounded) where NO_PROXY
    says so. httpx reads the environment only for a client given no transport, and the client
    here has one, for the bound."""
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
    for pattern, proxy in get_environment_proxies().items():
        if proxy is None:
            mounts[pattern] = None
            continue
        try:
            mounts[pattern] = BoundedTransport(limit, tls, proxy=proxy)
        except (
            ImportError,
            ValueError,
        ):  # a socks5 proxy without socksio, or a scheme httpx has no transport for
            scheme = urllib.parse.urlsplit(proxy).scheme
            raise BridgeError(
                f"the environment's proxy for {pattern} is a {scheme}:// proxy, which the bridge's HTTP client does not speak",
                error_class="dependency_unavailable",
                recoverability="setup",
                details={
                    "fix": "use an http:// proxy in HTTP_PROXY/HTTPS_PROXY/ALL_PROXY, or list the agent's host in NO_PROXY"
                },
            ) from None
    return mounts


def causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from (`raise ... from`, as httpx and a2a-sdk raise their
    errors), without the exceptions that were being handled when it was raised: the stream's
    break, for the `GetTask` that followed it, or the dropped poll, for the poll sent again.
    Every error is read through this: an error handled earlier in the same coroutine says
    nothing about the failure at hand."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__
    return seen


def lost_connection(exc: BaseException) -> BaseException | None:
    """The transport error under `exc` when no answer came: no connection was made, or it dropped
    before the answer ended; None when the agent answered (an error, a status) or timed out."""
    return next((e for e in causes(exc) if isinstance(e, CONNECTION_LOST)), None)


def reused_dropped(exc: BaseException) -> bool:
    """A request whose kept-alive connection dropped before any of its answer arrived."""
    return any(isinstance(e, ReusedConnectionDropped) for e in causes(exc))


def cut_off(exc: BaseException) -> bool:
    """A connection that was open, then closed or reset before the answer ended (not one that
    could not be opened: the agent is not there)."""
    chain = causes(exc)
    return any(isinstance(e, DROPPED_UNANSWERED) for e in chain) and not any(
        isinstance(e, httpx.ConnectError) for e in chain
    )
