"""Shared pieces of the MCP frontend tests: a bridge over FakeUpstreams served on uvicorn, and one
client interface over both protocol eras (ClientSession for 2025-11-25, mcp.Client for 2026-07-28)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp.types as types
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.mcp import MCPFrontend
from tests.fakes import FakeUpstream
from tests.servers import serve_asgi

HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
ERAS = [HANDSHAKE, MODERN]
# What a raw HTTP client of /mcp sends: the Accept and Content-Type headers, a handshake-era
# `initialize`, and the `_meta` that stands in for it on 2026-07-28.
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": HANDSHAKE,
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


class CancelAwareUpstream(FakeUpstream):
    """A FakeUpstream that remembers calls canceled while running."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.canceled = asyncio.Event()

    async def invoke(self, native_id: str, arguments: dict[str, Any], ctx: Any) -> Any:
        try:
            return await super().invoke(native_id, arguments, ctx)
        except asyncio.CancelledError:
            self.canceled.set()
            raise


class Notices:
    """`notifications/tools/list_changed` received by a handshake-era session."""

    def __init__(self) -> None:
        self.count = 0
        self._event = asyncio.Event()

    async def handle(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1
            self._event.set()

    async def next(self, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            await self._event.wait()
        self._event.clear()


class EraClient:
    """The calls the tests make, the same in both eras."""

    era: str
    notices: Notices | None = None

    async def page(self, cursor: str | None) -> types.ListToolsResult:
        raise NotImplementedError

    async def call(
        self, name: str, arguments: dict[str, Any], progress: Any = None
    ) -> types.CallToolResult:
        raise NotImplementedError

    async def tools(self) -> list[types.Tool]:
        out: list[types.Tool] = []
        cursor = None
        while True:
            page = await self.page(cursor)
            out += page.tools
            cursor = page.next_cursor
            if not cursor:
                return out

    async def names(self) -> set[str]:
        return {t.name for t in await self.tools()}

    async def read(self, uri: str) -> types.ReadResourceResult:
        raise NotImplementedError

    async def search(self, query: str, **options: Any) -> dict[str, Any]:
        result = await self.call("search_tools", {"query": query, **options})
        assert not result.is_error, result.content
        return result.structured_content


class HandshakeClient(EraClient):
    era = HANDSHAKE

    def __init__(self, session: ClientSession, notices: Notices) -> None:
        self.session = session
        self.notices = notices

    async def page(self, cursor: str | None) -> types.ListToolsResult:
        return await self.session.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )

    async def call(
        self, name: str, arguments: dict[str, Any], progress: Any = None
    ) -> types.CallToolResult:
        return await self.session.call_tool(name, arguments, progress_callback=progress)

    async def read(self, uri: str) -> types.ReadResourceResult:
        return await self.session.read_resource(uri)


class ModernClient(EraClient):
    era = MODERN

    def __init__(self, client: Client) -> None:
        self.client = client

    async def page(self, cursor: str | None) -> types.ListToolsResult:
        return await self.client.list_tools(cursor=cursor, cache_mode="refresh")

    async def call(
        self, name: str, arguments: dict[str, Any], progress: Any = None
    ) -> types.CallToolResult:
        return await self.client.call_tool(name, arguments, progress_callback=progress)

    async def read(self, uri: str) -> types.ReadResourceResult:
        return await self.client.read_resource(uri)


@contextlib.asynccontextmanager
async def connect(transport: Any, era: str) -> AsyncIterator[EraClient]:
    """An initialized client over `transport` (an SDK transport context manager) in `era`."""
    if era == HANDSHAKE:
        notices = Notices()
        async with (
            transport as (read, write),
            ClientSession(read, write, message_handler=notices.handle) as session,
        ):
            await session.initialize()
            yield HandshakeClient(session, notices)
    else:
        async with Client(transport, mode=MODERN, cache=None) as client:
            yield ModernClient(client)


@contextlib.asynccontextmanager
async def http_client(url: str, era: str, token: str | None = None) -> AsyncIterator[EraClient]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=30)) as http:
        async with connect(streamable_http_client(f"{url}/mcp", http_client=http), era) as client:
            yield client


class Served:
    def __init__(self, url: str, bridge: Bridge, frontend: MCPFrontend) -> None:
        self.url = url
        self.bridge = bridge
        self.frontend = frontend


@contextlib.asynccontextmanager
async def served_bridge(
    config: dict[str, Any],
    upstreams: list[FakeUpstream],
    host: str = "127.0.0.1",
    **frontend_options: Any,
) -> AsyncIterator[Served]:
    """A started Bridge over FakeUpstreams, its MCP frontend on uvicorn at `host` (127.0.0.1)."""
    bridge = Bridge(
        parse_config({"store": {"path": ":memory:"}, **config}), extra_upstreams=list(upstreams)
    )
    await bridge.start()
    frontend = MCPFrontend(bridge, **frontend_options)
    try:
        app = frontend.http_app([], host=host)
        async with serve_asgi(app, host=host, server=bridge.config.server) as url:
            yield Served(url, bridge, frontend)
    finally:
        await frontend.aclose()
        await bridge.close()


def error_class(result: types.CallToolResult) -> str | None:
    assert result.is_error, result.content
    # the record is in the bridge's `_meta` entry when the tool was listed with an output schema
    record = result.structured_content or (result.meta or {}).get("a2t-bridge/result", {})
    return record.get("error", {}).get("error_class")


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
