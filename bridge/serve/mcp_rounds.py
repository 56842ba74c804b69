"""Calls of 2026-07-28 clients that an upstream asks a question during (`elicitation/create`,
`sampling/createMessage`), in that era's own way: the call answers an `input_required` result
carrying the question and a `requestState`, and goes on, still running, when the client calls
the tool again with its answer and that state (the multi-round-trip flow).

Only a client that declared elicitation or sampling is served so; the call then runs in a task
of its own, whose questions come back here through its `Asker`. A call waiting for an answer is
held in the process that runs it, for at most `hold` seconds and never beyond its own timeout.
Replicas sharing Redis (`redis.url`) name the replica in each `requestState`: a retry that
reaches another replica is relayed to that one through Redis, and its answer relayed back, so a
load balancer may send it anywhere. A retry naming no call held (ended, expired, or held by a
replica that is gone) is refused (-32602).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from bridge.translate.mcp import is_modern
from bridge.upstream import CALLER_ASKS, AskRefused

if TYPE_CHECKING:
    from bridge.shared_state import Notice, SharedState

__all__ = ["HOLD", "Rounds"]

HOLD = 300.0  # seconds a call waits for the client's answer at most
log = logging.getLogger("bridge.mcp")
# seconds a retry relayed to another replica waits for this one to hear the answer channel
_LISTEN_TIMEOUT = 5.0
_GONE = (
    "no call waits for this requestState (it ended, or the replica holding it is gone): "
    "call the tool again without it"
)
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

    def __init__(self, hold: float = HOLD, shared: SharedState | None = None) -> None:
        self.hold = hold
        self._held: dict[str, _Held] = {}
        self._keys = itertools.count(1)
        self._link = shared.link if shared is not None else None
        self._relayed: dict[str, asyncio.Future[Notice]] = {}  # retries sent to other replicas
        self._tasks: set[asyncio.Task[None]] = set()  # retries relayed here, being answered
        self._listening = False

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
        state = params.request_state or ""
        answers = {
            key: given.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, given in (params.input_responses or {}).items()
        }
        owner = state.partition(".")[0] if "." in state else None  # replicas name theirs
        held_elsewhere = self._link is not None and owner not in (None, self._link.replica)
        if held_elsewhere and state not in self._held:
            return await self._relay(str(owner), state, surface, answers)
        return await self._resume_here(state, surface, answers)

    async def _resume_here(self, state: str, surface: str, answers: dict[str, Any]) -> Any:
        held = self._held.pop(state, None)
        if held is None or held.surface != surface:
            raise MCPError(types.INVALID_PARAMS, _GONE)
        if held.expiry is not None:
            held.expiry.cancel()
        for key, answer in held.waiting.items():
            if answer.done():
                continue
            given = answers.get(key)
            if given is None:
                answer.set_exception(AskRefused(types.INVALID_PARAMS, f"no answer to {key}"))
            else:
                answer.set_result(given)
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
        if self._link is not None:  # any replica finds the one holding the call by its state
            self._listen()
            state = f"{self._link.replica}.{state}"
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
        for task in self._tasks:
            task.cancel()

    # ------------------------------------------------------------------ between replicas

    def _listen(self) -> None:
        if self._link is not None and not self._listening:
            self._listening = True
            self._link.on_notice(self._on_notice)

    async def _relay(self, owner: str, state: str, surface: str, answers: dict[str, Any]) -> Any:
        """The answer of the replica `owner` to a retry of a call it holds."""
        from bridge.shared_state import SharedStateUnavailable

        assert self._link is not None
        self._listen()
        if not await self._link.wait_listening(_LISTEN_TIMEOUT):
            raise MCPError(types.INTERNAL_ERROR, "Redis cannot be reached: call again later")
        ask = secrets.token_urlsafe(12)
        reply = self._relayed[ask] = asyncio.get_running_loop().create_future()
        notice = {"kind": "round", "ask": ask, "state": state, "surface": surface}
        try:
            if not await self._link.tell(owner, {**notice, "answers": answers}):
                raise MCPError(types.INVALID_PARAMS, _GONE)
            answer = await asyncio.wait_for(reply, self.hold)
        except SharedStateUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, f"{exc}: call again later") from None
        except TimeoutError:
            raise MCPError(types.INVALID_PARAMS, _GONE) from None
        finally:
            self._relayed.pop(ask, None)
        error = answer.get("error")
        if isinstance(error, dict):
            raise MCPError(int(error.get("code", types.INTERNAL_ERROR)), str(error.get("message")))
        result = answer.get("result") or {}
        if result.get("resultType") == "input_required":
            return types.InputRequiredResult.model_validate(result)
        return types.CallToolResult.model_validate(result)

    def _on_notice(self, notice: Notice) -> None:
        kind = notice.get("kind")
        if kind == "round-answer":
            reply = self._relayed.get(str(notice.get("ask")))
            if reply is not None and not reply.done():
                reply.set_result(notice)
        elif kind == "round" and isinstance(notice.get("answers"), dict):
            task = asyncio.get_running_loop().create_task(self._answer(notice))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, notice: Notice) -> None:
        """Resume the call a retry relayed by another replica names, and tell that replica."""
        from bridge.shared_state import SharedStateUnavailable

        assert self._link is not None
        reply: dict[str, Any] = {"kind": "round-answer", "ask": notice.get("ask")}
        try:
            state, surface = str(notice.get("state")), str(notice.get("surface"))
            result = await self._resume_here(state, surface, notice["answers"])
            reply["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        except MCPError as exc:
            reply["error"] = {"code": exc.code, "message": exc.message}
        except Exception:
            log.exception("mcp: a call resumed for another replica failed")
            reply["error"] = {"code": types.INTERNAL_ERROR, "message": "the call failed"}
        try:
            await self._link.tell(str(notice.get("origin")), reply)
        except SharedStateUnavailable as exc:
            log.warning("mcp: the answer of a relayed retry was lost: %s", exc)


_QUESTION: dict[str, Any] = {
    "elicitation/create": types.ElicitRequest,
    "sampling/createMessage": types.CreateMessageRequest,
}
