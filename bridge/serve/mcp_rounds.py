"""Calls of 2026-07-28 clients that an upstream asks a question during (`elicitation/create`,
`sampling/createMessage`), in that era's own way: the call answers an `input_required` result
carrying the question and a `requestState`, and goes on, still running, when the client calls
the tool again with its answer and that state (the multi-round-trip flow).

Only a client that declared elicitation or sampling is served so; the call then runs in a task
of its own, whose questions come back here through its `Asker`. A call waiting for an answer is
held in this process (a retry must reach the same replica) for at most `hold` seconds, and never
beyond its own timeout; a retry naming no call held here is refused (-32602).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from bridge.translate.mcp import is_modern
from bridge.upstream import CALLER_ASKS, AskRefused

__all__ = ["HOLD", "Rounds"]

HOLD = 300.0  # seconds a call waits for the client's answer at most
_IN_ROUND: contextvars.ContextVar[bool] = contextvars.ContextVar("in_round", default=False)
_REFUSALS = {
    "elicitation/create": ("elicitation", types.INVALID_PARAMS, "Elicitation not supported"),
    "sampling/createMessage": ("sampling", types.METHOD_NOT_FOUND, "Sampling not supported"),
}
Question = tuple[str, dict[str, Any], "asyncio.Future[dict[str, Any]]"]
Run = Callable[
    [ServerRequestContext[Any, Any], types.CallToolRequestParams], Coroutine[Any, Any, Any]
]


@dataclass
class _Held:
    surface: str
    questions: asyncio.Queue[Question] = field(default_factory=asyncio.Queue)
    waiting: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    task: asyncio.Task[Any] | None = None
    expiry: asyncio.TimerHandle | None = None


class Rounds:
    """The 2026-07-28 calls waiting for their clients' answers."""

    def __init__(self, hold: float = HOLD) -> None:
        self.hold = hold
        self._held: dict[str, _Held] = {}
        self._keys = itertools.count(1)

    def takes(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> bool:
        """Whether the call is a 2026-07-28 one that may be asked, or the retry of one."""
        if not is_modern(ctx.protocol_version) or _IN_ROUND.get():
            return False
        if params.request_state is not None:
            return True
        capabilities = getattr(ctx.session, "client_capabilities", None)
        return capabilities is not None and (
            capabilities.elicitation is not None or capabilities.sampling is not None
        )

    async def call(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: types.CallToolRequestParams,
        surface: str,
        run: Run,
    ) -> Any:
        """The call's result, or an `input_required` result with its upstream's next question."""
        if params.request_state is not None:
            return await self._resume(params, surface)
        held = _Held(surface)
        capabilities = ctx.session.client_capabilities

        async def ask(method: str, question: dict[str, Any]) -> dict[str, Any]:
            capability, code, message = _REFUSALS.get(method, ("", types.METHOD_NOT_FOUND, method))
            if not capability or getattr(capabilities, capability, None) is None:
                raise AskRefused(code, message)
            answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            held.questions.put_nowait((method, question, answer))
            return await answer

        asking, inside = CALLER_ASKS.set(ask), _IN_ROUND.set(True)
        try:
            held.task = asyncio.create_task(run(ctx, params))
        finally:
            CALLER_ASKS.reset(asking)
            _IN_ROUND.reset(inside)
        return await self._next(held)

    async def _resume(self, params: types.CallToolRequestParams, surface: str) -> Any:
        state = params.request_state
        held = self._held.pop(state, None) if state is not None else None
        if held is None or held.surface != surface:
            raise MCPError(
                types.INVALID_PARAMS,
                "no call waits for this requestState (it ended, "
                "or is held by another replica): call the tool again without it",
            )
        if held.expiry is not None:
            held.expiry.cancel()
        answers = params.input_responses or {}
        for key, answer in held.waiting.items():
            if answer.done():
                continue
            given = answers.get(key)
            if given is None:
                answer.set_exception(AskRefused(types.INVALID_PARAMS, f"no answer to {key}"))
            else:
                answer.set_result(given.model_dump(by_alias=True, mode="json", exclude_none=True))
        held.waiting.clear()
        return await self._next(held)

    async def _next(self, held: _Held) -> Any:
        task = held.task
        assert task is not None
        question = asyncio.ensure_future(held.questions.get())
        try:
            await asyncio.wait({task, question}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            question.cancel()
            task.cancel()
            raise
        if not question.done():
            question.cancel()
            return task.result()
        method, asked, answer = question.result()
        key = f"q{next(self._keys)}"
        held.waiting[key] = answer
        state = secrets.token_urlsafe(18)
        self._held[state] = held
        held.expiry = asyncio.get_running_loop().call_later(self.hold, self._expire, state)
        task.add_done_callback(lambda _: self._held.pop(state, None))
        request = _QUESTION[method].model_validate(
            {"method": method, "params": asked}, by_name=False
        )
        return types.InputRequiredResult(input_requests={key: request}, request_state=state)

    def _expire(self, state: str) -> None:
        held = self._held.pop(state, None)
        if held is not None and held.task is not None:
            held.task.cancel()

    def close(self) -> None:
        for state in list(self._held):
            self._expire(state)


_QUESTION: dict[str, Any] = {
    "elicitation/create": types.ElicitRequest,
    "sampling/createMessage": types.CreateMessageRequest,
}
