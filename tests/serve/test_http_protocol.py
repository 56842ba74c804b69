"""Corked writes: what is written in one turn of the loop leaves in one send, nothing is held
past the turn, large bursts and closes flush at once; and a streamed response served by
uvicorn over the corked protocol reaches the client event by event."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bridge.serve.http_protocol import CORK_LIMIT, CorkedTransport
from tests.servers import raw_exchange, serve_asgi


class CountingTransport:
    """A real transport, with its writes counted."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[CorkedTransport, CountingTransport, asyncio.StreamReader]]:
    """A corked transport over a real loopback TCP connection, and the peer's reader."""
    accepted: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(reader)

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    counting = CountingTransport(writer.transport)  # type: ignore[arg-type]
    corked = CorkedTransport(counting, asyncio.get_running_loop())  # type: ignore[arg-type]
    peer = await accepted.get()
    try:
        yield corked, counting, peer
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def test_writes_of_one_turn_leave_in_one_send(pair):
    corked, counting, peer = pair
    corked.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    corked.write(memoryview(b"ok"))
    assert counting.writes == [] and corked.get_write_buffer_size() == 40
    assert await peer.readexactly(40) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    assert len(counting.writes) == 1


async def test_nothing_is_held_past_the_turn(pair):
    corked, counting, peer = pair
    corked.write(b"event: 1\n\n")
    await asyncio.sleep(0)  # the turn ends: the write leaves although nothing followed it
    assert counting.writes == [b"event: 1\n\n"]
    assert await peer.readexactly(10) == b"event: 1\n\n"


async def test_large_bursts_leave_at_once_and_close_flushes(pair):
    corked, counting, peer = pair
    corked.write(b"x" * CORK_LIMIT)
    assert len(counting.writes) == 1  # flow control sees large bodies as they are written
    corked.write(b"tail")
    corked.close()
    assert await peer.read() == b"x" * CORK_LIMIT + b"tail"
    assert len(counting.writes) == 2


async def test_streamed_response_reaches_the_client_event_by_event():
    second = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
        await second.wait()  # only set once the client has the first event
        await send({"type": "http.response.body", "body": b"data: second\n\n"})

    async with serve_asgi(app) as base, aiohttp.ClientSession() as http, http.get(base + "/") as response:
        assert response.status == 200
        async with asyncio.timeout(5):  # a cork held past the turn would never deliver it
            assert await response.content.readline() == b"data: first\n"
        second.set()
        assert (await response.content.read()).strip() == b"data: second"


async def _raw(base: str, request: bytes) -> tuple[bytes, bytes]:
    """The server's answer to raw bytes: its head and body."""
    head, _, body = (await raw_exchange(base, request)).partition(b"\r\n\r\n")
    return head, body


async def test_a_request_the_parser_rejects_gets_a_structured_error():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from bridge.serve.http_protocol import MAX_URL_BYTES

    async def echo(request):
        return JSONResponse({"q": len(request.query_params["q"])}, headers={"connection": "close"})

    async with serve_asgi(Starlette(routes=[Route("/search", echo)]), lifespan="off") as base:
        longest = "/search?q=" + "a" * (MAX_URL_BYTES - len("/search?q="))
        head, body = await _raw(base, f"GET {longest} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert head.startswith(b"HTTP/1.1 200") and json.loads(body) == {"q": MAX_URL_BYTES - len("/search?q=")}
        # one byte more: the bridge's error, as JSON, saying what to do
        head, body = await _raw(base, f"GET {longest}a HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head
        error = json.loads(body)
        assert error["status"] == 400 and error["error"]["error_class"] == "invalid_arguments"
        assert "over 65,535 bytes" in error["error"]["message"] and "16,384 characters of q" in error["error"]["message"]
        for garbage in (b"NOT HTTP\r\n\r\n", b"\x00\x01\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00"):  # the last: TLS to a plain port
            head, body = await _raw(base, garbage)
            assert head.startswith(b"HTTP/1.1 400") and "not HTTP/1.1" in json.loads(body)["error"]["message"], garbage
