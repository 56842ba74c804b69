"""The aiohttp wire under an MCP upstream's httpx2 client (adapters/mcp/wire.py), against a real
loopback server: requests and answers pass as sent (a compressed body decoded by httpx2 above),
a body read to its end leaves its connection for the next request, and aiohttp's failures come
up as the httpx2 errors the SDK and the adapter read."""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator

import httpx2
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from adapters.mcp.wire import AiohttpTransport
from tests.servers import free_port


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[tuple[str, int]]]]:
    peers: list[tuple[str, int]] = []

    async def echo(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername")[:2])  # type: ignore[union-attr]
        body = await request.read()
        if request.path == "/gzip":
            return web.Response(
                body=gzip.compress(b"x" * 5000), headers={"Content-Encoding": "gzip"}
            )
        if request.path == "/cut":
            response = web.StreamResponse(headers={"Content-Length": "1000"})
            await response.prepare(request)
            await response.write(b"partial")
            request.transport.close()  # type: ignore[union-attr]
            return response
        if request.path == "/slow":
            await asyncio.sleep(1)
        return web.json_response(
            {
                "method": request.method,
                "body": body.decode(),
                "trace": request.headers.get("traceparent"),
            },
            status=201,
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    port = server.port
    try:
        yield f"http://127.0.0.1:{port}", peers
    finally:
        await server.close()


def client(**kwargs: object) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=AiohttpTransport(ssl.create_default_context()), **kwargs)  # type: ignore[arg-type]


async def test_requests_and_answers_pass_as_sent_over_one_kept_connection(
    server: tuple[str, list[tuple[str, int]]],
) -> None:
    base, peers = server
    async with client() as http:
        for n in range(3):
            response = await http.post(
                f"{base}/mcp", content=f'{{"n": {n}}}', headers={"traceparent": "00-x"}
            )
            assert response.status_code == 201
            assert response.json() == {"method": "POST", "body": f'{{"n": {n}}}', "trace": "00-x"}
        decoded = await http.get(f"{base}/gzip")
        assert decoded.content == b"x" * 5000  # httpx2 decodes, as with its own transport
    assert len(set(peers)) == 1, peers


async def test_failures_come_up_as_httpx2_errors(server: tuple[str, list[tuple[str, int]]]) -> None:
    base, _ = server
    async with client(timeout=httpx2.Timeout(5, read=0.3)) as http:
        with pytest.raises(httpx2.ConnectError):
            await http.get(f"http://127.0.0.1:{free_port()}/mcp")
        with pytest.raises(httpx2.ReadTimeout):
            await http.get(f"{base}/slow")
        with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
            await http.get(f"{base}/cut")
        assert (await http.get(f"{base}/after")).status_code == 201  # the client goes on
