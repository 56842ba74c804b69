"""What an ATIP command waits for from a user (input on stdin, answers to its prompts), asked of
the caller of the call as an elicitation when no `answers:` entry gives it and the caller's client
can answer one (`CALLER_ASKS`): the reply is written to the command's stdin. A caller that cannot
answer, or declines, gets an error whose recoverability is `provide_input`."""

from __future__ import annotations

import json
from typing import Any

from adapters.atip.commands import ATIPCommand, interaction_needs
from bridge.model import BridgeError
from bridge.upstream import CALLER_ASKS, AskRefused

__all__ = ["input_from_caller"]

_INPUT = {
    "type": "object",
    "properties": {
        "input": {
            "type": "string",
            "title": "Input",
            "description": "Text the command reads on its standard input (answers one a line)",
        }
    },
    "required": ["input"],
}
_SHOWN_ARGUMENTS = 300  # characters of the call's arguments the question quotes at most


async def input_from_caller(command: ATIPCommand, arguments: dict[str, Any]) -> str:
    """The text for the command's stdin, as the caller answers it, ending with a new line.
    Raises BridgeError (`provide_input`) when the caller cannot answer or does not."""
    line = command.native_id
    needs = " and ".join(interaction_needs(command.effects))
    asker = CALLER_ASKS.get()
    if asker is None:
        raise _unanswered(line, needs, "the caller's client cannot answer an elicitation")
    shown = json.dumps(arguments, ensure_ascii=False)
    if len(shown) > _SHOWN_ARGUMENTS:
        shown = shown[:_SHOWN_ARGUMENTS] + "…"
    about = f" ({command.description.rstrip('.')})" if command.description else ""
    message = f"`{line}` {shown}{about} waits for {needs}: what should it read?"
    try:
        answer = await asker("elicitation/create", {"message": message, "requestedSchema": _INPUT})
    except AskRefused as exc:
        why = f"the caller's client refused the question ({exc.code}: {exc.message})"
        raise _unanswered(line, needs, why) from None
    text = (answer.get("content") or {}).get("input")
    if answer.get("action") != "accept" or not isinstance(text, str):
        raise BridgeError(
            f"`{line}` waits for {needs}, and the caller gave none "
            f"(the question was answered {answer.get('action')!r}); it did not run",
            error_class="approval_rejected",
            error_code="input_declined",
            recoverability="provide_input",
            status="rejected",
        )
    return text if text.endswith("\n") else text + "\n"


def _unanswered(line: str, needs: str, why: str) -> BridgeError:
    return BridgeError(
        f"`{line}` waits for {needs}, and {why}; it did not run. Call it from a client that "
        "declares elicitation, or have the upstream's `answers:` give it",
        error_class="capability_gap",
        error_code="requires_user_interaction",
        recoverability="provide_input",
    )
