"""The floor of bench/bench_rest_invoke.py: the least a Python proxy on the bridge's HTTP stack
does. A bare ASGI app on uvicorn (the bridge's corked httptools protocol, uvloop) that forwards
each request's body with one pooled aiohttp call to `<upstream>/tools/add` and answers the
upstream's body; no routing, no validation, no translation, no log.

Run by the bench as its own process: `_bare_proxy.py UPSTREAM_URL PORT`; prints a line starting
with `bare proxy listening` when it accepts connections."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import aiohttp
import uvloop
from _procs import serve_as_bridge


def create_app(upstream: str) -> Any:
    session: aiohttp.ClientSession | None = None
    target = f"{upstream}/tools/add"

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    session = aiohttp.ClientSession(
                        connector=aiohttp.TCPConnector(limit=256),
                        cookie_jar=aiohttp.DummyCookieJar(),
                    )
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if session is not None:
                        await session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        assert session is not None
        async with session.post(
            target, data=body, headers={"Content-Type": "application/json"}
        ) as response:
            answer = await response.read()
            status = response.status
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(answer)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    return app


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(
            serve_as_bridge(create_app(sys.argv[1]), int(sys.argv[2]), "bare proxy listening")
        )
