"""An A2A task's question (`input-required`) put to the caller of the call as an elicitation,
when its client can answer one (`CALLER_ASKS`): the reply is sent to the task, and the call goes
on. A caller that cannot answer, or declines, gets the `needs_input` result as before, and may
answer by calling the tool again with the task's ids."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge.model import UpstreamResult
from bridge.upstream import CALLER_ASKS, AskRefused

__all__ = ["answered_by_caller"]

_REPLY = {
    "type": "object",
    "properties": {"reply": {"type": "string", "title": "Reply", "description": "Your answer"}},
    "required": ["reply"],
}
# sends the reply to the task (its id, its context's id) and answers the call's next result
Reply = Callable[[str, str, str], Awaitable[UpstreamResult]]


async def answered_by_caller(result: UpstreamResult, reply: Reply) -> UpstreamResult:
    """`result`, or, when it is a question the caller answers, the result of the reply (which
    may put the task's next question the same way)."""
    asker = CALLER_ASKS.get()
    facts = result.structured_content
    if asker is None or result.status != "needs_input" or not isinstance(facts, dict):
        return result
    task_id, context_id = facts.get("task_id"), facts.get("context_id")
    if facts.get("state") != "input_required" or not task_id or not context_id:
        return result  # authorization is not asked for through a form
    question = facts.get("question") or "The agent needs more input."
    try:
        answer = await asker(
            "elicitation/create", {"message": str(question), "requestedSchema": _REPLY}
        )
    except AskRefused:
        return result
    text = (answer.get("content") or {}).get("reply")
    if answer.get("action") != "accept" or not isinstance(text, str) or not text:
        return result
    return await reply(text, str(task_id), str(context_id))
