"""The narrow HTTP/1.1 client (adapters/http/kept.py) against a loopback server that answers
each request with bytes the test scripts: bodies of every framing read as they come, a
connection kept only while its server keeps it alive, a kept one the server closed never used
again, any status given as it came, and aiohttp's failures for a server that fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from adapters.http import kept
from adapters.http.kept import KeptConnections, KeptResponse, plain_origin

# a request's bytes -> what to write (None: close; a tuple: its parts, each once `proceed` is set)
Answer = Callable[[bytes], bytes | tuple[bytes, ...] | None]


class Scripted:
    """A server answering each request with `answer(request)`; `requests` are those it read,
    `connections` how many it accepted."""

    def __init__(self) -> None:
        self.answer: Answer = lambda request: _json(b'{"ok":true}')
        self.requests: list[bytes] = []
        self.connections = 0
        self.close_after = False  # close each connection once its answer is written
        self.proceed = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answer(request)
                if answer is None:
                    break
                parts = answer if isinstance(answer, tuple) else (answer,)
                for n, part in enumerate(parts):
                    if n:
                        await self.proceed.wait()
                        self.proceed.clear()
                    writer.write(part)
                    await writer.drain()
                if self.close_after or b"connection: close" in parts[0].lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[Scripted, str]]:
    script = Scripted()
    server = await asyncio.start_server(script.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield script, f"http://127.0.0.1:{port}/mcp?x=1"
    finally:
        server.close()


def _json(body: bytes, status: str = "200 OK", more: bytes = b"") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n".encode()
        + more
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


async def _read(response: KeptResponse) -> bytes:
    body = b"".join([chunk async for chunk in response.content.iter_any()])
    response.release()
    return body


def _pool(url: str, read_timeout: float | None = 5.0) -> KeptConnections:
    return KeptConnections(url, connect_timeout=5.0, read_timeout=read_timeout)


async def test_requests_go_over_one_kept_connection(scripted: tuple[Scripted, str]):
    script, url = scripted
    pool = _pool(url)
    for n in range(3):
        response = await pool.request("POST", {"x-n": str(n)}, b'{"n":%d}' % n)
        assert (response.status, response.headers["content-type"]) == (200, "application/json")
        assert await _read(response) == b'{"ok":true}'
    assert script.connections == 1 and pool.opened == 1
    first = script.requests[0]
    assert first.startswith(b"POST /mcp?x=1 HTTP/1.1\r\n")
    assert b"host: 127.0.0.1:" in first and b"x-n: 0\r\n" in first
    assert first.endswith(b'\r\n\r\n{"n":0}')
    await pool.aclose()


async def test_an_event_stream_comes_chunk_by_chunk(scripted: tuple[Scripted, str]):
    script, url = scripted
    events = [b"event: message\r\ndata: {}\r\n\r\n", b": ping\r\n\r\n"]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    script.answer = lambda request: (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + chunked
    )
    pool = _pool(url)
    response = await pool.request("POST", {}, b"{}")
    assert response.headers["content-type"] == "text/event-stream"
    assert await _read(response) == b"".join(events)
    await _read(await pool.request("POST", {}, b"{}"))
    assert pool.opened == 1  # a chunked body read to its end leaves its connection kept
    await pool.aclose()


async def test_any_status_is_given_as_it_came(scripted: tuple[Scripted, str]):
    script, url = scripted
    script.answer = lambda request: _json(b'{"error":1}', "404 Not Found", b"x-a: 1\r\nx-a: 2\r\n")
    pool = _pool(url)
    response = await pool.request("POST", {}, b"{}")
    assert (response.status, response.headers["x-a"]) == (404, "1, 2")
    assert await _read(response) == b'{"error":1}'
    script.answer = lambda request: b"HTTP/1.1 100 Continue\r\n\r\n" + _json(b"{}", "307 Moved")
    response = await pool.request("POST", {}, b"{}")  # an interim response is passed over
    assert response.status == 307 and await _read(response) == b"{}"
    await pool.aclose()


async def test_a_connection_the_server_closes_is_not_used_again(scripted: tuple[Scripted, str]):
    script, url = scripted
    script.answer = lambda request: _json(b"{}", more=b"connection: close\r\n")
    pool = _pool(url)
    await _read(await pool.request("POST", {}, b"{}"))
    await _read(await pool.request("POST", {}, b"{}"))
    assert pool.opened == 2 == script.connections
    # a kept connection its server ended while it was idle
    script.answer, script.close_after = (lambda request: _json(b"{}")), True
    await _read(await pool.request("POST", {}, b"{}"))
    async with asyncio.timeout(5):
        while not pool._idle[-1][1].lost:  # until the end of the connection reaches the pool
            await asyncio.sleep(0)
    script.close_after = False
    await _read(await pool.request("POST", {}, b"{}"))
    await _read(await pool.request("POST", {}, b"{}"))
    assert pool.opened == 4
    script.answer = lambda request: None
    with pytest.raises(aiohttp.ServerDisconnectedError):  # as aiohttp, no second attempt
        await pool.request("POST", {}, b"{}")
    script.answer = lambda request: _json(b"{}")
    await _read(await pool.request("POST", {}, b"{}"))
    assert pool.opened == 5
    await pool.aclose()


async def test_a_body_without_a_length_ends_with_its_connection(scripted: tuple[Scripted, str]):
    script, url = scripted
    script.answer = lambda request: b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"
    pool = _pool(url)
    assert await _read(await pool.request("POST", {}, b"{}")) == b"all of it"
    await pool.aclose()


async def test_the_read_timeout_bounds_each_wait_not_the_whole_body(
    scripted: tuple[Scripted, str],
):
    script, url = scripted
    script.answer = lambda request: (
        b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nab",
        b"cd",
        b"ef",
    )
    pool = _pool(url, read_timeout=0.5)
    response = await pool.request("POST", {}, b"{}")

    async def feed() -> None:  # each part within the timeout, all of them past it
        for _ in range(2):
            await asyncio.sleep(0.3)
            script.proceed.set()

    feeder = asyncio.create_task(feed())
    assert await _read(response) == b"abcdef"
    await feeder
    await pool.aclose()


async def test_a_shorter_read_timeout_holds_on_a_connection_a_longer_one_timed(
    scripted: tuple[Scripted, str],
):
    script, url = scripted
    pool = _pool(url, read_timeout=60.0)
    assert await _read(await pool.request("POST", {}, b"{}")) == b'{"ok":true}'
    script.answer = lambda request: b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial"
    pool.read_timeout = 0.2
    response = await pool.request("POST", {}, b"{}")
    assert pool.opened == 1  # the kept connection, whose reads were timed at 60 s
    async with asyncio.timeout(5):
        with pytest.raises(aiohttp.SocketTimeoutError):
            await _read(response)
    response.close()
    await pool.aclose()


async def test_failures_are_aiohttps(scripted: tuple[Scripted, str]):
    script, url = scripted
    script.answer = lambda request: b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial"
    pool = _pool(url, read_timeout=0.2)
    response = await pool.request("POST", {}, b"{}")
    with pytest.raises(aiohttp.SocketTimeoutError):
        await _read(response)
    response.close()
    script.answer = lambda request: (
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\npartial"
    )
    response = await pool.request("POST", {}, b"{}")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await _read(response)
    response.close()
    script.answer = lambda request: b"NOT HTTP\r\n\r\n"
    with pytest.raises(aiohttp.ClientPayloadError):
        await pool.request("POST", {}, b"{}")
    with pytest.raises(ValueError):
        await pool.request("POST", {"x-a": "1\r\nx-b: 2"}, b"{}")
    await pool.aclose()
    async with asyncio.timeout(5):
        closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()
    with pytest.raises(OSError):
        await _pool(f"http://127.0.0.1:{port}/").request("POST", {}, b"{}")


async def test_requests_beyond_the_limit_wait_for_a_connection(scripted: tuple[Scripted, str]):
    _, url = scripted
    pool = KeptConnections(url, limit=1, connect_timeout=5.0, read_timeout=5.0)
    first = await pool.request("POST", {}, b"{}")
    second = asyncio.ensure_future(pool.request("POST", {}, b"{}"))
    await asyncio.sleep(0)
    assert not second.done()
    await _read(first)
    await _read(await second)
    assert pool.opened == 1
    await pool.aclose()


def test_only_plain_http_without_credentials_is_sent():
    assert plain_origin("http://127.0.0.1:8000/mcp")
    assert not plain_origin("https://example.test/mcp")
    assert not plain_origin("http://user:secret@example.test/mcp")


async def test_a_connection_idle_too_long_is_not_used_again(
    scripted: tuple[Scripted, str], monkeypatch: pytest.MonkeyPatch
):
    """The client ends an idle connection before its server would (uvicorn's 5 s), so that no
    request goes on a connection its server is closing."""
    assert kept.IDLE_SECONDS < 5
    _, url = scripted
    pool = _pool(url)
    await _read(await pool.request("POST", {}, b"{}"))
    monkeypatch.setattr(kept, "IDLE_SECONDS", 0.0)
    await _read(await pool.request("POST", {}, b"{}"))
    assert pool.opened == 2
    await pool.aclose()


async def test_a_body_released_before_its_end_is_read_to_it_without_the_reader(
    scripted: tuple[Scripted, str],
):
    """An event stream whose answer is in: its end, written apart, gives the connection back."""
    script, url = scripted
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    event = b"data: {}\r\n\r\n"
    script.answer = lambda request: (head + b"%x\r\n%s\r\n" % (len(event), event), b"0\r\n\r\n")
    pool = _pool(url)
    response = await pool.request("POST", {}, b"{}")
    assert await anext(response.content.iter_any()) == event
    response.release_when_read(100, 5.0)
    assert pool._in_use == 1 and not pool._idle  # not given back before its end
    script.proceed.set()
    async with asyncio.timeout(5):
        while not pool._idle:
            await asyncio.sleep(0)
    assert pool._in_use == 0
    script.answer = lambda request: _json(b"{}")
    await _read(await pool.request("POST", {}, b"{}"))
    assert pool.opened == 1  # the connection served again
    # an end that does not come in time, or more than the bound, drops the connection
    for limit, seconds in ((100, 0.05), (1, 5.0)):
        script.answer = lambda request: (head + b"%x\r\n%s\r\n" % (len(event), event), event)
        response = await pool.request("POST", {}, b"{}")
        assert await anext(response.content.iter_any()) == event
        response.release_when_read(limit, seconds)
        script.proceed.set()
        async with asyncio.timeout(5):
            while pool._in_use:
                await asyncio.sleep(0)
        assert not pool._idle
    assert pool.opened == 2  # the kept one dropped, then a new one dropped
    await pool.aclose()
