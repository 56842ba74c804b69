"""`bridge serve` re-reads its config on SIGHUP: upstreams come and go over real HTTP, a broken
config leaves it serving, and the frontends take new surfaces and tokens at the next request."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp
import yaml

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app
from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import HANDSHAKE, http_client, served_bridge
from tests.servers import TINY_MCP_SERVER, child_pids, free_port, serve_asgi

ROOT = Path(__file__).resolve().parents[2]
MCP_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def until(check, timeout: float = 20.0):
    """Poll `check` (async, returning a true value when done) until the deadline."""
    async with asyncio.timeout(timeout):
        while not (found := await check()):
            await asyncio.sleep(0.05)
    return found


def _mcp_upstream(name: str) -> dict:
    return {"name": name, "kind": "mcp", "command": sys.executable, "args": [str(TINY_MCP_SERVER)]}


async def test_bridge_serve_applies_its_config_again_on_sighup(tmp_path):
    path = tmp_path / "bridge.yaml"
    base_config = {
        "store": {"path": str(tmp_path / "bridge.db")},
        "surfaces": [{"name": "default", "defer": ["*"]}],
    }
    path.write_text(yaml.safe_dump({**base_config, "upstreams": [_mcp_upstream("alpha")]}))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge.cli",
        "serve",
        "-c",
        str(path),
        "--port",
        str(port),
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines: list[str] = []

    async def read_stderr() -> None:
        while raw := await process.stderr.readline():
            lines.append(raw.decode())

    reader = asyncio.create_task(read_stderr())

    async def said(start: str, count: int = 1) -> bool:
        return len([line for line in lines if start in line]) >= count

    try:
        await until(lambda: said("bridge: upstreams started"), 30)
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as http:

            async def get(route: str, **params) -> dict:
                async with http.get(route, params=params) as response:
                    return await response.json()

            async def names() -> set[str]:
                return {item["name"] for item in (await get("/tools"))["items"]}

            async def found(query: str) -> list[str]:
                return [m["name"] for m in (await get("/search", q=query))["matches"]]

            assert "alpha__echo" in await names()
            assert await until(lambda: found("echo")) == ["alpha__echo"]
            launched = set(child_pids(process.pid))  # alpha's server process
            assert launched

            # alpha removed, beta added
            path.write_text(yaml.safe_dump({**base_config, "upstreams": [_mcp_upstream("beta")]}))
            process.send_signal(signal.SIGHUP)

            async def swapped() -> bool:
                tools = await names()
                return "beta__echo" in tools and not any(n.startswith("alpha__") for n in tools)

            await until(swapped)
            await until(lambda: said("config reloaded from"))
            assert (
                next(line for line in lines if "config reloaded from" in line)
                .rstrip()
                .endswith("added: beta; removed: alpha")
            )
            assert [u["name"] for u in (await get("/readyz"))["upstreams"]] == ["beta"]

            async def searched_beta() -> bool:
                return await found("echo") == ["beta__echo"]

            await until(searched_beta)

            async def alpha_stopped() -> bool:
                return not launched & set(child_pids(process.pid))

            await until(alpha_stopped)

            # a broken config: said on one line, nothing changes, the bridge keeps serving
            path.write_text(
                "upstreams:\n  - {name: beta, kind: mcp, command: python, args: [-m, bridge.demo.mcp_server\n"
            )
            process.send_signal(signal.SIGHUP)
            await until(lambda: said("nothing changed"))
            (error,) = [line for line in lines if "nothing changed" in line]
            assert "ERROR bridge.runtime: config reload: " in error and "not valid YAML" in error
            following = lines[lines.index(error) + 1 :]
            assert not any(line.startswith((" ", "Traceback")) for line in following)
            assert "beta__echo" in await names() and await found("echo") == ["beta__echo"]
            assert (await get("/healthz"))["status"] == "ok"

        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        reader.cancel()


async def test_rest_and_mcp_over_http_take_new_tokens_and_surfaces_at_the_next_request():
    def config(token: str, block: list[str]) -> dict:
        return {
            "store": {"path": ":memory:"},
            "server": {"tokens": [{"token": token}]},
            "surfaces": [{"name": "default", "block": block}],
        }

    bridge = Bridge(
        parse_config(config("the-first-token", ["svc__echo"])),
        extra_upstreams=[FakeUpstream(name="svc", tools=[tool("echo"), tool("other")])],
    )
    await bridge.start()
    app = build_app(bridge)
    try:
        async with serve_asgi(app) as base, aiohttp.ClientSession(base_url=base) as http:

            async def tools(token: str) -> tuple[int, list[str]]:
                async with http.get(
                    "/tools", headers={"Authorization": f"Bearer {token}"}
                ) as response:
                    body = await response.json()
                    return response.status, [i["name"] for i in body.get("items", [])]

            async def initialize(token: str) -> int:
                async with http.post(
                    "/mcp",
                    data=json.dumps(MCP_INITIALIZE),
                    headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"},
                ) as response:
                    return response.status

            assert await tools("the-first-token") == (200, ["svc__other"])
            await bridge.reload(parse_config(config("the-second-token", [])))
            assert (await tools("the-first-token"))[0] == 401 and await initialize(
                "the-first-token"
            ) == 401
            # the same surface name, another surface: its listing is made again
            assert await tools("the-second-token") == (200, ["svc__echo", "svc__other"])
            assert await initialize("the-second-token") == 200
    finally:
        await close_app(app)
        await bridge.close()


async def test_an_mcp_session_is_told_when_a_reload_changes_its_surface():
    surfaces = [{"name": "default", "load": ["*"], "block": ["svc__echo"]}]
    upstream = FakeUpstream(name="svc", tools=[tool("echo"), tool("other")])
    async with served_bridge({"surfaces": surfaces}, [upstream], debounce=0.01) as served:
        async with http_client(served.url, HANDSHAKE) as client:
            assert await client.names() == {"svc__other"}
            await served.bridge.reload(
                parse_config(
                    {
                        "store": {"path": ":memory:"},
                        "surfaces": [{"name": "default", "load": ["*"]}, {"name": "added"}],
                    }
                )
            )
            await client.notices.next()
            assert await client.names() == {"svc__echo", "svc__other"}
            served.frontend.notifier.listen_handler(
                "added"
            )  # a surface added gets its change stream
