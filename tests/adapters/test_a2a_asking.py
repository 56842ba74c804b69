"""An A2A task's question put to the caller as an elicitation, when the caller's client can
answer (the MCP frontend sets `CALLER_ASKS` for such a client): a real A2A agent on loopback."""

from __future__ import annotations

from typing import Any

from bridge.upstream import CALLER_ASKS, AskRefused
from tests.adapters.test_a2a import agent, bridge


async def invoke_asked(answer: Any, asked: list[dict[str, Any]]) -> Any:
    async def asker(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append({"method": method, **params})
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    async with agent() as (base, _), bridge(base_url=base, poll_interval=0.01) as b:
        token = CALLER_ASKS.set(asker)
        try:
            return await b.invoker.invoke("peer__ask", {"message": "book me a trip"})
        finally:
            CALLER_ASKS.reset(token)


async def test_the_tasks_question_is_asked_and_the_reply_continues_the_task() -> None:
    asked: list[dict[str, Any]] = []
    result = await invoke_asked({"action": "accept", "content": {"reply": "Lisbon"}}, asked)
    assert result.status == "succeeded", result
    assert result.content[0]["text"] == "booked a trip to Lisbon"
    assert [(a["method"], a["message"]) for a in asked] == [("elicitation/create", "Which city?")]
    assert asked[0]["requestedSchema"]["required"] == ["reply"]


async def test_a_declined_or_refused_question_gives_the_needs_input_result() -> None:
    for answer in ({"action": "decline"}, AskRefused(-32602, "Elicitation not supported")):
        asked: list[dict[str, Any]] = []
        result = await invoke_asked(answer, asked)
        assert result.status == "needs_input" and len(asked) == 1
        assert result.structured_content["question"] == "Which city?"
