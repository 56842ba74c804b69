"""An upstream server's requests during a call (`elicitation/create`, `sampling/createMessage`)
put to the MCP client that made the call, on the request's own stream (handshake era).

`asker_for` gives the `Asker` of a call whose client declared elicitation or sampling, which
the frontend sets in `CALLER_ASKS` for the MCP adapter to use; a method the client did not
declare is refused with the spec's error (-32602 for elicitation, -32601 for sampling), as the
adapter refuses every request of a call with no Asker. A 2026-07-28 client has no such
requests during a call (its era asks through `input_required` results instead), so it is given
none.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from bridge.translate.mcp import is_modern
from bridge.upstream import Asker, AskRefused

__all__ = ["asker_for"]

# method -> (the capability the client must declare, the request, its result, the refusal)
_KINDS: dict[str, tuple[str, Any, Any, tuple[int, str]]] = {
    "elicitation/create": (
        "elicitation",
        types.ElicitRequest,
        types.ElicitResult,
        (types.INVALID_PARAMS, "Elicitation not supported"),
    ),
    "sampling/createMessage": (
        "sampling",
        types.CreateMessageRequest,
        types.CreateMessageResult,
        (types.METHOD_NOT_FOUND, "Sampling not supported"),
    ),
}


def asker_for(ctx: ServerRequestContext[Any, Any]) -> Asker | None:
    """The Asker of the call `ctx` handles, or None when its client can answer neither."""
    if is_modern(ctx.protocol_version):
        return None
    client = getattr(ctx.session, "client_params", None)
    capabilities = client.capabilities if client is not None else None
    if capabilities is None or (capabilities.elicitation is None and capabilities.sampling is None):
        return None
    session, related = ctx.session, ServerMessageMetadata(related_request_id=ctx.request_id)

    async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
        kind = _KINDS.get(method)
        if kind is None:
            raise AskRefused(types.METHOD_NOT_FOUND, f"{method} is not put to callers")
        capability, request_type, result_type, refusal = kind
        if getattr(capabilities, capability) is None:
            raise AskRefused(*refusal)
        try:
            request = request_type.model_validate(
                {"method": method, "params": params}, by_name=False
            )
            if method == "sampling/createMessage" and params.get("tools"):
                result_type = types.CreateMessageResultWithTools
            result = await session.send_request(request, result_type, metadata=related)
        except MCPError as exc:
            raise AskRefused(exc.code, exc.message) from None
        except ValueError as exc:
            raise AskRefused(types.INVALID_PARAMS, f"not a valid {method}: {exc}") from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    return ask
