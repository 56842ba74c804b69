"""The event stream a lean `tools/call` answers on once it runs long (bridge/serve/mcp_lean.py):
the headers the SDK's transports send before an event stream of each era, and the keep-alive
comments they send on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from starlette.types import Send

__all__ = [
    "HANDSHAKE_SSE_HEADERS",
    "MODERN_SSE_HEADERS",
    "KeptAlive",
    "handshake_ping",
    "modern_ping",
]

# What the SDK's transports send before a handshake-era event stream and a 2026-07-28 one.
HANDSHAKE_SSE_HEADERS = [
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"content-type", b"text/event-stream"),
]
MODERN_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]


class KeptAlive:
    """The event stream a call's answer goes on once it runs long: `keep_alive` opens it and
    sends a comment (`ping()`) every `every` seconds, as the SDK's event stream of the era does
    (`pinger`, the task that sends them, None until then); `settle` stops the comments before
    the answer is written."""

    def __init__(
        self,
        send: Send,
        headers: list[tuple[bytes, bytes]],
        ping: Callable[[], bytes],
        every: float,
    ) -> None:
        self.send, self.headers, self.ping, self.every = send, headers, ping, every
        self.open = False
        self.pinger: asyncio.Task[None] | None = None

    def keep_alive(self) -> None:
        self.pinger = asyncio.ensure_future(self._ping())

    async def _ping(self) -> None:
        self.open = True
        await self.send({"type": "http.response.start", "status": 200, "headers": self.headers})
        while True:
            await self.send({"type": "http.response.body", "body": self.ping(), "more_body": True})
            await asyncio.sleep(self.every)

    async def settle(self) -> None:
        if self.pinger is not None:
            self.pinger.cancel()
            await asyncio.gather(self.pinger, return_exceptions=True)


def handshake_ping() -> bytes:
    return f": ping - {datetime.now(UTC)}\r\n\r\n".encode()


def modern_ping() -> bytes:
    return b": ping\r\n\r\n"
