"""An MCP server over streamable HTTP (protocol 2025-06-18, just enough of it) whose tools answer
as much as they are asked to, made as it is sent: a JSON body of any size (with or without a
Content-Length, or gzip-compressed), one event of any size, or an endless stream of small
events. Its GET stream of server messages sends small log events, `get_log_bytes` in all (64 KiB;
`GET_LOG_BYTES`, 3 MiB, where a test needs more than a bound), then a tools/list_changed
notice, and stays open. `resumed` answers a POST with one event
bearing an id and ends the stream without the answer, so that the client resumes it with a GET
naming that id (`Last-Event-ID`): the resumed stream is endless (`endless: true`), or sends
`size` bytes of small events and ends again without the answer, at every resumption.

`build_app(json_answers, get_failures, get_failure, get_log_bytes)`: small answers as JSON bodies,
or as event streams; the first `get_failures` GET streams fail (`oversize`: one event of 2 MiB; `cut`: the
connection closed in the middle of an event; an HTTP status such as `405`, not offered), those after send a tools/list_changed notice at
once and stay open."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

CHUNK = 1 << 16
GET_LOG_BYTES = 3 << 20
TOOLS = [
    "echo",
    "big_json",
    "big_json_declared",
    "big_gzip",
    "big_event",
    "endless_events",
    "sized",
    "resumed",
]


@dataclass
class ServerLog:
    sessions: int = 0  # initialize requests
    listings: int = 0
    gets: int = 0  # GET streams asked for
    calls: list[str] = field(default_factory=list)
    sent: dict[str, int] = field(
        default_factory=dict
    )  # bytes each oversize answer got out before it was stopped
    resumptions: int = 0  # GETs resuming a POST's stream (with Last-Event-ID)
    resumed: dict[str, Any] = field(default_factory=dict)  # what the `resumed` call asked for


def _head(request_id: Any) -> str:
    return (
        '{"jsonrpc": "2.0", "id": '
        + json.dumps(request_id)
        + ', "result": {"content": [{"type": "text", "text": "'
    )


def _tail() -> str:
    return '"}], "isError": false}}'


async def _text_body(request_id: Any, size: int, log: ServerLog, name: str) -> AsyncIterator[bytes]:
    yield _head(request_id).encode()
    sent = 0
    try:
        while sent < size:
            piece = min(CHUNK, size - sent)
            yield b"x" * piece
            sent += piece
            await asyncio.sleep(
                0
            )  # a client gone is seen (uvicorn drops what is sent after it, at once)
    finally:
        log.sent[name] = sent
    yield _tail().encode()


async def _gzipped(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    async for chunk in body:
        packed = packer.compress(chunk)
        if packed:
            yield packed
    yield packer.flush()


async def _one_event(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield b"event: message\ndata: "
    async for chunk in body:
        yield chunk
    yield b"\n\n"


async def _endless_events(log: ServerLog) -> AsyncIterator[bytes]:
    event = (
        'event: message\ndata: {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "debug", "data": "'
        + "y" * 900
        + '"}}\n\n'
    ).encode()
    sent = 0
    try:
        while True:
            yield event
            sent += len(event)
            await asyncio.sleep(0)
    finally:
        log.sent["endless_events"] = sent


_LOG_EVENT = (
    'id: r{n}\nevent: message\ndata: {{"jsonrpc": "2.0", "method": "notifications/message", "params": {{"level": "debug", '
    '"data": "' + "v" * 900 + '"}}}}\n\n'
)


async def _resumption_begun() -> AsyncIterator[bytes]:
    """A POST's stream that ends without the answer, having said where it was: `retry` asks for
    the resumption at once."""
    yield b"retry: 0\n" + _LOG_EVENT.format(n=0).encode()


async def _resumed_events(log: ServerLog) -> AsyncIterator[bytes]:
    """The rest of a resumed stream: endless, or `size` bytes then the end (no answer again)."""
    endless, size = bool(log.resumed.get("endless")), int(log.resumed.get("size", 0))
    sent, n = 0, 0
    try:
        while endless or sent < size:
            n += 1
            event = _LOG_EVENT.format(n=n).encode()
            yield event
            sent += len(event)
            await asyncio.sleep(0)
    finally:
        log.sent["resumed"] = log.sent.get("resumed", 0) + sent


async def _server_messages(log_bytes: int) -> AsyncIterator[bytes]:
    event = (
        'event: message\ndata: {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "debug", "data": "'
        + "z" * 900
        + '"}}\n\n'
    ).encode()
    for _ in range(log_bytes // len(event) + 1):
        yield event
        await asyncio.sleep(0)
    yield b'event: message\ndata: {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}\n\n'
    await asyncio.Event().wait()  # open until the client goes


class _Cut(Exception):
    """Ends a stream in the middle of an event: uvicorn closes the connection."""


async def _failing_messages(how: str) -> AsyncIterator[bytes]:
    if how == "oversize":
        yield b'event: message\ndata: {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "debug", "data": "'
        for _ in range((2 << 20) // CHUNK):
            yield b"w" * CHUNK
            await asyncio.sleep(0)
        yield b'"}}\n\n'
        await asyncio.Event().wait()
    yield b'event: message\ndata: {"jsonrpc": "2.0", "method": "notifi'
    raise _Cut("the connection is closed in the middle of an event")


async def _changes_at_once() -> AsyncIterator[bytes]:
    yield b'event: message\ndata: {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}\n\n'
    await asyncio.Event().wait()


def build_app(
    json_answers: bool = True,
    get_failures: int = 0,
    get_failure: str = "oversize",
    get_log_bytes: int = 1 << 16,
) -> tuple[Any, ServerLog]:
    log = ServerLog()

    def small(request_id: Any, result: dict[str, Any]) -> Response:
        message = {"jsonrpc": "2.0", "id": request_id, "result": result}
        if json_answers:
            return JSONResponse(message, headers={"mcp-session-id": "s1"})
        return Response(
            f"event: message\ndata: {json.dumps(message)}\n\n",
            media_type="text/event-stream",
            headers={"mcp-session-id": "s1"},
        )

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        if request.method == "GET" and "last-event-id" in request.headers:
            log.resumptions += 1
            response: Response = StreamingResponse(
                _resumed_events(log), media_type="text/event-stream"
            )
        elif request.method == "GET":
            log.gets += 1
            if not get_failures:
                stream = _server_messages(get_log_bytes)
            else:
                stream = (
                    _failing_messages(get_failure)
                    if log.gets <= get_failures
                    else _changes_at_once()
                )
            response = StreamingResponse(stream, media_type="text/event-stream")
            if (
                get_failure.isdigit() and log.gets <= get_failures
            ):  # an HTTP status: 405, no stream offered
                response = Response(status_code=int(get_failure))
        elif request.method == "DELETE":
            response = Response(status_code=200)
        else:
            response = await answer(await request.json())
        await response(scope, receive, send)

    async def answer(message: dict[str, Any]) -> Response:
        if "id" not in message:
            return Response(status_code=202)
        method, request_id, params = message["method"], message["id"], message.get("params") or {}
        if method == "initialize":
            log.sessions += 1
            return small(
                request_id,
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "oversize", "version": "1"},
                },
            )
        if method == "tools/list":
            log.listings += 1
            schema = {
                "type": "object",
                "properties": {"size": {"type": "integer"}, "text": {"type": "string"}},
            }
            return small(request_id, {"tools": [{"name": n, "inputSchema": schema} for n in TOOLS]})
        if method != "tools/call":
            return small(request_id, {})
        name, args = params["name"], params.get("arguments") or {}
        log.calls.append(name)
        size = int(args.get("size", 0))
        if name == "echo":
            return small(request_id, {"content": [{"type": "text", "text": args.get("text", "")}]})
        body = _text_body(request_id, size, log, name)
        if name == "big_json":
            return StreamingResponse(body, media_type="application/json")
        if name == "big_json_declared":
            length = len(_head(request_id)) + size + len(_tail())
            return StreamingResponse(
                body, media_type="application/json", headers={"content-length": str(length)}
            )
        if name == "big_gzip":
            return StreamingResponse(
                _gzipped(body), media_type="application/json", headers={"content-encoding": "gzip"}
            )
        if name in ("big_event", "sized"):
            if name == "sized" and json_answers:
                return StreamingResponse(body, media_type="application/json")
            return StreamingResponse(_one_event(body), media_type="text/event-stream")
        if name == "resumed":
            log.resumed = args
            return StreamingResponse(_resumption_begun(), media_type="text/event-stream")
        if name == "endless_events":
            return StreamingResponse(_endless_events(log), media_type="text/event-stream")
        return small(request_id, {"content": [], "isError": True})

    return app, log
