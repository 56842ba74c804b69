"""uvicorn's httptools protocol with corked writes: what the app writes in one turn of the event
loop leaves in one `send()`.

uvicorn writes a response's status line and headers as soon as the app starts the response,
and its body in a second write. On loopback each `send()` costs tens of microseconds of CPU
(the kernel delivers the segment to the peer inside the call), so a small JSON answer paid
for two. Here writes are gathered and sent together at the end of the current loop turn, the
way a socket is corked and uncorked around a burst of writes; a burst over `CORK_LIMIT` bytes
leaves at once, so flow control still sees large bodies as they are written.

A request that is not HTTP/1.1 the parser can read gets the bridge's structured error (JSON,
`invalid_arguments`) instead of uvicorn's plain text; a URL over `MAX_URL_BYTES`, the most the
parser's URL splitting takes, is told so.

`BridgeHttpProtocol` also tells an app that asks (`LEAVE_SCOPE_KEY`) when the client of a
request goes away before its answer is complete, without a task waiting on `receive()` per
request for an `http.disconnect`.

It adds what uvicorn leaves out (it arms its keep-alive timeout only after a
response, disarms it at a request's first byte, and its `limit_concurrency` counts connections
only once a request's headers are in): every connection is timed while it waits for a request
(`server.idle_timeout`), for the rest of a request's head once its first byte came
(`header_timeout`) and for its body (`body_timeout`), whatever the route; and it is counted
in a `ConnectionTable`, which caps connections in all and per client address.

This is the one module that uses uvicorn's internals (its protocol's hooks and request cycle);
tests/serve/test_http_protocol.py fails when a release moves one of them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from bridge.config import ServerConfig
from bridge.search import MAX_QUERY_CHARS
from bridge.serve.connections import ConnectionTable
from bridge.serve.rest_http import ApiError, error_response

__all__ = [
    "CORK_LIMIT",
    "LEAVE_SCOPE_KEY",
    "MAX_URL_BYTES",
    "BridgeHttpProtocol",
    "CorkedHttpToolsProtocol",
    "CorkedTransport",
    "http_protocol",
]

log = logging.getLogger("bridge.serve")

CORK_LIMIT = 64 * 1024
# Where `BridgeHttpProtocol` leaves, in a request's scope, `on_leave(callback)`: `callback()` is
# called once if the connection is lost while the request is being answered; `on_leave(None)`
# takes it back (an app does before it writes the answer's end).
LEAVE_SCOPE_KEY = "a2t_bridge.on_leave"
# httptools splits a URL with 16-bit offsets: a longer one cannot be read.
MAX_URL_BYTES = 65_535


class CorkedTransport:
    """A transport whose writes wait for the end of the loop turn (or `CORK_LIMIT` bytes), then
    go out as one; everything else is the wrapped transport's."""

    __slots__ = ("_loop", "_pending", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))
        self._size += len(data)
        if self._size >= CORK_LIMIT:
            self.flush()

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what was written since the last flush (a no-op when nothing was)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._size = 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._size = 0
        self._transport.abort()

    def is_closing(self) -> bool:  # (asked at each request: not through __getattr__)
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a `CorkedTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser rejects, as the bridge's structured error."""
        if len(getattr(self, "url", b"")) > MAX_URL_BYTES:  # set when a request line begins
            message = (
                f"the request's URL is over {MAX_URL_BYTES:,} bytes, more than the server reads: send a shorter "
                f"URL (GET /search reads the first {MAX_QUERY_CHARS:,} characters of q; a tool's arguments go in a POST body)"
            )
        else:
            message = "the request is not HTTP/1.1 the server can read (its request line or headers are malformed)"
        self.answer_and_close(ApiError(400, "invalid_arguments", message))

    def answer_and_close(self, error: ApiError) -> None:
        """Write `error` as a whole response, outside any request cycle, and close."""
        body = error_response(error).body  # rendered as every error body is
        head = [STATUS_LINE[error.status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        for key, text in error.headers.items():
            head += [key.lower().encode("latin-1"), b": ", text.encode("latin-1"), b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join([*head, body]))
        self.transport.close()


Waiting = Literal["headers", "body"] | None


class BridgeHttpProtocol(CorkedHttpToolsProtocol):
    """The corked protocol with the connection limits of `server:`. Made per server by
    `http_protocol`, which gives it its `table`; served with uvicorn's `ws="none"` (no route
    takes a WebSocket, and an upgrade would hand the connection to a protocol of uvicorn's)."""

    table: ClassVar[ConnectionTable]
    idle_timeout: ClassVar[float]
    header_timeout: ClassVar[float]
    body_timeout: ClassVar[float]

    address = ""
    idle_since: float | None = None  # Held: monotonic time since no request of it is being served
    _waiting: Waiting = None  # the part of a request the parser waits for
    _timed: Waiting = None  # the part `_deadline` times
    _deadline: asyncio.TimerHandle | None = None
    _admitted = False
    _leaving: Callable[[], object] | None = None  # `on_leave`'s callback

    def on_leave(self, callback: Callable[[], object] | None) -> None:
        """Call `callback` if the connection is lost (None: call nothing)."""
        self._leaving = callback

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.address = self.client[0] if self.client else ""
        self.idle_since = self.loop.time()
        refusal = self.table.admit(self)
        if refusal is not None:
            self.answer_and_close(refusal)
            return
        self._admitted = True
        # uvicorn's keep-alive timer, armed here too: it closes a connection that sends nothing
        self.timeout_keep_alive = self.idle_timeout  # type: ignore[assignment]
        self.timeout_keep_alive_task = self.loop.call_later(
            self.idle_timeout, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.table.release(self)
        self._disarm()
        super().connection_lost(exc)
        leaving, self._leaving = self._leaving, None
        if leaving is not None:
            leaving()

    def let_go(self) -> None:
        """Held: close an idle connection to make room for a new one."""
        self._disarm()
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._admitted:  # refused: answered and closing
            return
        if self._waiting is None and (self.cycle is None or self.cycle.response_complete):
            # a request's first bytes: line ends before its request line, which the parser
            # skips without beginning a message, count too (else they would hold it untimed)
            self._waiting = "headers"
        super().data_received(data)
        if self._waiting != self._timed:
            self._arm()

    # the parser's callbacks: only which part of a request is awaited is noted here; the timer
    # follows once the data received is parsed (most requests arrive whole, and arm none)
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._waiting = "headers"

    def on_headers_complete(self) -> None:
        scope: Any = self.scope  # the scope uvicorn's cycle is given
        scope[LEAVE_SCOPE_KEY] = self.on_leave
        super().on_headers_complete()
        self._waiting = "body"
        self.idle_since = None

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._waiting = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.cycle is None or self.cycle.response_complete:  # no pipelined request started
            self.idle_since = self.loop.time()

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _arm(self) -> None:
        if self._deadline is not None:  # `_disarm`, in line: armed at most twice a request
            self._deadline.cancel()
            self._deadline = None
        self._timed = self._waiting
        if self._timed is not None and not self.transport.is_closing():
            seconds = self.header_timeout if self._timed == "headers" else self.body_timeout
            self._deadline = self.loop.call_later(seconds, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        if self._timed == "headers":
            if self.cycle is not None and not self.cycle.response_complete:
                self.shutdown()  # a pipelined head: closed once the response in flight is written
                return
            self._timed_out("headers", self.header_timeout)
            return
        if self.flow.read_paused:  # the bridge stopped reading (a pipelined request waits)
            self._arm()
            return
        cycle = self.cycle
        if cycle is None or cycle.response_started:
            log.info(
                "closed the connection from %s: its request's body did not arrive within "
                "%g s (server.body_timeout)",
                self.address,
                self.body_timeout,
            )
            self.transport.close()
            return
        # the app waiting for the body hears the client is gone, and what it writes goes nowhere
        cycle.disconnected = True
        cycle.message_event.set()
        self._timed_out("body", self.body_timeout)

    def _timed_out(self, part: Literal["headers", "body"], seconds: float) -> None:
        log.info(
            "closed the connection from %s: its request's %s did not arrive within %g s "
            "(server.%s_timeout)",
            self.address,
            part,
            seconds,
            part.removesuffix("s"),
        )
        key = f"{part.removesuffix('s')}_timeout"
        self.answer_and_close(
            ApiError(
                408,
                "invalid_arguments",
                f"the request's {part} did not arrive within {seconds:g} s (server.{key})",
                details={key: seconds},
            )
        )


def http_protocol(server: ServerConfig) -> type[BridgeHttpProtocol]:
    """The protocol class of one server: its own connection table, under `server`'s limits."""
    return type(
        "BridgeHttpProtocol",
        (BridgeHttpProtocol,),
        {
            "table": ConnectionTable(server),
            "idle_timeout": server.idle_timeout,
            "header_timeout": server.header_timeout,
            "body_timeout": server.body_timeout,
        },
    )
