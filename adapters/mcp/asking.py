"""A server's requests to the bridge during a call (`elicitation/create`, `sampling/createMessage`)
put to the client that made the call.

The bridge declares both capabilities to its upstreams. A server's request goes to the `Asker` of
the one call to this upstream in flight whose caller can answer (the frontend sets it in
`CALLER_ASKS`); with none, or with several (the request names no call, and one caller must never
see another's question), it is refused with the error the MCP spec asks of a client without the
capability: -32602 for elicitation, -32601 for sampling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import mcp.types as types
from mcp.client.session import ClientRequestContext

from bridge.upstream import CALLER_ASKS, Asker, AskRefused

__all__ = ["ServerRequests"]

_ROUNDS = 8  # rounds of questions one call may ask
# sends the call again with the answers to its questions and the server's request state
Resend = Callable[[dict[str, Any], str | None], Awaitable[dict[str, Any]]]

_REFUSED = {
    "elicitation/create": (types.INVALID_PARAMS, "Elicitation not supported"),
    "sampling/createMessage": (types.METHOD_NOT_FOUND, "Sampling not supported"),
}


class ServerRequests:
    """The SDK client's sampling and elicitation callbacks of an MCP upstream."""

    _askers: list[Asker]

    def _on_refused(self, method: str) -> None:
        raise NotImplementedError  # MCPUpstream's: says once per method that it refused one

    def _asking(self) -> AbstractContextManager[None]:
        """Around a call: its caller's Asker, if any, may take the server's requests."""
        asker = CALLER_ASKS.get()
        return contextlib.nullcontext() if asker is None else self._asked_by(asker)

    @contextlib.contextmanager
    def _asked_by(self, asker: Asker) -> Iterator[None]:
        self._askers.append(asker)
        try:
            yield
        finally:
            self._askers.remove(asker)

    async def _put(self, method: str, params: Any, result: Callable[[Any], Any]) -> Any:
        askers = self._askers
        if len(askers) != 1:
            self._on_refused(method)
            code, message = _REFUSED[method]
            return types.ErrorData(code=code, message=message, data=method)
        try:
            answer = await askers[0](
                method, params.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        except AskRefused as exc:
            return types.ErrorData(code=exc.code, message=exc.message, data=method)
        try:
            return result(answer)
        except ValueError as exc:
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"the client's answer is not valid: {exc}"
            )

    async def _elicitation(
        self, ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> Any:
        return await self._put(
            "elicitation/create",
            params,
            lambda answer: types.ElicitResult.model_validate(answer, by_name=False),
        )

    async def _sampling(
        self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> Any:
        def read(answer: Any) -> Any:
            if isinstance(answer, dict) and isinstance(answer.get("content"), list):
                return types.CreateMessageResultWithTools.model_validate(answer, by_name=False)
            return types.CreateMessageResult.model_validate(answer, by_name=False)

        return await self._put("sampling/createMessage", params, read)

    async def _answered(self, raw: dict[str, Any], resend: Resend) -> dict[str, Any]:
        """A 2026-07-28 server's `input_required` result of a call, its questions put to the
        caller (as above) and the call sent again with the answers, until it answers otherwise
        (at most `_ROUNDS` times). A question left unanswered leaves the result as it is: the
        call then fails, saying what the server asked for."""
        for _ in range(_ROUNDS):
            if raw.get("resultType") != "input_required":
                break
            wanted = types.InputRequiredResult.model_validate(raw, by_name=False)
            answers: dict[str, Any] = {}
            for key, asked in (wanted.input_requests or {}).items():
                if isinstance(asked, types.ElicitRequest):
                    answer = await self._elicitation(None, asked.params)  # type: ignore[arg-type]
                elif isinstance(asked, types.CreateMessageRequest):
                    answer = await self._sampling(None, asked.params)  # type: ignore[arg-type]
                else:
                    return raw
                if isinstance(answer, types.ErrorData):
                    return raw
                answers[key] = answer
            raw = await resend(answers, wanted.request_state)
        return raw
