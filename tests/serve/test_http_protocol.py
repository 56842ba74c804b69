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

from bridge.config import ServerConfig
from bridge.serve.http_protocol import CORK_LIMIT, LEAVE_SCOPE_KEY, CorkedTransport
from tests.servers import raw_exchange, serve_asgi, until


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
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
        await second.wait()  # only set once the client has the first event
        await send({"type": "http.response.body", "body": b"data: second\n\n"})

    async with (
        serve_asgi(app) as base,
        aiohttp.ClientSession() as http,
        http.get(base + "/") as response,
    ):
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
        assert head.startswith(b"HTTP/1.1 200") and json.loads(body) == {
            "q": MAX_URL_BYTES - len("/search?q=")
        }
        # one byte more: the bridge's error, as JSON, saying what to do
        head, body = await _raw(base, f"GET {longest}a HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head
        error = json.loads(body)
        assert error["status"] == 400 and error["error"]["error_class"] == "invalid_arguments"
        assert (
            "over 65,535 bytes" in error["error"]["message"]
            and "16,384 characters of q" in error["error"]["message"]
        )
        for garbage in (
            b"NOT HTTP\r\n\r\n",
            b"\x00\x01\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00",
        ):  # the last: TLS to a plain port
            head, body = await _raw(base, garbage)
            assert (
                head.startswith(b"HTTP/1.1 400")
                and "not HTTP/1.1" in json.loads(body)["error"]["message"]
            ), garbage


# ---------------------------------------------------------------- connection limits


class Recorder:
    """An ASGI app that answers each request with the length of its body, once `gate` is set,
    and notes when `receive` said the client left before the body was whole."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = 0
        self.heard: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.started += 1
        await self.gate.wait()
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.heard.append("disconnect")
                return
            body, more = body + message.get("body", b""), message.get("more_body", False)
        answer = json.dumps({"length": len(body)}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _connect(base: str, local: str = "127.0.0.1") -> Stream:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    return await asyncio.open_connection(host, int(port), local_addr=(local, 0))


async def _closing_answer(reader: asyncio.StreamReader) -> tuple[bytes, Any, float]:
    """What the server sends before it closes the connection: its head, its JSON body (None
    when it sent nothing), and the seconds it took."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with asyncio.timeout(10):
        raw = await reader.read()
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, json.loads(body) if body else None, loop.time() - began


async def test_a_connection_that_sends_nothing_is_closed_after_idle_timeout():
    limits = ServerConfig(idle_timeout=0.3)
    async with serve_asgi(Recorder(), lifespan="off", server=limits) as base:
        reader, writer = await _connect(base)
        head, body, took = await _closing_answer(reader)
        assert (head, body) == (b"", None) and 0.25 <= took < 5
        writer.close()


async def test_a_head_that_stops_or_trickles_is_answered_408_after_header_timeout():
    app = Recorder()
    limits = ServerConfig(idle_timeout=0.2, header_timeout=0.6)
    async with serve_asgi(app, lifespan="off", server=limits) as base:
        reader, writer = await _connect(base)  # the head without its final blank line
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
        head, body, took = await _closing_answer(reader)
        assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head
        assert 0.5 <= took < 5
        assert body["error"]["details"] == {"header_timeout": 0.6}
        assert "server.header_timeout" in body["error"]["message"]
        writer.close()

        # a byte at a time, line ends first (which the parser skips): the deadline stays
        reader, writer = await _connect(base)

        async def trickle() -> None:
            for byte in b"\r\n" * 3 + b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)  # the pace of the slow client under test

        sending = asyncio.create_task(trickle())
        head, body, took = await _closing_answer(reader)
        sending.cancel()
        assert head.startswith(b"HTTP/1.1 408") and 0.5 <= took < 5
        writer.close()
        assert app.started == 0


