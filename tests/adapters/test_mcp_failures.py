"""MCP upstreams when things go wrong: a server that exits or is killed, one that cannot come
back for a while, one that hangs, an HTTP server that goes away; reconnects, the reasons
reported, calls during the outage, and no process left behind."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.catalog import CatalogChange
from bridge.config import parse_config
from bridge.runtime import Bridge
from tests.adapters.mcp_fixtures.server import build_server
from tests.servers import free_port, serve_asgi

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(Path(__file__).parent / "mcp_fixtures" / "server.py")
FAST_RETRY = {"retry_initial": 0.05, "retry_max": 0.2, "shutdown_timeout": 0.2}


async def until(predicate: Callable[[], Any], timeout: float = 30.0, step: float = 0.02) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(step)


def make_bridge(*upstreams: dict[str, Any]) -> Bridge:
    config = parse_config({"store": {"path": ":memory:"}, "upstreams": list(upstreams)}, source="test", base_dir=str(ROOT))
    return Bridge(config)


def stdio(name: str, *args: str, **settings: Any) -> dict[str, Any]:
    return {"name": name, "kind": "mcp", "command": "python", "args": [FIXTURE, *args], **FAST_RETRY, **settings}


class Outages:
    """What the catalog announced about one upstream, captured when it happened."""

    def __init__(self, bridge: Bridge, upstream: str) -> None:
        self.seen: list[tuple[str, str | None, list[str]]] = []
        slot = bridge.catalog.slot(upstream)

        def record(change: CatalogChange) -> None:
            if change.upstream == upstream and change.state_changed:
                states = sorted({d.loading_state for d in slot.tools.values()})
                self.seen.append((slot.health.state, slot.health.reason, states))

        bridge.catalog.subscribe(record)

    def down(self) -> list[tuple[str, str | None, list[str]]]:
        return [s for s in self.seen if s[0] != "ready"]


def reaped(pid: int) -> bool:
    """Gone from the process table: exited and waited for (a zombie still has /proc/<pid>)."""
    return not os.path.exists(f"/proc/{pid}")


async def pid_of(bridge: Bridge, upstream: str) -> int:
    return (await bridge.catalog.slot(upstream).upstream.health())["pid"]


async def test_exited_and_killed_servers_are_reported_then_reconnected_without_zombies() -> None:
    bridge = make_bridge(stdio("srv", protocol="2026-07-28", env={"SERVICE_TOKEN": "hunter2-token"}))
    outages = Outages(bridge, "srv")
    pids: list[int] = []
    async with bridge:
        slot = bridge.catalog.slot("srv")
        pids.append(await pid_of(bridge, "srv"))

        # 1. the server exits on its own, saying why on stderr
        crashed = await bridge.invoker.invoke("srv__crash", {"code": 7, "message": "fatal: disk on fire (token hunter2-token)"})
        assert crashed.error.error_class == "dependency_unavailable"
        assert "exited with code 7" in crashed.error.message and "fatal: disk on fire" in crashed.error.message
        assert "hunter2-token" not in crashed.error.message and "(token ***)" in crashed.error.message
        await until(lambda: slot.health.state == "ready" and outages.down())
        state, reason, tool_states = outages.down()[0]
        assert state == "unavailable" and tool_states == ["unavailable"]  # its tools stay listed
        assert "exited with code 7" in reason and "stderr: fatal: disk on fire" in reason
        pids.append(await pid_of(bridge, "srv"))
        assert (await bridge.invoker.invoke("srv__echo", {"text": "back"})).content[0]["text"] == "back"

        # 2. the server is killed from outside
        os.kill(pids[-1], signal.SIGKILL)
        await until(lambda: len(outages.down()) >= 2 and slot.health.state == "ready")
        assert "killed by signal SIGKILL" in outages.down()[1][1]
        pids.append(await pid_of(bridge, "srv"))
        assert len(set(pids)) == 3
        assert bridge.catalog.resolve("srv__echo").loading_state == "loaded"
        assert (await bridge.invoker.invoke("srv__echo", {"text": "again"})).status == "succeeded"
        await until(lambda: all(reaped(pid) for pid in pids[:-1]))
    await until(lambda: all(reaped(pid) for pid in pids), timeout=5)


async def test_calls_during_an_outage_get_dependency_unavailable_with_retry_after(tmp_path: Path) -> None:
    marker = tmp_path / "down"
    bridge = make_bridge(stdio("srv", "--refuse-if", str(marker), protocol="legacy", retry_initial=0.3, retry_max=0.6))
    async with bridge:
        slot = bridge.catalog.slot("srv")
        marker.touch()  # restarts fail until it is removed
        await bridge.invoker.invoke("srv__crash", {"code": 1})
        await until(lambda: slot.health.reason is not None and "refusing to start" in slot.health.reason)
        assert slot.health.state == "unavailable"
        assert bridge.catalog.resolve("srv__echo").loading_state == "unavailable"

        result = await bridge.invoker.invoke("srv__echo", {"text": "x"})
        assert result.status == "failed" and result.error.error_class == "dependency_unavailable"
        assert result.error.recoverability == "retry_later"
        assert result.error.retry_after is not None and 0 < result.error.retry_after <= 0.6
        assert "exited with code 2" in result.error.message

        marker.unlink()
        await until(lambda: slot.health.state == "ready")
        assert (await bridge.invoker.invoke("srv__echo", {"text": "up"})).content[0]["text"] == "up"


async def test_hung_servers_time_out_without_blocking_other_upstreams() -> None:
    server, _ = build_server()
    async with serve_asgi(server.streamable_http_app()) as base:
        bridge = make_bridge(
            stdio("frozen", protocol="legacy", timeout=2),
            stdio("mute", "--freeze-on-start", start_timeout=0.5, retry_initial=30, retry_max=30),
            {"name": "fine", "kind": "mcp", "url": f"{base}/mcp"},
        )
        loop = asyncio.get_running_loop()
        async with bridge:
            # the mute server failed its own start; the others came up regardless
            states = {h.name: (h.state, h.reason) for h in bridge.catalog.health()}
            assert states["frozen"][0] == "ready" and states["fine"][0] == "ready"
            assert states["mute"][0] == "failed" and "start_timeout=0.5" in states["mute"][1]

            # `freeze` blocks the whole frozen server; the other upstream answers meanwhile
            hung = asyncio.create_task(bridge.invoker.invoke("frozen__freeze", {"seconds": 30}))
            begun = loop.time()
            for _ in range(5):
                assert (await bridge.invoker.invoke("fine__echo", {"text": "ok"})).status == "succeeded"
            assert not hung.done()  # the other upstream answered while this one hangs
            result = await hung
            assert result.status == "timed_out" and result.error.error_class == "timeout"
            assert 2 <= loop.time() - begun < 10


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_http_server_going_away_is_reported_and_reconnected(protocol: str) -> None:
    server, _ = build_server()
    port = free_port()
    upstream = {"name": "remote", "kind": "mcp", "url": f"http://127.0.0.1:{port}/mcp", "protocol": protocol,
                "ping_interval": 0.1, "ping_timeout": 1, **FAST_RETRY}
    bridge = make_bridge(upstream)
    outages = Outages(bridge, "remote")
    async with serve_asgi(server.streamable_http_app(), port=port):
        await bridge.start()
    try:
        slot = bridge.catalog.slot("remote")
        await until(lambda: slot.health.state != "ready")
        assert "HTTP connection to http://127.0.0.1" in slot.health.reason
        assert outages.down()[0][2] == ["unavailable"]
        result = await bridge.invoker.invoke("remote__echo", {"text": "x"})
        assert result.error.error_class == "dependency_unavailable" and result.error.retry_after

        async with serve_asgi(server.streamable_http_app(), port=port):  # back on the same port
            await until(lambda: slot.health.state == "ready")
            assert (await bridge.invoker.invoke("remote__echo", {"text": "back"})).content[0]["text"] == "back"
            assert bridge.catalog.resolve("remote__echo").loading_state == "loaded"
    finally:
        await bridge.close()


async def test_unstartable_command_fails_with_a_clear_reason() -> None:
    bridge = make_bridge({"name": "ghost", "kind": "mcp", "command": "no-such-mcp-server-binary", "retry_initial": 30})
    async with bridge:
        health = bridge.catalog.slot("ghost").health
        assert health.state == "failed"
        assert "cannot start `no-such-mcp-server-binary`" in health.reason
