"""A call that needs the user's own account at an upstream (`user_oauth`) and finds none
connected, over MCP: where the client declared URL-mode elicitation (`elicitation.url`), the
bridge puts the connect link to the user as an `elicitation/create` of mode `url` instead of
failing, waits for the account to be connected, and runs the call again. The question goes the
way of the client's era, through the call's `Asker` (bridge/serve/mcp_asking.py for 2025-11-25,
which is then told `notifications/elicitation/complete`; an `input_required` result for
2026-07-28, bridge/serve/mcp_rounds.py). A client that declines or cancels, or cannot be asked,
gets the call's `credential_missing` with the link."""

from __future__ import annotations

import logging
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext

from bridge.identity import Identity
from bridge.model import ToolResult, new_id
from bridge.runtime import Bridge
from bridge.translate.mcp import is_modern
from bridge.upstream import CALLER_ASKS, AskRefused

__all__ = ["connected"]

log = logging.getLogger("bridge.serve.mcp")


def _asks_urls(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client of `ctx` declared URL-mode elicitation."""
    if is_modern(ctx.protocol_version):
        capabilities = getattr(ctx.session, "client_capabilities", None)
    else:
        client = getattr(ctx.session, "client_params", None)
        capabilities = client.capabilities if client is not None else None
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.url is not None


async def connected(
    ctx: ServerRequestContext[Any, Any],
    bridge: Bridge,
    ref: str,
    arguments: dict[str, Any],
    options: dict[str, Any],
    identity: Identity | None,
    result: ToolResult,
) -> ToolResult:
    """`result`, a call of `ref` (the pipeline's `options` and `identity`) that ended
    `account_not_connected`; or, when the client can take the connect link as a URL and the
    user connects the account, the result of the call again."""

    async def call() -> ToolResult:
        return await bridge.invoker.invoke(ref, arguments, identity=identity, **options)

    error = result.error
    details = (error.details or {}) if error is not None else {}
    url, upstream = details.get("connect_url"), details.get("upstream")
    ask = CALLER_ASKS.get()
    if (
        not isinstance(url, str)
        or not isinstance(upstream, str)
        or identity is None
        or identity.issuer is None
        or identity.subject is None
        or ask is None
        or not _asks_urls(ctx)
    ):
        return result
    handshake = not is_modern(ctx.protocol_version)
    elicitation_id = new_id("eli")
    question = {
        "mode": "url",
        "message": f"Connect your account at {upstream} to the tool bridge: the call waits, "
        "and runs once it is connected.",
        "url": url,
    }
    if handshake:  # the id is 2025-11-25's, for its completion notice
        question["elicitationId"] = elicitation_id
    try:
        answer = await ask("elicitation/create", question)
    except AskRefused as exc:
        log.info("the client did not take the connect link of %s (%s)", upstream, exc)
        return result
    if answer.get("action") != "accept":
        return result  # its link still connects the account, for a later call
    tokens = bridge.admission.user_tokens
    key = (upstream, identity.issuer, identity.subject)
    if not await tokens.wait_connected(key, tokens.connect_timeout(upstream)):
        return await call()  # a new link: the one given may have been used
    if handshake:
        complete = types.ElicitCompleteNotification(
            params=types.ElicitCompleteNotificationParams(elicitation_id=elicitation_id)
        )
        try:
            await ctx.session.send_notification(complete, ctx.request_id)
        except Exception as exc:  # the notice is a courtesy: the call goes on without it
            log.debug("elicitation complete notice not delivered: %s", exc)
    return await call()
