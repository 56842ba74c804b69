"""How many calls an upstream takes at once: `CallSlots`, a first-come first-served semaphore
that a call with a free slot enters and leaves in two plain steps."""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["CallSlots"]


class CallSlots:
    """At most `limit` holders at once (`async with`), the others waiting in the order they
    came. A leaving holder hands its slot to the first waiter directly, so a newcomer never
    overtakes one that waits; a waiter canceled once handed a slot passes it on."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if not waiter.cancelled():  # handed a slot as it was canceled: passed on
                self._leave()
            elif waiter in self._waiters:  # (a leaving holder may have dropped it already)
                self._waiters.remove(waiter)
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._leave()

    def _leave(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
