"""Whether the SDK still holds an MCP server's session-long GET stream of server messages open.

Over streamable HTTP (handshake era) the server's own messages, `notifications/tools/list_changed`
among them, come on one GET stream that the SDK re-opens when it ends, but gives up on after
`MAX_RECONNECTION_ATTEMPTS` failures in a row (an event past `max_response_bytes`, a connection a
proxy cut, an HTTP error), without a word to the session. `WatchedClient` is the HTTP client the
SDK is given: it sees each attempt of that stream and how it ends, counts the failures as the
SDK does, and calls `on_given_up` once the SDK has stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
from mcp.client.streamable_http import MAX_RECONNECTION_ATTEMPTS

from adapters.mcp.sdk import GET_STREAM_TASK

__all__ = ["GetStreamWatch", "WatchedClient"]

# anyio names a task by the function it runs: the SDK runs its GET stream, and only it, in a task
# of this method (a GET that resumes a POST's stream runs in that POST's task)


class GetStreamWatch:
    """The failures in a row of one session's GET stream; `on_given_up(reason)` is called once,
    when they reach the SDK's limit. A server that refuses the GET (405: it offers no such
    stream) has nothing to watch."""

    def __init__(self, on_given_up: Callable[[str], None]) -> None:
        self.on_given_up = on_given_up
        self.failures = 0
        self.over = False

    def failed(self, why: str) -> None:
        if self.over:
            return
        self.failures += 1
        if self.failures >= MAX_RECONNECTION_ATTEMPTS:
            self.over = True
            self.on_given_up(why)

    def ended(self) -> None:
        """The server ended the stream cleanly: the SDK re-opens it and starts counting again."""
        self.failures = 0

    def not_offered(self) -> None:
        self.over = True


class _WatchedStream(httpx2.AsyncByteStream):
    """The GET stream's body: read to its end (the server closed it), or not (a read error, or
    the SDK dropped it for an event past its bound)."""

    def __init__(self, inner: httpx2.AsyncByteStream, watch: GetStreamWatch) -> None:
        self.inner, self.watch = inner, watch
        self.ended = self.failed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.inner:
                yield chunk
        except Exception as exc:
            self.failed = True
            self.watch.failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            raise
        self.ended = True
        self.watch.ended()

    async def aclose(self) -> None:
        try:
            if not self.ended and not self.failed and not _cancelling():
                self.watch.failed(
                    "the stream was dropped before its end (an event past max_response_bytes, or not an event stream)"
                )
        finally:
            await self.inner.aclose()


def _cancelling() -> bool:
    """Whether the current task is being cancelled (the session is ending): no failure."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class WatchedClient(httpx2.AsyncClient):
    """An `httpx2.AsyncClient` that reports each attempt of the SDK's GET stream to `watch`, and
    each request that gets no answer to `on_error` (the SDK ends the session over a failed POST
    without saying why to the request that made it)."""

    def __init__(
        self,
        *args: Any,
        watch: GetStreamWatch,
        on_error: Callable[[Exception], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.watch = watch
        self.on_error = on_error

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        try:
            return await self._send_watched(request, **kwargs)
        except httpx2.TransportError as exc:
            if self.on_error is not None:
                self.on_error(exc)
            raise

    async def _send_watched(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        task = asyncio.current_task()
        if request.method != "GET" or task is None or not task.get_name().endswith(GET_STREAM_TASK):
            return await super().send(request, **kwargs)
        try:
            response = await super().send(request, **kwargs)
        except Exception as exc:
            if not _cancelling():
                self.watch.failed(
                    f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                )
            raise
        if response.is_redirect:
            pass  # followed within the origin, or not followed at all (the SDK says so): not a failure it retries
        elif 400 <= response.status_code < 500 and response.status_code not in (408, 429):
            # 405: the server offers no such stream; another refusal of the GET itself would be
            # the same for a new session (a 404, the session forgotten, reconnects on its own)
            self.watch.not_offered()
        elif response.status_code >= 400:
            self.watch.failed(f"HTTP {response.status_code}")
        else:
            inner = response.stream
            assert isinstance(inner, httpx2.AsyncByteStream)
            response.stream = _WatchedStream(inner, self.watch)
        return response
