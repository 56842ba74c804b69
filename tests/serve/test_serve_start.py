"""`bridge serve` listens before its upstreams have started: `/healthz` answers at once, `/readyz`
names the upstreams still starting, the catalog grows as each lists. The upstreams are the tiny
MCP server held on a named pipe (`--hold`), released by the test: no sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from tests.serve.mcp_support import HANDSHAKE, http_client
from tests.servers import child_pids, held_upstream, release, unblock

ROOT = Path(__file__).resolve().parents[2]


class Serving:
    def __init__(self, process: asyncio.subprocess.Process, banner: str) -> None:
        self.process = process
        self.banner = banner
        self.base = banner.rsplit(" on ", 1)[1].strip()
        self.lines: list[str] = [banner]

    async def line(self, start: str) -> str:
        """The next stderr line that starts with `start`."""
        return await self.line_with(start, at_start=True)

    async def line_with(self, text: str, at_start: bool = False) -> str:
        """The next stderr line that holds `text` (or starts with it)."""
        assert self.process.stderr is not None
        async with asyncio.timeout(20):
            while True:
                raw = await self.process.stderr.readline()
                assert raw, "bridge serve exited:\n" + "".join(self.lines)
                self.lines.append(raw.decode())
                if self.lines[-1].startswith(text) if at_start else text in self.lines[-1]:
                    return self.lines[-1]

    async def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            return await self.process.wait()


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, upstreams: list[dict]) -> AsyncIterator[Serving]:
    """`bridge serve` on `upstreams`, once it listens (its first line printed); killed at the end."""
    path = tmp_path / "bridge.json"
    path.write_text(json.dumps({"store": {"path": ":memory:"}, "upstreams": upstreams}))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge.cli",
        "serve",
        "-c",
        str(path),
        "--port",
        "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(30):
            banner = (await process.stderr.readline()).decode()
        assert banner.startswith("bridge: serving"), banner + (await process.stderr.read()).decode()
        yield Serving(process, banner)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        for fifo in tmp_path.glob("*.fifo"):
            unblock(fifo)


async def test_bridge_serve_listens_while_an_upstream_starts(tmp_path):
    fast, slow = tmp_path / "fast.fifo", tmp_path / "slow.fifo"
    async with serving(
        tmp_path, [held_upstream("fast", fast), held_upstream("slow", slow)]
    ) as served:
        assert served.banner.startswith(
            "bridge: serving 0 tools from 2 upstreams (2 still starting) on http://127.0.0.1:"
        )
        async with aiohttp.ClientSession(base_url=served.base) as http:

            async def get(route: str, **params: str) -> tuple[int, dict]:
                async with http.get(route, params=params) as response:
                    return response.status, await response.json()

            async def invoke(tool: str) -> tuple[int, dict]:
                async with http.post(
                    "/invoke", json={"tool": tool, "arguments": {"text": "hi"}}
                ) as response:
                    return response.status, await response.json()

            assert await get("/healthz") == (200, {"status": "ok"})
            status, ready = await get("/readyz")
            assert (
                status == 503 and ready["ready"] is False and ready["starting"] == ["fast", "slow"]
            )
            assert [(u["name"], u["state"]) for u in ready["upstreams"]] == [
                ("fast", "connecting"),
                ("slow", "connecting"),
            ]

            # an MCP session opened before any upstream has listed is told as each one does
            async with http_client(served.base, HANDSHAKE) as mcp:
                assert await mcp.names() == set()
                await release(fast)
                await mcp.notices.next(timeout=20)
                assert await mcp.names() == {"fast__echo"}

                status, ready = await get("/readyz")
                assert status == 503 and ready["starting"] == ["slow"] and ready["tools"] == 1
                assert [(u["name"], u["state"]) for u in ready["upstreams"]] == [
                    ("fast", "ready"),
                    ("slow", "connecting"),
                ]
                _, found = await get("/search", q="echo")
                assert [m["name"] for m in found["matches"]] == ["fast__echo"] and found[
                    "pending_providers"
                ] == ["slow"]
                status, result = await invoke("fast__echo")
                assert status == 200 and result["content"][0]["text"] == "hi"
                # a tool of an upstream that has not listed yet: unknown_tool, naming it, over REST and MCP alike
                said = (
                    "no tool named 'slow__echo'; search the catalog for the right name; upstream 'slow' is still starting, "
                    "and has not listed its tools yet"
                )
                status, result = await invoke("slow__echo")
                assert (
                    status == 404
                    and result["error"]["error_class"] == "unknown_tool"
                    and result["error"]["message"] == said
                )
                async with http.post(
                    "/tools/slow__echo:invoke", json={"input_parameters": []}
                ) as response:
                    assert response.status == 404 and (await response.json())["error"][
                        "message"
                    ].endswith(said.partition("right name")[2])
                called = await mcp.call("slow__echo", {"text": "hi"})
                assert called.is_error and said in called.content[0].text
                status, result = await invoke("other")
                assert status == 404 and result["error"]["message"].endswith(
                    "; still starting, their tools not listed yet: slow"
                )

                await release(slow)
                started = await served.line("bridge: upstreams started")
                assert started == "bridge: upstreams started: serving 2 tools from 2 upstreams\n"
                status, ready = await get("/readyz")
                assert status == 200 and ready["ready"] is True and ready["starting"] == []
                await mcp.notices.next(timeout=20)
                assert await mcp.names() == {"fast__echo", "slow__echo"}
            status, result = await invoke("slow__echo")
            assert status == 200 and result["content"][0]["text"] == "hi"
        assert await served.stop() == 0


async def test_a_signal_while_an_upstream_starts_stops_at_once_and_stops_the_upstream(tmp_path):
    # it waited for the upstream's start_timeout (a minute here) before it looked at the signal
    async with serving(tmp_path, [held_upstream("slow", tmp_path / "slow.fifo")]) as served:
        async with (
            aiohttp.ClientSession(base_url=served.base) as http,
            http.get("/readyz") as response,
        ):
            assert response.status == 503 and (await response.json())["starting"] == ["slow"]
        # the upstream's server runs (held, it reads nothing: not even its stdin closing)
        async with asyncio.timeout(30):
            while not (children := child_pids(served.process.pid)):
                await asyncio.sleep(0.05)
        assert await served.stop() == 0  # within 15 s; the upstream's start_timeout is 60
        stderr = "".join(served.lines) + (await served.process.stderr.read()).decode()
        assert "Traceback" not in stderr and "upstreams started" not in stderr, stderr
        assert not any(os.path.exists(f"/proc/{pid}") for pid in children)


async def test_a_reload_while_an_upstream_starts_applies_and_the_start_ends_without_the_removed_one(
    tmp_path,
):
    fast, slow = tmp_path / "fast.fifo", tmp_path / "slow.fifo"
    upstreams = [held_upstream("fast", fast), held_upstream("slow", slow)]
    async with serving(tmp_path, upstreams) as served:
        (tmp_path / "bridge.json").write_text(
            json.dumps({"store": {"path": ":memory:"}, "upstreams": upstreams[:1]})
        )
        served.process.send_signal(signal.SIGHUP)
        warning = await served.line_with("config reload while")
        assert "config reload while 2 upstream(s) still start (fast, slow): applied now" in warning
        assert (await served.line_with("config reloaded from")).rstrip().endswith(": removed: slow")
        async with aiohttp.ClientSession(base_url=served.base) as http:
            async with http.get("/readyz") as response:
                assert response.status == 503 and (await response.json())["starting"] == ["fast"]
            await release(fast)
            # the start no longer waits for the removed upstream (it waited its start_timeout, 60 s)
            assert (
                await served.line("bridge: upstreams started")
                == "bridge: upstreams started: serving 1 tools from 1 upstreams\n"
            )
            async with http.get("/readyz") as response:
                assert response.status == 200 and [
                    u["name"] for u in (await response.json())["upstreams"]
                ] == ["fast"]
        assert await served.stop() == 0