async def test_a_body_that_stops_partway_is_answered_408_on_any_route_and_the_app_hears_it():
    app = Recorder()
    async with serve_asgi(app, lifespan="off", server=ServerConfig(body_timeout=0.5)) as base:
        reader, writer = await _connect(base)
        writer.write(b"POST /any/route HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        writer.write(b"x" * 12)
        head, body, took = await _closing_answer(reader)
        assert head.startswith(b"HTTP/1.1 408") and 0.45 <= took < 5, head
        assert body["error"]["details"] == {"body_timeout": 0.5}
        assert "server.body_timeout" in body["error"]["message"]
        writer.close()
        await until(lambda: app.heard == ["disconnect"])
        async with aiohttp.ClientSession() as http, http.post(base + "/", data=b"x" * 12) as answer:
            assert await answer.json() == {"length": 12}


async def test_past_its_address_cap_a_connection_takes_an_idle_ones_place_or_is_refused_429():
    app = Recorder()
    limits = ServerConfig(max_connections_per_address=2)
    async with serve_asgi(app, lifespan="off", server=limits) as base:
        first, second = await _connect(base), await _connect(base)
        third = await _connect(base)  # both held are idle: the longest idle goes
        assert (await _closing_answer(first[0]))[:2] == (b"", None)
        app.gate.clear()  # the two held now serve a request each
        for _, writer in (second, third):
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await until(lambda: app.started == 2)
        reader, writer = await _connect(base)
        head, body, _ = await _closing_answer(reader)
        assert head.startswith(b"HTTP/1.1 429") and b"retry-after: 1" in head.lower()
        assert body["error"]["error_class"] == "rate_limited"
        assert body["error"]["recoverability"] == "retry_later"
        reader, writer = await _connect(base, local="127.0.0.2")  # another address is served
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        app.gate.set()
        head, body, _ = await _closing_answer(reader)
        assert head.startswith(b"HTTP/1.1 200") and body == {"length": 0}


async def test_an_app_is_told_when_its_client_leaves_before_the_answer():
    told = asyncio.Event()
    asked = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope[LEAVE_SCOPE_KEY](told.set)
            asked.set()
            await told.wait()  # no answer: the client leaves first

    async with serve_asgi(app, lifespan="off") as base:
        _reader, writer = await _connect(base)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        async with asyncio.timeout(10):
            await asked.wait()
            writer.close()
            await told.wait()


async def test_the_uvicorn_internals_the_protocol_uses_are_where_it_expects_them():
    """http_protocol.py subclasses uvicorn's httptools protocol and reads its request cycle: a
    uvicorn release that renames or moves any of these fails here, by name, before the limits
    quietly stop working."""
    import inspect

    import uvicorn
    from uvicorn.protocols.http import httptools_impl
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.server import ServerState

    fix = f"uvicorn {uvicorn.__version__} changed %s: update bridge/serve/http_protocol.py"
    moved = [
        name
        for name in ("STATUS_LINE", "HttpToolsProtocol", "RequestResponseCycle")
        if not hasattr(httptools_impl, name)
    ]
    assert not moved, fix % moved
    protocol_class = httptools_impl.HttpToolsProtocol
    hooks = (
        "connection_made",
        "connection_lost",
        "data_received",
        "send_400_response",
        "on_message_begin",
        "on_headers_complete",
        "on_message_complete",
        "on_response_complete",
        "shutdown",
        "timeout_keep_alive_handler",
    )
    moved = [name for name in hooks if not callable(getattr(protocol_class, name, None))]
    # the cycle calls the protocol back when a response is whole (where idle time starts)
    source = inspect.getsource(protocol_class.on_headers_complete)
    if "on_response=self.on_response_complete" not in source:
        moved.append("RequestResponseCycle(on_response=self.on_response_complete)")
    config = uvicorn.Config(app=lambda scope, receive, send: None, http=protocol_class)
    protocol = protocol_class(
        config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    moved += [
        name
        for name in (
            "loop",
            "client",
            "transport",
            "flow",
            "cycle",
            "server_state",
            "timeout_keep_alive",
            "timeout_keep_alive_task",
        )
        if name not in vars(protocol)
    ]
    if not hasattr(protocol.server_state, "default_headers"):
        moved.append("ServerState.default_headers")
    cycle = httptools_impl.RequestResponseCycle(
        scope={},
        transport=None,
        flow=None,  # type: ignore[arg-type]
        logger=None,
        access_logger=None,
        access_log=False,  # type: ignore[arg-type]
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )
    moved += [
        f"RequestResponseCycle.{name}"
        for name in ("response_started", "response_complete", "disconnected", "message_event")
        if name not in vars(cycle)
    ]
    if "read_paused" not in vars(FlowControl(None)):  # type: ignore[arg-type]
        moved.append("FlowControl.read_paused")
    assert not moved, fix % moved
