"""How long a call may run: `Deadline`, `asyncio.timeout` as a plain `with` block that arms
one loop timer and does nothing else on the way in and out."""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["Deadline"]


class Deadline:
    """`with Deadline(seconds):` inside a task cancels the task when `seconds` have passed and
    turns the `CancelledError` that comes out of the block into `TimeoutError`, as
    `asyncio.timeout` does: only when no other cancellation was asked for since the block
    began (the task's cancel count, uncanceled once here, is back where it was), so a caller's
    cancellation, or an outer timeout's, still comes out as `CancelledError`.
    `seconds` None never times out. Made only in the `with` statement: making it arms the
    timer."""

    __slots__ = ("_cancelling", "_task", "_timer", "expired")

    _timer: asyncio.Handle | None

    def __init__(self, seconds: float | None) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a Deadline runs inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self.expired = False
        if seconds is None:
            self._timer = None
        elif seconds > 0:
            self._timer = task.get_loop().call_later(seconds, self._expire)
        else:  # due already: at the loop's next turn, before what the block awaits resumes
            self._timer = task.get_loop().call_soon(self._expire)

    def _expire(self) -> None:
        self._timer = None
        self.expired = True
        self._task.cancel()

    def __enter__(self) -> Deadline:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timer = self._timer
        if timer is not None:
            timer.cancel()
            self._timer = None
        elif (
            self.expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc
