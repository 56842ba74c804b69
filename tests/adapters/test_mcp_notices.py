"""MCP upstreams over streamable HTTP whose server never answers the POST of a notification, or
closes its connection unanswered: the POST is abandoned after its bound (`ping_timeout`; at most
half of `start_timeout` until the first listing) or its failure, counted lost and logged, and the
session goes on. The SDK sent such a POST in the one task that writes every message of the
session, so every later request waited behind it, or failed once that task had ended on it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from adapters.mcp.notices import ANSWER, notice_method
from bridge.config import parse_config
from bridge.runtime import Bridge
from tests.adapters.mcp_fixtures.server import build_server
from tests.servers import read_body, replaying, serve_asgi


def make_bridge(base: str, **settings: Any) -> Bridge:
    upstream = {
        "name": "remote",
        "kind": "mcp",
        "url": f"{base}/mcp",
        "protocol": "legacy",
        "ping_interval": None,
        "retry_initial": 30,
        "retry_max": 30,
        **settings,
    }
    return Bridge(
        parse_config({"store": {"path": ":memory:"}, "upstreams": [upstream]}, source="test")
    )


@contextlib.asynccontextmanager
async def started(base: str, **settings: Any) -> AsyncIterator[tuple[Bridge, float]]:
    """A bridge of `make_bridge`, started; yields it and the seconds its start took."""
    bridge = make_bridge(base, **settings)
    loop = asyncio.get_running_loop()
    begun = loop.time()
    async with bridge:
        yield bridge, loop.time() - begun


@contextlib.asynccontextmanager
async def hanging(method: str) -> AsyncIterator[tuple[str, list[str]]]:
    """The SDK's fixture server over streamable HTTP, behind a wrapper that reads the POST of each
    message and never answers those of `method` (`all`: every POST after `initialize`); yields the
    base URL and the methods of the POSTs it got (`response` for an answer)."""
    server, _ = build_server()
    app, seen, release = server.streamable_http_app(), [], asyncio.Event()

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = await read_body(receive)
        got = json.loads(body).get("method", "response")
        seen.append(got)
        if got == method or (method == "all" and got != "initialize"):
            await release.wait()  # read, never answered
            return
        await app(scope, replaying(body, receive), send)

    try:
        async with serve_asgi(wrapped) as base:
            try:
                yield base, seen
            finally:
                release.set()
    finally:
        release.set()


def test_a_post_is_told_from_its_body() -> None:
    def post(message: Any) -> httpx2.Request:
        return httpx2.Request("POST", "http://127.0.0.1:1/mcp", json=message)

    assert (
        notice_method(
            post(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
            )
        )
        == "notifications/cancelled"
    )
    assert notice_method(post({"jsonrpc": "2.0", "id": 7, "result": {}})) == ANSWER
    assert (
        notice_method(post({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "no"}}))
        == ANSWER
    )
    assert (
        notice_method(post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}))
        is None
    )
    # a large body is taken for a request unread: the SDK's notifications and answers are small
    assert (
        notice_method(
            post(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"x": "y" * 100_000},
                }
            )
        )
        is None
    )
    assert notice_method(httpx2.Request("GET", "http://127.0.0.1:1/mcp")) is None


async def test_a_start_whose_initialized_notification_is_never_answered_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The POST of notifications/initialized gets half of start_timeout (ping_timeout once
    listed); then the listing is sent and the start goes on. It held the listing back until the
    start failed (`no answer within start_timeout`), 5 s after it: the SDK's cancellation of the
    listing waited behind it too."""
    async with hanging("notifications/initialized") as (base, seen):
        async with started(base, start_timeout=3, ping_timeout=30) as (bridge, _):
            slot = bridge.catalog.slot("remote")
            assert slot.health.state == "ready", slot.health  # not failed at start_timeout
            assert (await bridge.invoker.invoke("remote__echo", {"text": "listed"})).content[0][
                "text"
            ] == "listed"
            assert (await slot.upstream.health())["lost_notifications"] == {
                "notifications/initialized": 1
            }
        assert seen[:3] == ["initialize", "notifications/initialized", "tools/list"]
    said = [
        r
        for r in caplog.records
        if "did not answer the POST of notifications/initialized" in r.getMessage()
    ]
    assert [r.levelno for r in said] == [logging.WARNING], said
    assert (
        "within 1.5s; it was abandoned (counted lost) and the session goes on"
        in said[0].getMessage()
    )


