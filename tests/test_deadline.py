"""`Deadline` answers as `asyncio.timeout` does: each case runs with both and must come out the
same (what leaves the block, and the task's cancel count after it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import pytest

from bridge.deadline import Deadline


class _AsyncDeadline:
    """`Deadline` behind `async with`, so one case body serves both kinds."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    async def __aenter__(self) -> None:
        self.deadline = Deadline(self.seconds)
        self.deadline.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.deadline.__exit__(exc_type, exc, tb)


KINDS: dict[str, Callable[[float | None], Any]] = {
    "asyncio": asyncio.timeout,
    "deadline": _AsyncDeadline,
}

FOREVER = 60.0


async def _outcome(body: Callable[[], Awaitable[Any]], cancel_after_start: bool = False) -> Any:
    """What `body` run in a task of its own gives: its value or its exception's type, with the
    task's cancel count as it ended (cancel count read inside the task)."""
    started = asyncio.Event()
    counts: list[int] = []

    async def run() -> Any:
        try:
            return await body_with(started)
        finally:
            counts.append(asyncio.current_task().cancelling())  # type: ignore[union-attr]

    async def body_with(started: asyncio.Event) -> Any:
        started.set()
        return await body()

    task = asyncio.create_task(run())
    await started.wait()
    if cancel_after_start:
        task.cancel()
    try:
        value = await task
    except BaseException as exc:
        value = type(exc).__name__
    return value, counts[0]


def _cases(timeout: Callable[[float | None], Any]) -> dict[str, Callable[[], Awaitable[Any]]]:
    async def in_time() -> Any:
        async with timeout(FOREVER):
            await asyncio.sleep(0)
            return "done"

    async def runs_past() -> Any:
        async with timeout(0.01):
            await asyncio.Event().wait()

    async def at_once() -> Any:
        async with timeout(0):
            await asyncio.sleep(0)
            return "not reached"

    async def never() -> Any:
        async with timeout(None):
            await asyncio.sleep(0.01)
            return "done"

    async def swallows_and_returns() -> Any:
        async with timeout(0.01):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return "swallowed"

    async def other_error_after_expiry() -> Any:
        async with timeout(0.01):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise ValueError("after") from None

    async def caught_then_goes_on() -> Any:
        try:
            async with timeout(0.01):
                await asyncio.Event().wait()
        except TimeoutError:
            await asyncio.sleep(0)  # the task is not canceled any more
            return "caught"

    async def inner_shorter_than_outer_asyncio() -> Any:
        async with asyncio.timeout(FOREVER):
            try:
                async with timeout(0.01):
                    await asyncio.Event().wait()
            except TimeoutError:
                return "inner"

    async def outer_asyncio_shorter() -> Any:
        try:
            async with asyncio.timeout(0.01):
                async with timeout(FOREVER):
                    await asyncio.Event().wait()
        except TimeoutError:
            return "outer"

    async def outer_same_kind_shorter() -> Any:
        try:
            async with timeout(0.01):
                async with timeout(FOREVER):
                    await asyncio.Event().wait()
        except TimeoutError:
            return "outer"

    async def inner_same_kind_shorter() -> Any:
        async with timeout(FOREVER):
            try:
                async with timeout(0.01):
                    await asyncio.Event().wait()
            except TimeoutError:
                await asyncio.sleep(0)
                return "inner"

    async def expires_then_canceled() -> Any:
        async with timeout(0.01):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()  # a second cancellation, asked while the first is handled
                raise

    return {
        name: case
        for name, case in locals().items()
        if callable(case) and not name.startswith("_") and name != "timeout"
    }


EXPECTED = {
    "in_time": ("done", 0),
    "runs_past": ("TimeoutError", 0),
    "at_once": ("TimeoutError", 0),
    "never": ("done", 0),
    "swallows_and_returns": ("swallowed", 0),
    "other_error_after_expiry": ("ValueError", 0),
    "caught_then_goes_on": ("caught", 0),
    "inner_shorter_than_outer_asyncio": ("inner", 0),
    "outer_asyncio_shorter": ("outer", 0),
    "outer_same_kind_shorter": ("outer", 0),
    "inner_same_kind_shorter": ("inner", 0),
    "expires_then_canceled": ("CancelledError", 1),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
async def test_deadline_answers_as_asyncio_timeout(case: str) -> None:
    outcomes = {kind: await _outcome(_cases(timeout)[case]) for kind, timeout in KINDS.items()}
    assert outcomes == {"asyncio": EXPECTED[case], "deadline": EXPECTED[case]}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_caller_cancellation_inside_a_deadline_stays_a_cancellation(kind: str) -> None:
    async def body() -> Any:
        async with KINDS[kind](FOREVER):
            await asyncio.Event().wait()

    assert await _outcome(body, cancel_after_start=True) == ("CancelledError", 1)


async def test_caller_cancellation_before_a_deadline_fires_stays_a_cancellation() -> None:
    """The caller cancels; the body, shielding itself, outlives the deadline, which fires too."""

    def body(timeout: Callable[[float | None], Any]) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            async with timeout(0.01):
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    await asyncio.shield(asyncio.sleep(0.05))
                    raise

        return run

    outcomes = {
        kind: await _outcome(body(timeout), cancel_after_start=True)
        for kind, timeout in KINDS.items()
    }
    assert outcomes["deadline"] == outcomes["asyncio"]
    assert outcomes["asyncio"][0] == "CancelledError"


async def test_deadline_needs_a_task() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[BaseException | None] = loop.create_future()

    def outside() -> None:
        try:
            Deadline(1)
        except RuntimeError as exc:
            done.set_result(exc)
        else:
            done.set_result(None)

    loop.call_soon(outside)
    assert isinstance(await done, RuntimeError)
