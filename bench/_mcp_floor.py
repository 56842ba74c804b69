"""The floor of bench/bench_mcp_proxy.py: an MCP forwarder on the bridge's HTTP stack (uvicorn,
the bridge's corked httptools protocol, uvloop, the kept-connection client of
adapters/http/kept.py) that does nothing else. It passes every request to the upstream at the
URL of its first argument as it came (tools named as the upstream names them, sessions the
upstream's), with no routing, no checks, no catalog and no translation, and listens on
127.0.0.1:<port> (second argument). Run by the bench as its own process.

Its CPU per call is what any proxy built on that stack pays before doing any work of its own.
An answer the upstream streams as one JSON-RPC message on an event stream is answered as JSON,
as the bridge answers a proxied call: an SDK client closes an event stream once its message is
in, so a forwarder that streamed it would pay a new connection per call, which the bridge does
not.

With `--answer` as a third argument it answers a `tools/call` of `echo` itself, as the upstream
would (its text back), and forwards everything else: its CPU per call is then what the stack's
side facing the clients costs, without the kept-connection client's share."""

from __future__ import annotations

import json
import sys
from typing import Any

import uvloop
from _procs import serve_as_bridge

from adapters.http.kept import KeptConnections

_PASSED = (b"content-type", b"accept", b"last-event-id")  # and every `mcp-*` header


def message_of(stream: bytes) -> bytes | None:
    """The JSON-RPC response an event stream holds when it holds that one event and no other;
    else None."""
    data: bytes | None = None
    for event in stream.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line for line in event.split(b"\n") if line and not line.startswith(b":")]
        if not lines:
            continue
        if data is not None:
            return None
        data = b"\n".join(
            line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")
        )
    if data is None:
        return None
    message = json.loads(data)
    return data if "id" in message and ("result" in message or "error" in message) else None


def local_answer(scope: dict[str, Any], body: bytes) -> bytes | None:
    """The JSON-RPC answer to a `tools/call` of `echo` in `body`, as the upstream makes it (the
    2026-07-28 era's result says it is complete); None for any other request."""
    message = json.loads(body)
    params = message.get("params") or {}
    if message.get("method") != "tools/call" or params.get("name") != "echo":
        return None
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": str(params["arguments"].get("text", ""))}],
        "isError": False,
    }
    if (b"mcp-protocol-version", b"2026-07-28") in scope["headers"]:
        result["resultType"] = "complete"
    answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
    return json.dumps(answer, separators=(",", ":")).encode()


def create_app(upstream: str, answer_calls: bool = False) -> Any:
    pool: KeptConnections | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal pool
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                pool = KeptConnections(upstream, connect_timeout=10, read_timeout=30)
                await send({"type": "lifespan.startup.complete"})
            if pool is not None:
                await pool.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] == "GET":  # no stream of the server's own messages
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        local = local_answer(scope, body) if answer_calls else None
        if local is not None:
            out = [(b"content-length", str(len(local)).encode())]
            out.append((b"content-type", b"application/json"))
            out += [(name, value) for name, value in scope["headers"] if name == b"mcp-session-id"]
            await send({"type": "http.response.start", "status": 200, "headers": out})
            await send({"type": "http.response.body", "body": local})
            return
        headers = {
            name.decode(): value.decode()
            for name, value in scope["headers"]
            if name.startswith(b"mcp-") or name in _PASSED
        }
        assert pool is not None
        response = await pool.request(scope["method"], headers, body)
        answer = b"".join([chunk async for chunk in response.iter_any()])
        response.release()
        kind = response.headers.get("content-type", "")
        if kind.startswith("text/event-stream"):
            data = message_of(answer)
            if data is not None:
                answer, kind = data, "application/json"
        out = [(b"content-length", str(len(answer)).encode())]
        if kind:
            out.append((b"content-type", kind.encode()))
        if "mcp-session-id" in response.headers:
            out.append((b"mcp-session-id", response.headers["mcp-session-id"].encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": out})
        await send({"type": "http.response.body", "body": answer})

    return app


if __name__ == "__main__":
    app = create_app(sys.argv[1], answer_calls=sys.argv[3:] == ["--answer"])
    uvloop.run(serve_as_bridge(app, int(sys.argv[2])))