async def test_a_start_whose_server_answers_nothing_after_initialize_fails_at_start_timeout_saying_so() -> (
    None
):
    async with hanging("all") as (base, _):
        async with started(base, start_timeout=1, ping_timeout=30) as (bridge, took):
            # it ends at start_timeout (with room for a loaded machine), not at ping_timeout or
            # the call timeout (30 s each)
            assert took < 5
            slot = bridge.catalog.slot("remote")
            assert slot.health.state == "failed"
            assert slot.health.reason == (
                f"no answer within start_timeout=1.0s (still listing the tools; {base}/mcp did not answer "
                "the POST of notifications/initialized)"
            )


async def test_a_cancelled_notification_never_answered_holds_the_session_only_for_ping_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call whose caller goes away is cancelled upstream with notifications/cancelled, whose POST
    the server never answers: the next call waits for it at most ping_timeout, then runs. It
    waited for the HTTP read timeout (300 s), and the call after it timed out."""
    caplog.set_level(logging.INFO, logger="bridge.adapters.mcp")
    async with hanging("notifications/cancelled") as (base, seen):
        async with make_bridge(base, ping_timeout=0.5, timeout=10) as bridge:
            loop = asyncio.get_running_loop()
            for attempt in range(2):
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(
                        bridge.invoker.invoke("remote__hang", {}), 0.3
                    )  # the caller goes away
                begun = loop.time()
                echoed = await bridge.invoker.invoke("remote__echo", {"text": f"after {attempt}"})
                assert (
                    echoed.status == "succeeded" and echoed.content[0]["text"] == f"after {attempt}"
                ), echoed.error
                assert loop.time() - begun < 2
            slot = bridge.catalog.slot("remote")
            assert slot.health.state == "ready"
            assert (await slot.upstream.health())["lost_notifications"] == {
                "notifications/cancelled": 2
            }
        assert seen.count("notifications/cancelled") == 2
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if "did not answer the POST of notifications/cancelled" in r.getMessage()
    ]
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO], said
    assert "within 0.5s" in said[0][1]


@contextlib.asynccontextmanager
async def dropping(base: str, marker: bytes) -> AsyncIterator[str]:
    """A TCP relay to the server at `base` that closes the connection, unanswered, of a request
    whose bytes hold `marker`; yields its own base URL."""
    host, port = base.removeprefix("http://").rsplit(":", 1)

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.StreamWriter | None
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if cut is not None and marker in data:
                    cut.transport.abort()
                    writer.transport.abort()
                    return
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(
        client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(
            pipe(client_reader, server_writer, client_writer),
            pipe(server_reader, client_writer, None),
        )

    relay_server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{relay_server.sockets[0].getsockname()[1]}"
    finally:
        relay_server.close()


async def test_a_notification_whose_connection_is_closed_unanswered_is_lost_and_the_session_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The SDK's writer of the session's messages ended on the failed POST of a notification, and
    every later call failed (`the connection closed during echo`) while the upstream stayed ready."""
    server, _ = build_server()
    async with (
        serve_asgi(server.streamable_http_app()) as base,
        dropping(base, b'"notifications/cancelled"') as relayed,
    ):
        async with make_bridge(relayed, timeout=10) as bridge:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(bridge.invoker.invoke("remote__hang", {}), 0.3)
            for attempt in range(2):
                echoed = await bridge.invoker.invoke("remote__echo", {"text": f"after {attempt}"})
                assert (
                    echoed.status == "succeeded" and echoed.content[0]["text"] == f"after {attempt}"
                ), echoed.error
            assert (await bridge.catalog.slot("remote").upstream.health())[
                "lost_notifications"
            ] == {"notifications/cancelled": 1}
    said = [
        r.getMessage()
        for r in caplog.records
        if "the POST of notifications/cancelled to" in r.getMessage()
    ]
    assert len(said) == 1 and f"to {relayed}/mcp failed (RemoteProtocolError: " in said[0], said
