"""Hand-written agents answering as agents built on older a2a-sdk releases do (0.2.x, 0.3.x):
their card shape and JSON-RPC answers, without those releases installed."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Rpc = Callable[[str, dict[str, Any]], Awaitable[Any]]
REQUESTS = web.AppKey("requests", list)


def old_agent_app(
    protocol_version: str,
    rpc: Rpc | None = None,
    *,
    streaming: bool = False,
    skills: tuple[str, ...] = ("echo",),
    preferred_transport: str = "JSONRPC",
) -> web.Application:
    """The card as a2a-sdk 0.2.x/0.3.x serves it (top-level `url`; 0.2.x names no
    `preferredTransport` and serves it only at /.well-known/agent.json), and JSON-RPC at `/`
    answered by `rpc(method, params)`; every request is kept in `app[REQUESTS]`. With
    `preferred_transport="HTTP+JSON"` the card names that binding and the caller adds its routes."""
    requests: list[dict[str, Any]] = []

    async def card(request: web.Request) -> web.Response:
        body: dict[str, Any] = {
            "protocolVersion": protocol_version,
            "name": "Old Agent",
            "description": "an older agent",
            "url": f"http://{request.host}/",
            "version": "0.1",
            "capabilities": {"streaming": streaming},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [
                {"id": s, "name": s.title(), "description": f"The {s} skill", "tags": [s]}
                for s in skills
            ],
        }
        if not protocol_version.startswith("0.2"):
            body["preferredTransport"] = preferred_transport
        return web.json_response(body)

    async def answer(request: web.Request) -> web.Response:
        body = await request.json()
        requests.append(body)
        assert rpc is not None
        result = await rpc(body["method"], body.get("params") or {})
        return web.json_response({"jsonrpc": "2.0", "id": body.get("id"), "result": result})

    app = web.Application()
    app[REQUESTS] = requests
    app.router.add_get("/.well-known/agent.json", card)
    app.router.add_post("/", answer)
    return app


def text_message(text: str, role: str, task_id: str, context_id: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": role,
        "parts": [{"kind": "text", "text": text}],
        "taskId": task_id,
        "contextId": context_id,
    }
