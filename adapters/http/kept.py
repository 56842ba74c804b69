"""A narrow HTTP/1.1 client for one plain-HTTP origin: requests over kept connections, each an
asyncio protocol whose responses `httptools` (llhttp, C) parses, their bodies read as they come.

It serves the one request an MCP upstream sends per call (a POST whose answer is JSON or an
event stream) for a fraction of aiohttp's CPU: no request or response objects beyond one small
one, no header multidicts, no per-request tasks or timers beyond the read timeout. What it does
not do is done by aiohttp, which its callers keep for everything else: TLS, proxies, redirects,
authentication, cookies, compression, `Expect`, upgrades.

Its failures are aiohttp's, so that a caller classifies them alike: a connection refused or
reset is an `OSError`, a connection not made within `connect_timeout` an
`aiohttp.ConnectionTimeoutError`, no byte within `read_timeout` while one is awaited an
`aiohttp.SocketTimeoutError`, a connection ended before its response did an
`aiohttp.ServerDisconnectedError`, a response the parser rejects an `aiohttp.ClientPayloadError`.
Like aiohttp, it never sends a request again on its own.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
import httptools

__all__ = ["KeptConnections", "KeptResponse", "plain_origin"]

# Bytes of a body read ahead of its reader before the connection stops reading.
READ_AHEAD = 256 * 1024
# Seconds a connection may stay idle in the pool before it is not used again: less than the
# 5 s uvicorn (and so the MCP SDK's servers) keeps an idle connection, so that the client, not
# the server, ends it, and a request is not sent on a connection its server is closing.
IDLE_SECONDS = 4.0
_FORBIDDEN = frozenset("\r\n\0")
# header names as read (bytes) and as kept (text in lower case): servers repeat the same few
_NAMES: dict[bytes, str] = {}
_NAMES_KEPT = 256


def plain_origin(url: str) -> bool:
    """Whether `url` is one `KeptConnections` can send to: plain HTTP, with no credentials."""
    parts = urlsplit(url)
    return (
        parts.scheme == "http"
        and parts.hostname is not None
        and "@" not in parts.netloc
        and parts.netloc.isascii()
    )


class KeptConnections:
    """Kept connections to the origin of `url` (see `plain_origin`), at most `limit` in use at
    once (a request waits for one beyond), each kept while its server keeps it alive."""

    def __init__(
        self,
        url: str,
        *,
        limit: int = 100,
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        self.host, self.port = parts.hostname, parts.port or 80
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._host_header = parts.netloc
        self.limit = limit
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._idle: list[tuple[float, _Connection]] = []
        self._in_use = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._open: set[_Connection] = set()
        self.opened = 0  # connections made, in all
        self.sent = 0  # requests sent, in all

    async def request(self, method: str, headers: dict[str, str], body: bytes) -> KeptResponse:
        """Send `method` with `headers` (names in lower case; Host and Content-Length are added)
        and `body` to the origin's URL; the response once its head is in. A header with a line
        break is refused with ValueError, as aiohttp refuses it."""
        lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        # each line has one CR and one LF of its own: any other is in a name or value
        count = len(headers)
        if lines.count("\r") != count or lines.count("\n") != count or "\0" in lines:
            for name, value in headers.items():
                if not _FORBIDDEN.isdisjoint(name) or not _FORBIDDEN.isdisjoint(value):
                    raise ValueError(f"a line break or NUL in the header {name!r}")
        head = (
            f"{method} {self.target} HTTP/1.1\r\nhost: {self._host_header}\r\n"
            f"content-length: {len(body)}\r\n{lines}\r\n"
        ).encode()
        if self._in_use < self.limit:
            self._in_use += 1
        else:
            await self._take_slot()
        self.sent += 1
        connection: _Connection | None = None
        try:
            connection = await self._connection()
            connection.send(head + body)
            while connection.head is None:
                await connection.wait(self.read_timeout)
            status, headers = connection.head
            return KeptResponse(connection, status, headers)
        except BaseException:
            if connection is not None:
                connection.close()
            self._free_slot()
            raise

    async def aclose(self) -> None:
        for connection in list(self._open):
            connection.close()
        self._idle.clear()

    # ------------------------------------------------------------------ the pool

    async def _take_slot(self) -> None:
        while self._in_use >= self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # the slot it was given goes to the next one
                raise
        self._in_use += 1

    def _free_slot(self) -> None:
        self._in_use -= 1
        if self._waiters:
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connection(self) -> _Connection:
        """A kept connection still open and not idle too long, else a new one."""
        now = time.monotonic()
        while self._idle:
            since, connection = self._idle.pop()
            if connection.usable() and now - since < IDLE_SECONDS:
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self), self.host, self.port
                )
        except TimeoutError:
            raise aiohttp.ConnectionTimeoutError(
                f"Connection timeout to host http://{self.host}:{self.port}"
            ) from None
        self.opened += 1
        self._open.add(connection)
        return connection

    def _done(self, connection: _Connection, keep: bool) -> None:
        """A response's connection is free again: kept when its server keeps it alive."""
        if keep and connection.usable():
            self._idle.append((time.monotonic(), connection))
        else:
            connection.close()
        self._free_slot()

    def _lost(self, connection: _Connection) -> None:
        self._open.discard(connection)


