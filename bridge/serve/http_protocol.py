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
parser's URL splitting takes, is told so."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from bridge.search import MAX_QUERY_CHARS
from bridge.serve.rest_http import ApiError, error_response

__all__ = ["CORK_LIMIT", "MAX_URL_BYTES", "CorkedHttpToolsProtocol", "CorkedTransport"]

CORK_LIMIT = 64 * 1024
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

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a `CorkedTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser rejects, as the bridge's structured error."""
        if len(getattr(self, "url", b"")) > MAX_URL_BYTES:  # set when a request line begins
            message = (f"the request's URL is over {MAX_URL_BYTES:,} bytes, more than the server reads: send a shorter "
                       f"URL (GET /search reads the first {MAX_QUERY_CHARS:,} characters of q; a tool's arguments go in a POST body)")
        else:
            message = "the request is not HTTP/1.1 the server can read (its request line or headers are malformed)"
        body = error_response(ApiError(400, "invalid_arguments", message)).body  # rendered as every error body is
        head = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n"]
        self.transport.write(b"".join([*head, body]))
        self.transport.close()
