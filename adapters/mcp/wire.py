"""The wire under an MCP upstream's HTTP client: aiohttp's pooled connections (its HTTP parser is
C) behind the `httpx2.AsyncBaseTransport` interface the SDK's client and the adapter's hooks are
written against. httpx2's own transport (httpcore's pure-Python HTTP/1.1) cost about 60% of the
CPU of a call on the client side; everything above the transport (the SDK's session and
streamable HTTP client, the answer bounds, the session's care) is unchanged.

Used when the environment names no proxy: a client given a transport does not read the
environment's proxies, so a proxied one keeps httpx2's transports (adapters/http/proxy.py).
Bodies come as the server sent them (not decompressed): httpx2 decodes them above, where the
answer bounds count them."""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2

from adapters.http.kept import KeptConnections, plain_origin

__all__ = ["AiohttpTransport", "httpx_error", "proxied_by_environment"]

_HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding"})


def proxied_by_environment() -> bool:
    """Whether the environment names a proxy for HTTP(S)."""
    found = urllib.request.getproxies_environment()
    return any(found.get(k) for k in ("http", "https", "all"))


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """httpx2 requests sent over one aiohttp session (made at the first request, on the loop
    that sends it), with httpx2's errors for aiohttp's."""

    def __init__(self, tls: ssl.SSLContext, *, limit: int = 100) -> None:
        self.tls = tls
        self.limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._kept: dict[tuple[str, float | None, float | None], KeptConnections] = {}

    def kept(
        self, url: str, *, connect_timeout: float | None, read_timeout: float | None
    ) -> KeptConnections | None:
        """The narrow client's kept connections to `url` (adapters/http/kept.py), for the
        requests it can send; None for a URL it cannot send to (TLS, credentials)."""
        if not plain_origin(url):
            return None
        key = (url, connect_timeout, read_timeout)
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = KeptConnections(
                url, limit=self.limit, connect_timeout=connect_timeout, read_timeout=read_timeout
            )
        return found

    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session the requests go over (made at the first request)."""
        return self._client()

    def _client(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            session = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.tls, limit=self.limit),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),  # httpx2 keeps the cookies, as before
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type", "Accept"),
            )
        return session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        headers = [
            (key.decode("latin-1"), value.decode("latin-1"))
            for key, value in request.headers.raw
            if key.lower().decode("latin-1") not in _HOP_HEADERS
        ]
        body = await request.aread()
        try:
            response = await self._client().request(
                request.method,
                str(request.url),
                data=body or None,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            )
        except Exception as exc:
            raise _mapped(exc, request, connecting=True) from _cause(exc)
        return httpx2.Response(
            response.status,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers],
            stream=_Body(response, request),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode(),
            },
        )

    async def aclose(self) -> None:
        kept, self._kept = self._kept, {}
        for connections in kept.values():
            await connections.aclose()
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _Body(httpx2.AsyncByteStream):
    """An aiohttp response's body: its connection back to the pool once read to the end,
    dropped when closed before."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self.response = response
        self.request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.content.iter_any():
                yield chunk
        except Exception as exc:
            raise _mapped(exc, self.request, connecting=False) from _cause(exc)

    async def aclose(self) -> None:
        response = self.response
        if response.content.at_eof():
            response.release()
        else:
            response.close()


def httpx_error(exc: BaseException, method: str, url: str, *, connecting: bool) -> BaseException:
    """httpx2's error for an aiohttp (or socket) error of a request sent over the session
    directly, its cause kept as `AiohttpTransport` keeps it."""
    mapped = _mapped(exc, httpx2.Request(method, url), connecting=connecting)
    if mapped is not exc:
        mapped.__cause__ = _cause(exc)
    return mapped


def _cause(exc: BaseException) -> BaseException:
    """What a failure of aiohttp's to connect wraps (the `ssl` error of a certificate that fails
    its check, or of a server that speaks no TLS), as httpx2's errors carry it: the TLS checks
    of adapters/http/tls.py read it there. aiohttp's own errors of the kind subclass `ssl`'s
    without its details."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return exc.certificate_error
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ssl.SSLError):
        return exc.os_error
    return exc


def _mapped(exc: BaseException, request: httpx2.Request, *, connecting: bool) -> BaseException:
    """httpx2's error for an aiohttp (or socket) error, as httpx2's own transport raises it."""
    if isinstance(exc, httpx2.HTTPError | asyncio.CancelledError):
        return exc
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(text, request=request)
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError is one
        if connecting and isinstance(exc, aiohttp.ConnectionTimeoutError):
            return httpx2.ConnectTimeout(text, request=request)
        return httpx2.ReadTimeout(text, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx2.RemoteProtocolError(text, request=request)
    if isinstance(exc, aiohttp.ClientError | OSError):
        return (httpx2.ConnectError if connecting else httpx2.ReadError)(text, request=request)
    return exc
