"""How long the bridge waits for an MCP server's answer to a POST that carries no request.

Over streamable HTTP the SDK sends a notification (`notifications/initialized`,
`notifications/cancelled`), or its answer to a request of the server, in the one task that
writes every message of the session, and waits there for the HTTP answer (`202 Accepted`): a
server that never answered such a POST held every later message of the session behind it, until
the HTTP read timeout (300 s). Such a POST is given `bound` seconds; past them, it is abandoned
(its connection closed), counted lost, and the SDK is told `202`, so the session goes on. So is
one that fails (a connection the server or a proxy closed without an answer): the SDK's writer
ended on it, and every later call of the session failed until a liveness probe noticed. A
request keeps the HTTP client's timeouts and its call's own `timeout`, and a request that cannot
be sent still ends the session.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx2

from adapters.mcp.get_stream import WatchedClient

__all__ = ["ANSWER", "NoticeClient", "NoticePosts", "notice_method"]

ANSWER = (
    "an answer to a request of the server"  # what a POST carrying a JSON-RPC response is called
)
# A body larger than this is taken for a request without being parsed (the SDK's notifications and
# answers are a few hundred bytes; a tools/call may carry megabytes of arguments).
_NOTICE_BYTES = 1 << 16


def notice_method(request: httpx2.Request) -> str | None:
    """What a POST carries when it is not a request: the notification's method, or ANSWER for a
    JSON-RPC response (an object with no `method`); None for a request (`method` and `id`)."""
    if request.method != "POST":
        return None
    try:
        body = request.content
    except httpx2.RequestNotRead:
        return None
    if len(body) > _NOTICE_BYTES:
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    method = message.get("method")
    if not isinstance(method, str):
        return ANSWER
    return None if "id" in message else method


class NoticePosts:
    """The POSTs of one session that carry no request: each is waited for at most `bound`
    seconds; `on_lost(method, bound, error)` is called for each one abandoned at its bound (error
    None) or failed."""

    def __init__(
        self, bound: float, on_lost: Callable[[str, float, Exception | None], None]
    ) -> None:
        self.bound = bound
        self.on_lost = on_lost
        self.waiting: dict[
            anyio.CancelScope, str
        ] = {}  # the POSTs waiting for their answer -> what they carry
        self.lost: set[str] = set()  # what the POSTs abandoned carried

    async def post(
        self, method: str, request: httpx2.Request, send: Callable[[], Any]
    ) -> httpx2.Response:
        """`send()` the POST, waiting at most `bound` for its answer; past it, or when it fails,
        a `202` made up."""
        bound = self.bound
        error: Exception | None = None
        with anyio.CancelScope(deadline=anyio.current_time() + bound) as scope:
            self.waiting[scope] = method
            try:
                return await send()
            except httpx2.TransportError as exc:
                error = exc
            finally:
                del self.waiting[scope]
        # its deadline passed, or it failed
        self.lost.add(method)
        self.on_lost(method, bound, error)
        return httpx2.Response(202, request=request)  # what the SDK expects of a notification


class NoticeClient(WatchedClient):
    """The HTTP client the SDK is given: a `WatchedClient` whose POSTs that carry no request are
    bounded by `notices`."""

    def __init__(self, *args: Any, notices: NoticePosts, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notices = notices

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        method = notice_method(request)
        if method is None:
            return await super().send(request, **kwargs)
        return await self.notices.post(
            method, request, lambda: super(NoticeClient, self).send(request, **kwargs)
        )