class KeptResponse:
    """A response whose head is in: `status`, `headers` (names in lower case, repeated values
    joined by commas), and its body as it comes (`iter_any`). `release()` once the body is read
    to its end gives the connection back to the pool; `close()` drops it."""

    __slots__ = ("_connection", "_finished", "headers", "status")

    def __init__(self, connection: _Connection, status: int, headers: dict[str, str]) -> None:
        self._connection = connection
        self.status, self.headers = status, headers
        self._finished = False

    @property
    def content(self) -> KeptResponse:
        """The body's reader (the response itself), named as aiohttp's is."""
        return self

    def at_eof(self) -> bool:
        """Whether the body was read to its end."""
        connection = self._connection
        return connection.complete and not connection.chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive."""
        connection = self._connection
        while True:
            if connection.chunks:
                yield connection.take()
            elif connection.complete:
                return
            else:
                await connection.wait(connection.pool.read_timeout)

    async def readany(self) -> bytes:
        """The body's bytes that arrived, once some have; b"" at its end (as aiohttp's)."""
        connection = self._connection
        while True:
            if connection.chunks:
                return connection.take()
            if connection.complete:
                return b""
            await connection.wait(connection.pool.read_timeout)

    def release(self) -> None:
        if self._finished:
            return
        self._finished = True
        connection = self._connection
        if not self.at_eof():
            connection.close()
            connection.pool._done(connection, False)
            return
        connection.pool._done(connection, connection.keep_alive)

    def close(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._connection.close()
        self._connection.pool._done(self._connection, False)

    def release_when_read(self, limit: int, seconds: float) -> None:
        """Give the connection back once the rest of the body is in, read and dropped as it
        comes, without waiting for it here: at most `limit` more bytes within `seconds`, else
        the connection is dropped. (A server that ends an event stream right after its answer
        writes the end in a packet of its own.)"""
        if self._finished:
            return
        if self.at_eof():
            self.release()
            return
        self._finished = True
        self._connection.drop_rest(limit, seconds)


class _Connection(asyncio.Protocol):
    """One connection and the response in flight on it, fed by `httptools`' callbacks."""

    def __init__(self, pool: KeptConnections) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.complete = False  # the response's body is all in
        self.keep_alive = False
        self.chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.headers: dict[str, str] = {}
        self.head: tuple[int, dict[str, str]] | None = None  # of the response in flight
        self._informational = False
        self._close_delimited = False
        self._dropping: int | None = None  # bytes of the body still to drop, once released
        self._drop_timer: asyncio.TimerHandle | None = None
        # one read timer per connection: a wait moves `_deadline` on, and the timer, when it
        # fires, fails the wait in progress only if its deadline has passed (`_read_timer_fired`)
        self._read_timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    # ------------------------------------------------------------------ what the caller does

    def send(self, request: bytes) -> None:
        """Send `request`; the head of its response is `head` once in (`wait` for it)."""
        assert self.transport is not None
        self.complete, self.keep_alive, self.head = False, False, None
        self.headers = {}
        self.transport.write(request)

    async def wait(self, timeout: float | None) -> None:
        """Until the parser gives more, the connection ends, or `timeout` seconds pass."""
        if self._error is not None:
            raise self._error
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        if timeout is None:
            self._deadline = math.inf
        else:
            self._deadline = loop.time() + timeout
            timer = self._read_timer
            if timer is None or self._deadline < timer.when():  # (a shorter timeout than before)
                if timer is not None:
                    timer.cancel()
                self._read_timer = loop.call_at(self._deadline, self._read_timer_fired)
        try:
            await waiter
        finally:
            self._waiter = None
        if self._error is not None and not self.chunks and not self.complete:
            raise self._error

    def _read_timer_fired(self) -> None:
        self._read_timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._deadline == math.inf:
            return  # no timed wait in progress: the next one arms the timer again
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:  # a later wait moved the deadline on
            self._read_timer = loop.call_at(self._deadline, self._read_timer_fired)
            return
        waiter.set_exception(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))

    def take(self) -> bytes:
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    def drop_rest(self, limit: int, seconds: float) -> None:
        """The response's reader is done: the rest of its body is dropped as it comes, and the
        connection given back once it is all in (see `KeptResponse.release_when_read`)."""
        self._dropping = limit - self._buffered
        self.chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        if self._dropping < 0 or self._error is not None or self.lost:
            self._dropped(False)
        elif self.complete:
            self._dropped(self.keep_alive)
        else:
            loop = asyncio.get_running_loop()
            self._drop_timer = loop.call_later(seconds, self._dropped, False)

    def _dropped(self, keep: bool) -> None:
        """The rest of a released body is in (`keep`: and the connection may serve again), or
        will not be: the connection goes back to the pool, or is closed."""
        if self._dropping is None:
            return
        self._dropping = None
        if self._drop_timer is not None:
            self._drop_timer.cancel()
            self._drop_timer = None
        if not keep:
            self.close()
        self.pool._done(self, keep)

    def usable(self) -> bool:
        """Whether a request may be sent on it: its server has not ended it (an end the loop
        has seen but not yet reported as lost included)."""
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    # ------------------------------------------------------------------ asyncio's callbacks

    def eof_received(self) -> bool:
        self.lost = True  # the server ended its side: no request goes on it again
        return False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's subclasses none

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(aiohttp.ClientPayloadError(f"the server's response is not HTTP: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        self.pool._lost(self)
        self._dropped(False)
        if self.head is not None and self._close_delimited and not self.complete:
            self.complete = True  # a body without a length ends with its connection
            self._wake()
        elif not self.complete:
            self._fail(aiohttp.ServerDisconnectedError())

    # ------------------------------------------------------------------ httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        key = _NAMES.get(name)
        if key is None:
            key = name.decode("latin-1").lower()
            if len(_NAMES) < _NAMES_KEPT:
                _NAMES[name] = key
        text = value.decode("latin-1")
        known = self.headers.get(key)
        self.headers[key] = text if known is None else f"{known}, {text}"

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        headers, self.headers = self.headers, {}
        if 100 <= status < 200:  # an interim response: the final one follows
            self._informational = True
            return
        self._close_delimited = "content-length" not in headers and "chunked" not in headers.get(
            "transfer-encoding", ""
        )
        self.head = (status, headers)
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._dropping is not None:
            self._dropping -= len(body)
            if self._dropping < 0:
                self._dropped(False)
            return
        self.chunks.append(body)
        self._buffered += len(body)
        if self._buffered > READ_AHEAD and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        if self._dropping is not None:
            self._dropped(self.keep_alive)
            return
        self._wake()

    # ------------------------------------------------------------------ waking the caller

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._wake()
