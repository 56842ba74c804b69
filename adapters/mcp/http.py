"""How much of an MCP server's HTTP answer the bridge reads: `max_response_bytes` of one answer.

A JSON answer and the event stream answering one POST are counted whole, as their bytes arrive
(decoded, when the server compressed them), and refused past the bound: nothing more is read
and the connection is closed. A POST's stream that ends without the answer, having given an
event id, is resumed by the SDK with GETs naming it (`Last-Event-ID`), made in the POST's own
task; what they bring counts toward the POST's bound. A stream that lasts as long as the session
(the GET stream of server messages, a 2026-07-28 `subscriptions/listen` stream) is bounded per
event instead, by the SDK's `max_sse_event_size`. The SDK answers the request whose answer was refused with an
error carrying `TOO_LARGE`, which the adapter reads as `result_too_large`; the session goes on.

The SDK resumes a stream as often as the server ends it, at the pace the server asks (`retry:`,
which may be 0), even once the call is over, and each resumption nests a call deeper: about 950
of them failed the whole session. An answer is resumed at most `MAX_RESUMPTIONS` times; the
next resumption fails its request with an error carrying `RESUMED_TOO_OFTEN`.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2

__all__ = [
    "MAX_RESUMPTIONS",
    "RESUMED_TOO_OFTEN",
    "TOO_LARGE",
    "answer_too_large",
    "bound_answer",
    "quiet_sdk_refusals",
]

TOO_LARGE = "answered more than max_response_bytes="
RESUMED_TOO_OFTEN = "times without the answer"
MAX_RESUMPTIONS = 100
_LISTEN = "subscriptions/listen"
# What of an event stream the adapter reads on, once it has what it wanted, to reuse the connection.
DRAIN_BYTES = 64 << 10
DRAIN_SECONDS = 0.1


class _Count:
    """Bytes of one request's answer read so far, over its POST's stream and the GETs resuming it."""

    def __init__(self) -> None:
        self.seen = 0
        self.resumptions = 0


# The task of each request whose POST was answered with an event stream -> the count of its answer.
# The SDK resumes that stream, when it ends without the answer, in the same task; the GET stream of
# server messages has a task of its own, which never POSTs.
_ANSWERS: weakref.WeakKeyDictionary[asyncio.Task[Any], _Count] = weakref.WeakKeyDictionary()


class _SSEAnswerTooLarge(httpx2.SSEError):
    """An event stream past the bound (the SDK fails the request it answers, and goes on)."""


class _SSEResumedTooOften(httpx2.SSEError):
    """A stream resumed more than MAX_RESUMPTIONS times (the SDK fails the request, and goes on)."""


class _Refused(httpx2.AsyncByteStream):
    """A body refused before a byte of it is read."""

    def __init__(self, inner: httpx2.AsyncByteStream, error: Exception) -> None:
        self.inner, self.error = inner, error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise self.error
        yield b""  # an async generator, as httpx reads it

    async def aclose(self) -> None:
        await self.inner.aclose()


class _JSONAnswerTooLarge(httpx2.StreamError):
    """A JSON answer past the bound (the SDK fails the request it answers, and goes on)."""


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
        limit: int,
        declared: int | None,
        error: type[Exception],
        what: str,
        count: _Count,
    ) -> None:
        self.chunks, self.close, self.limit, self.declared, self.error, self.what = (
            chunks,
            close,
            limit,
            declared,
            error,
            what,
        )
        self.count = count
        self.ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        count = self.count
        if (
            self.declared is not None and count.seen + self.declared > self.limit
        ):  # refused before a byte is read
            raise self.error(f"{self.what} {TOO_LARGE}{self.limit}")
        async for chunk in self.chunks:
            count.seen += len(chunk)
            if count.seen > self.limit:
                self.ended = True  # refused: nothing more of it is read
                raise self.error(f"{self.what} {TOO_LARGE}{self.limit}")
            yield chunk
        self.ended = True

    async def aclose(self) -> None:
        """Close the body; an event stream left once its answer is in is first read to its end
        (`DRAIN_BYTES` and `DRAIN_SECONDS` at most), which the server writes right after the
        answer: a body read to its end leaves its connection to the pool for the next request,
        where one closed early is dropped and the next request pays a new connection (and TLS
        handshake)."""
        try:
            if not self.ended and self.error is _SSEAnswerTooLarge:
                with anyio.move_on_after(DRAIN_SECONDS):
                    drained = 0
                    async for chunk in self.chunks:
                        drained += len(chunk)
                        if drained > DRAIN_BYTES:
                            break
        finally:
            await self.close()


def bound_answer(response: httpx2.Response, limit: int, what: str) -> None:
    """Make `response` (not yet read) refuse its body past `limit` bytes, unless it is a stream
    of session length, whose events the SDK bounds one by one. A GET resuming a POST's event
    stream shares that POST's count. `what` names the server."""
    request = response.request
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    events = kind == "text/event-stream"
    task = asyncio.current_task()
    count = _Count()
    if events and request.headers.get("mcp-method") == _LISTEN:
        return
    if events and request.method == "GET":
        resumed = _ANSWERS.get(task) if task is not None else None
        if resumed is None:  # the GET stream of server messages, or a resumed listen stream
            return
        count = resumed
        count.resumptions += 1
        if count.resumptions > MAX_RESUMPTIONS:
            inner = response.stream
            assert isinstance(inner, httpx2.AsyncByteStream)
            response.stream = _Refused(
                inner,
                _SSEResumedTooOften(
                    f"{what} ended the event stream of one answer {MAX_RESUMPTIONS} {RESUMED_TOO_OFTEN}; it is not resumed again"
                ),
            )
            return
    elif events and task is not None:
        _ANSWERS[task] = count
    inner = response.stream
    assert isinstance(inner, httpx2.AsyncByteStream)
    encoded = [
        v.strip().lower() for v in response.headers.get_list("content-encoding", split_commas=True)
    ]
    if any(v and v != "identity" for v in encoded):
        # counted as the SDK would get them: decoded (a few kilobytes of gzip can inflate a
        # thousandfold), by a response of the same headers; the SDK then reads them as they are
        raw = httpx2.Response(
            response.status_code, headers=response.headers, stream=inner, request=request
        )
        chunks: AsyncIterator[bytes] = raw.aiter_bytes()
        close, declared = raw.aclose, None
        del response.headers["content-encoding"]
        if "content-length" in response.headers:
            del response.headers["content-length"]
    else:
        chunks, close = inner.__aiter__(), inner.aclose
        length = response.headers.get("content-length", "")
        declared = int(length) if length.isdigit() else None
    error = _SSEAnswerTooLarge if events else _JSONAnswerTooLarge
    response.stream = _BoundedStream(chunks, close, limit, declared, error, what, count)


def answer_too_large(message: str, limit: int) -> bool:
    """Whether an error the SDK made up for a request says its answer was past the bound: ours,
    or the SDK's own for one event (`Server-sent event exceeded the N byte limit.`)."""
    return f"{TOO_LARGE}{limit}" in message or f"exceeded the {limit} byte limit" in message


class _QuietRefusals(logging.Filter):
    """Drops the SDK's error logs, with their tracebacks, of a JSON answer refused past the bound
    (the call's result says what happened, once), and of an event that came as the session
    closed (`Error parsing SSE message` for the session's reader gone: nothing failed to parse)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, _JSONAnswerTooLarge):
            return False
        return not (
            isinstance(error, (anyio.BrokenResourceError, anyio.ClosedResourceError))
            and record.msg == "Error parsing SSE message"
        )


def quiet_sdk_refusals() -> None:
    """Install the filter on the SDK's streamable HTTP logger (once per process)."""
    logger = logging.getLogger("mcp.client.streamable_http")
    if not any(isinstance(f, _QuietRefusals) for f in logger.filters):
        logger.addFilter(_QuietRefusals())
