"""uvicorn's httptools protocol with corked writes: what the app writes in one turn of the event
loop leaves in one `send()`.

uvicorn writes a response's status line and headers as soon as the app starts the response,
and its body in a second write. On loopback each `send()` costs tens of microseconds of CPU
(the kernel delivers the segment to the peer inside the call), so a small JSON answer paid
for two. Here writes are gathered and sent together at the end of the current loop turn, the
way a socket is corked and uncorked around a burst of writes; a burst over `CORK_LIMIT` bytes
leaves at once, so flow control still sees large bodies as they are written."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CORK_LIMIT", "CorkedHttpToolsProtocol", "CorkedTransport"]

CORK_LIMIT = 64 * 1024


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
