"""`bridge serve`: one port for MCP and REST, the refusal to serve a non-loopback address without
tokens, and a clean shutdown (launched upstream processes included) on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import yaml
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app, run_http
from tests.fakes import FakeUpstream
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


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, server: dict | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`bridge serve` over the tiny MCP server (its `hang` never answers), and its base URL once
    its upstream has started; killed if still running at the end."""
    config = {
        "store": {"path": ":memory:"},
        "server": server or {},
        "upstreams": [
            {
                "name": "fx",
                "kind": "mcp",
                "command": sys.executable,
                "args": [str(TINY_MCP_SERVER), "--hang"],
            }
        ],
    }
    (tmp_path / "bridge.yaml").write_text(yaml.safe_dump(config))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge.cli",
        "serve",
        "-c",
        str(tmp_path / "bridge.yaml"),
        "--port",
        "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stderr is not None
    try:
        lines: list[str] = []
        async with asyncio.timeout(30):
            while not (lines and lines[-1].startswith("bridge: upstreams started")):
                raw = await process.stderr.readline()
                assert raw, "bridge serve exited early:\n" + "".join(lines)
                lines.append(raw.decode())
        (banner,) = [line for line in lines if line.startswith("bridge: serving")]
        yield process, banner.rsplit(" on ", 1)[1].strip()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _mcp_session(http: aiohttp.ClientSession) -> dict[str, str]:
    async with http.post("/mcp", data=json.dumps(MCP_INITIALIZE), headers=MCP_HEADERS) as response:
        headers = {
            **MCP_HEADERS,
            "Mcp-Session-Id": response.headers["Mcp-Session-Id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
    async with http.post(
        "/mcp",
        data=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        headers=headers,
    ) as response:
        assert response.status == 202
    return headers


async def test_refuses_a_public_bind_without_tokens(capsys):
    config = parse_config({"store": {"path": ":memory:"}})
    assert await run_http(config, "0.0.0.0", 0, insecure=False) == 2
    assert "refusing to serve 0.0.0.0 without authentication" in capsys.readouterr().err


async def test_mcp_and_rest_answer_on_one_port():
    bridge = Bridge(
        parse_config({"store": {"path": ":memory:"}}), extra_upstreams=[FakeUpstream(name="f")]
    )
    await bridge.start()
    app = build_app(bridge)
    try:
        async with serve_asgi(app) as base, aiohttp.ClientSession(base_url=base) as http:
            async with http.get("/tools") as response:
                assert (
                    response.status == 200
                    and (await response.json())["items"][0]["name"] == "f__echo"
                )
            async with http.get("/tools/", allow_redirects=False) as response:
                assert response.status == 404  # no undocumented slash redirect
            routed: list[str] = []
            router_app = app.router.middleware_stack

            async def routing(scope: Any, receive: Any, send: Any) -> None:
                routed.append(scope["path"])
                await router_app(scope, receive, send)

            app.router.middleware_stack = routing
            async with http.post("/mcp", json=MCP_INITIALIZE, headers=MCP_HEADERS) as response:
                assert response.status == 200 and "serverInfo" in await response.text()
            async with http.post("/mcp", data=b"x" * (2 << 20), headers=MCP_HEADERS) as response:
                assert response.status == 413  # the body limit covers every path
            async with http.get("/mcp/", allow_redirects=False) as response:
                assert response.status == 404
            # /mcp is served past the routing, which only finds its one route
            assert routed == ["/mcp/"]
    finally:
        await close_app(app)
        await bridge.close()


async def test_bridge_serve_starts_its_upstreams_serves_and_stops_on_sigterm(tmp_path):
    a2t_port = free_port()
    config = {
        "store": {"path": str(tmp_path / "bridge.db")},
        "upstreams": [
            {
                "name": "a2t_demo",
                "kind": "a2t",
                "url": f"http://127.0.0.1:{a2t_port}",
                "start_timeout": 15,
                "launch": {
                    "command": "python",
                    "args": ["-m", "bridge.demo.a2t_server", "--port", str(a2t_port)],
                    "cwd": str(ROOT),
                },
            }
        ],
    }
    (tmp_path / "bridge.yaml").write_text(yaml.safe_dump(config))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge.cli",
        "serve",
        "-c",
        str(tmp_path / "bridge.yaml"),
        "--port",
        "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        lines = []
        async with asyncio.timeout(30):
            while True:
                raw = await process.stderr.readline()
                assert raw, "bridge serve exited early:\n" + "".join(lines)
                lines.append(raw.decode())
                if raw.startswith(b"bridge: serving"):
                    break
            base = lines[-1].rsplit(" on ", 1)[1].strip()
            for _ in range(6):  # the URL lines
                lines.append((await process.stderr.readline()).decode())
            while not lines[-1].startswith(
                "bridge: upstreams started"
            ):  # printed once a2t_demo has listed
                lines.append((await process.stderr.readline()).decode())
        assert any("/mcp" in line for line in lines) and any(
            f"{base}/openapi.json" in line for line in lines
        )
        assert re.fullmatch(
            r"bridge: upstreams started: serving [1-9][0-9]* tools from 1 upstreams\n", lines[-1]
        ), lines[-1]
        async with aiohttp.ClientSession(base_url=base) as http:
            async with http.get("/tools") as response:
                names = [i["name"] for i in (await response.json())["items"]]
                assert "a2t_demo__add" in names
            async with http.post(
                "/tools/a2t_demo__add:invoke",
                json={"input_parameters": [{"name": "a", "value": 2}, {"name": "b", "value": 3}]},
            ) as response:
                assert (await response.json())["output_parameters"] == [
                    {"name": "result", "value": 5}
                ]  # a number, as the upstream said
            async with http.post(
                "/mcp", data=json.dumps(MCP_INITIALIZE), headers=MCP_HEADERS
            ) as response:
                assert response.status == 200
        # the launched process holds no descriptor of the bridge's listening socket (it kept the
        # port after a kill -9 of the bridge)
        assert _socket_inodes(process.pid) and not _socket_inodes(process.pid) & _socket_inodes(
            *child_pids(process.pid)
        )
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            assert await process.wait() == 0
        # the launched a2t server was stopped with the bridge
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", a2t_port)
            writer.close()
            raise AssertionError("the launched upstream process is still listening")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_call_still_running_when_sigterm_grace_ends_is_answered_and_cancelled(tmp_path):
    # open requests get `server.shutdown_timeout` to finish; one still running then was cancelled
    # by the HTTP server: a plain-text 500 and a logged traceback, where a JSON error envelope is
    # promised
    async with serving(tmp_path, {"shutdown_timeout": 0.5}) as (process, base):
        async with aiohttp.ClientSession(base_url=base) as http:
            call = asyncio.ensure_future(http.post("/invoke", json={"tool": "fx__hang"}))
            await asyncio.sleep(0.5)  # running upstream
            loop = asyncio.get_running_loop()
            began = loop.time()
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                response = await call
                body = await response.json()
            assert loop.time() - began < 3  # the grace set, not the default 5 s
        assert response.status == 503
        assert (
            body["error"]["error_class"] == "dependency_unavailable"
            and "stopping" in body["error"]["message"]
        )
        async with asyncio.timeout(15):
            assert await process.wait() == 0
        stderr = (await process.stderr.read()).decode()
        assert "Traceback" not in stderr, stderr


async def test_an_mcp_call_still_running_when_sigterm_grace_ends_is_answered(tmp_path):
    # the call's POST stream was cancelled when the grace ended: no answer, a traceback logged
    async with serving(tmp_path, {"shutdown_timeout": 1}) as (process, base):
        async with asyncio.timeout(20):
            async with (
                httpx2.AsyncClient(timeout=30) as http,
                streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                call = asyncio.ensure_future(session.call_tool("fx__hang", {}))
                await asyncio.sleep(0.5)  # running upstream
                began = time.monotonic()
                process.send_signal(signal.SIGTERM)
                result = await call
                assert time.monotonic() - began < 3
        assert result.is_error
        assert result.structured_content["error"]["error_class"] == "dependency_unavailable"
        assert "the bridge is stopping" in result.content[0].text
        async with asyncio.timeout(15):
            assert await process.wait() == 0
        stderr = (await process.stderr.read()).decode()
        assert "Traceback" not in stderr and "graceful shutdown exceeded" not in stderr, stderr


async def test_the_collector_waits_while_the_upstreams_first_list_then_runs_once():
    import gc

    seen: list[bool] = []

    class Listing(FakeUpstream):
        async def list_tools(self):
            seen.append(gc.isenabled())
            return await super().list_tools()

    collections: list[int] = []

    def full(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            collections.append(1)

    bridge = Bridge(
        parse_config({"store": {"path": ":memory:"}}),
        extra_upstreams=[Listing(name="f"), Listing(name="g")],
    )
    gc.callbacks.append(full)
    try:
        await bridge.start()
    finally:
        gc.callbacks.remove(full)
    try:
        assert seen == [False, False] and gc.isenabled() and collections == [1]
    finally:
        await bridge.close()


async def test_a_servers_start_freezes_what_it_built_before_so_its_collection_walks_only_the_start():
    """The collection a start ends with walked the modules, app and config too (110 to 250 ms at
    600 tools, requests waiting); frozen first, it walks what the start made (13 to 15 ms)."""
    import gc

    frozen: list[int] = []

    class Listing(FakeUpstream):
        async def list_tools(self):
            frozen.append(gc.get_freeze_count())
            return await super().list_tools()

    bridge = Bridge(
        parse_config({"store": {"path": ":memory:"}}), extra_upstreams=[Listing(name="f")]
    )
    gc.unfreeze()
    try:
        await bridge.start(freeze_first=True)
        assert frozen and frozen[0] > 1000 and gc.isenabled()
    finally:
        gc.unfreeze()
        await bridge.close()


def test_a_started_server_settles_the_garbage_collector():
    import gc

    from bridge.runtime import GC_YOUNG_THRESHOLD, settle_gc

    threshold = gc.get_threshold()
    try:
        settle_gc(
            collected=True
        )  # after Bridge.start's full collection, the young generations alone
        # what was built so far is out of the collector's reach; young collections are rarer
        assert gc.get_freeze_count() > 1000
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, threshold[1], threshold[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_only_loopback_addresses_and_localhost_count_as_loopback():
    from bridge.net import is_loopback

    assert all(
        is_loopback(h)
        for h in ("127.0.0.1", "127.1.2.3", "localhost", "localhost.", "LOCALHOST", "::1", "[::1]")
    )
    # a name that starts like one resolves wherever its DNS says
    assert not any(
        is_loopback(h)
        for h in (
            "127.0.0.1.nip.io",
            "127.example",
            "localhost.example",
            "0.0.0.0",
            "::",
            "10.0.0.1",
            "",
        )
    )


def _socket_inodes(*pids: int) -> set[str]:
    """The inodes of the sockets the processes hold."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:"):
                        inodes.add(target)
    return inodes


async def test_sigterm_does_not_wait_for_open_mcp_sessions_streams_of_notices(tmp_path):
    # an MCP session's GET stream, open as long as the session, held the stop for its whole 5 s
    # grace, after which uvicorn cancelled it with a traceback
    async with serving(tmp_path) as (process, base):
        async with aiohttp.ClientSession(base_url=base) as http:
            headers = await _mcp_session(http)
            async with http.get(
                "/mcp", headers={**headers, "Accept": "text/event-stream"}
            ) as stream:
                assert stream.status == 200
                loop = asyncio.get_running_loop()
                began = loop.time()
                process.send_signal(signal.SIGTERM)
                async with asyncio.timeout(15):
                    assert await process.wait() == 0
                    rest = (await process.stderr.read()).decode()
                assert loop.time() - began < 3, rest
                assert "Traceback" not in rest and "ERROR" not in rest, rest
