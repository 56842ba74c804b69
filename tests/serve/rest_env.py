"""Shared pieces of the REST frontend tests: a bridge over FakeUpstreams served on uvicorn (the
whole app, MCP included, on one loopback port) with an aiohttp client pointed at it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app
from bridge.upstream import Upstream
from tests.servers import serve_asgi

TOKEN_ALL = "token-for-everything"
TOKEN_NARROW = "token-for-the-narrow-surface"


@dataclass
class Served:
    bridge: Bridge
    base: str
    http: aiohttp.ClientSession

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def get(
        self, path: str, *, token: str | None = None, **params: Any
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        async with self.http.get(
            path, params=params or None, headers=self.headers(token)
        ) as response:
            return response.status, await _body(response), response

    async def post(
        self,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        all_headers = {**self.headers(token), **(headers or {})}
        if raw is not None:
            all_headers.setdefault("Content-Type", "application/json")
            request = self.http.post(path, data=raw, headers=all_headers)
        else:
            request = self.http.post(path, json=body, headers=all_headers)
        async with request as response:
            return response.status, await _body(response), response

    def tool_id(self, name: str) -> str:
        decl = self.bridge.catalog.resolve(name)
        assert decl is not None, name
        return decl.tool_id


async def _body(response: aiohttp.ClientResponse) -> Any:
    text = await response.text()
    if response.content_type == "application/json":
        import json

        return json.loads(text)
    return text


def config_with(**sections: Any) -> dict[str, Any]:
    return {"store": {"path": ":memory:"}, **sections}


@contextlib.asynccontextmanager
async def serving(
    *upstreams: Upstream, config: dict[str, Any] | None = None
) -> AsyncIterator[Served]:
    """A started bridge over `upstreams`, served on loopback; closed (app and bridge) on exit."""
    bridge = Bridge(parse_config(config or config_with()), extra_upstreams=list(upstreams))
    await bridge.start()
    await indexed(bridge)
    app = build_app(bridge)
    try:
        async with (
            serve_asgi(app, server=bridge.config.server) as base,
            aiohttp.ClientSession(base_url=base, timeout=aiohttp.ClientTimeout(total=20)) as http,
        ):
            yield Served(bridge, base, http)
    finally:
        await close_app(app)
        await bridge.close()


async def indexed(bridge: Bridge) -> None:
    """Wait until the search index has every catalog change so far (it is written off the loop)."""
    wait = getattr(bridge.search, "wait_indexed", None)
    if wait is not None:
        await wait()


def narrow_surfaces() -> dict[str, Any]:
    """Two tokens: one sees everything, one sees only `fake__echo`-like tools outside `secret*`."""
    return {
        "server": {
            "tokens": [
                {"token": TOKEN_ALL, "surface": "default"},
                {"token": TOKEN_NARROW, "surface": "narrow"},
            ]
        },
        "surfaces": [{"name": "default"}, {"name": "narrow", "block": ["*secret*"]}],
    }
