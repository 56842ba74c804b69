"""The MCP conformance suite's server scenarios (`@modelcontextprotocol/conformance`, pinned in
runner/package.json) run against a bridge that fronts the suite's reference server
(server/everything-server.ts of the conformance repository at the runner's tag, with the
versions its lock file pins) with `prefix: never`: every scenario must pass through the bridge
as it passes against the server itself.

`make setup` installs both with npm (Node 22 comes from the `node` npm package in runner/, as
the runner needs it); without them the test is skipped, and fails under CI."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app
from tests.servers import free_port, serve_asgi

HERE = Path(__file__).resolve().parent
RUNNER, SERVER = HERE / "runner", HERE / "server"
NODE = RUNNER / "node_modules" / "node" / "bin" / "node"
CONFORMANCE = (
    RUNNER / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
)
TSX = SERVER / "node_modules" / "tsx" / "dist" / "cli.mjs"
SUMMARY = re.compile(r"^Total: (\d+) passed, (\d+) failed", re.M)


def _missing() -> str | None:
    if shutil.which("npm") is None:
        return "npm is not installed"
    for path in (NODE, CONFORMANCE, TSX):
        if not path.exists():
            return f"{path.relative_to(HERE)} is not installed (make setup runs npm ci in tests/conformance)"
    return None


async def _listening(port: int, process: asyncio.subprocess.Process, within: float = 60.0) -> None:
    """Wait until something accepts connections on `port` (the server printing is not enough:
    it prints before it listens on some Node versions)."""
    async with asyncio.timeout(within):
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"the reference server exited ({process.returncode})")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def reference_server() -> AsyncIterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    process = await asyncio.create_subprocess_exec(
        str(NODE),
        str(TSX),
        "everything-server.ts",
        cwd=SERVER,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await _listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def test_every_server_scenario_passes_through_the_bridge(tmp_path: Path) -> None:
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the conformance suite cannot run under CI: {missing}")
        pytest.skip(missing)
    async with reference_server() as upstream_url:
        config = {
            "store": {"path": ":memory:"},
            "upstreams": [
                {"name": "everything", "kind": "mcp", "url": upstream_url, "prefix": "never"}
            ],
        }
        bridge = Bridge(parse_config(config))
        await bridge.start()
        app = build_app(bridge)
        try:
            health = bridge.catalog.slot("everything").health
            assert health.state == "ready", health.reason
            async with serve_asgi(app, server=bridge.config.server) as url:
                runner = await asyncio.create_subprocess_exec(
                    str(NODE),
                    str(CONFORMANCE),
                    "server",
                    "--url",
                    f"{url}/mcp",
                    "-o",
                    str(tmp_path),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                output, _ = await asyncio.wait_for(runner.communicate(), 240)
        finally:
            await close_app(app)
            await bridge.close()
    text = output.decode(errors="replace")
    summary = SUMMARY.search(text)
    failed = [line for line in text.splitlines() if line.startswith("✗")]
    assert summary is not None, text[-3000:]
    assert (int(summary.group(2)), failed) == (0, []), text[-3000:]
    assert int(summary.group(1)) >= 40, summary.group(0)
    assert runner.returncode == 0, text[-3000:]


def test_the_reference_server_is_the_runners_own() -> None:
    """The fixture is the conformance repository's file at the runner's tag, with its licence."""
    pinned = (RUNNER / "package.json").read_text(encoding="utf-8")
    assert '"@modelcontextprotocol/conformance": "0.1.16"' in pinned
    assert (SERVER / "LICENSE").is_file() and (SERVER / "package-lock.json").is_file()
