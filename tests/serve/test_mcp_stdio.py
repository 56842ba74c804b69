"""`bridge serve --stdio` as a real subprocess, driven by the mcp SDK's stdio client in both
protocol eras. Its upstreams are real MCP servers that the bridge runs as its own children over
stdio: tests/serve/fixtures/mcp_tools_server.py where the tools' features count, the tiny server
(tests/adapters/mcp_fixtures/tiny_server.py) where only the process and a listing do."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client

from bridge.config import load_config
from bridge.serve.mcp_stdio import run_stdio
from tests.serve.mcp_support import ERAS, HANDSHAKE, EraClient, connect, error_class, text_of
from tests.servers import (
    TINY_MCP_SERVER,
    child_pids,
    free_port,
    held_upstream,
    process_running,
    release,
    unblock,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "mcp_tools_server.py"


def bridge_config(tmp_path: Path) -> Path:
    config = {
        "store": {"path": str(tmp_path / "bridge.db")},
        "upstreams": [
            {
                "name": "fx",
                "kind": "mcp",
                "command": sys.executable,
                "args": [str(FIXTURE), str(tmp_path)],
            }
        ],
        "surfaces": [
            {"name": "default", "read_only": True},
            {
                "name": "agents",
                "load": ["fx__echo", "fx__slow", "fx__grow", "fx__extra"],
                "defer": ["*"],
                "block": [{"destructive": True}],
            },
        ],
    }
    path = tmp_path / "bridge.json"
    path.write_text(json.dumps(config))
    return path


def bridge_command(tmp_path: Path) -> StdioServerParameters:
    """The bridge serving surface `agents` over stdio (the default surface would list other tools)."""
    args = [
        "-m",
        "bridge.cli",
        "serve",
        "--stdio",
        "-c",
        str(bridge_config(tmp_path)),
        "--surface",
        "agents",
    ]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))


async def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not path.exists():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("era", ERAS)
async def test_stdio_bridge_serves_the_surface(era, tmp_path):
    async with asyncio.timeout(45):
        async with connect(stdio_client(bridge_command(tmp_path)), era) as client:
            await exercise(client, tmp_path)


async def exercise(client: EraClient, tmp_path: Path) -> None:
    # list: loaded tools and the meta tools; the deferred one is not listed, the blocked one nowhere
    tools = {t.name: t for t in await client.tools()}
    assert set(tools) == {"search_tools", "call_tool", "fx__echo", "fx__slow", "fx__grow"}
    assert tools["fx__echo"].annotations.read_only_hint is True
    assert tools["fx__echo"].output_schema["required"] == ["text"]
    # the upstream's icons reach the client as it listed them
    (icon,) = tools["fx__echo"].icons or []
    assert (icon.src, icon.mime_type, icon.sizes, icon.theme) == (
        "data:image/png;base64,iVBORw0KGgo=",
        "image/png",
        ["16x16"],
        "light",
    )
    assert tools["fx__slow"].icons is None
    echo = await client.call("fx__echo", {"text": "hi"})
    assert not echo.is_error and echo.structured_content == {"text": "hi"}
    # the upstream result's _meta comes along, beside the bridge's own
    assert (
        echo.meta["example.invalid/trace"] == "t-1"
        and echo.meta["a2t-bridge/result"]["status"] == "succeeded"
    )

    # a deferred tool called by its own name before it was loaded: refused, not run
    early = await client.call("fx__weather", {"city": "Oslo"})
    assert error_class(early) == "schema_not_loaded"
    assert "search_tools" in text_of(early)

    # search finds it with its full schema; a blocked tool is not found and cannot be called
    found = await client.search("weather forecast city")
    match = next(m for m in found["matches"] if m["name"] == "fx__weather")
    assert match["input_schema"]["required"] == ["city"]
    assert "fx__wipe" not in [
        m["name"] for m in (await client.search("delete every record"))["matches"]
    ]
    # the surface's rule hides it: called, it reads as a tool that does not exist
    assert error_class(await client.call("fx__wipe", {})) == "unknown_tool"
    assert error_class(await client.call("call_tool", {"name": "fx__wipe"})) == "unknown_tool"

    if client.era == HANDSHAKE:
        # the search loaded it into this session's list and said so
        assert client.notices is not None
        await client.notices.next()
        assert "fx__weather" in {t.name for t in await client.tools()}
        loaded = await client.call("fx__weather", {"city": "Oslo"})
        assert text_of(loaded) == "sunny in Oslo"
    through = await client.call(
        "call_tool", {"name": "fx__weather", "arguments": {"city": "Bergen"}}
    )
    assert text_of(through) == "sunny in Bergen"
    invalid = await client.call(
        "call_tool", {"name": "fx__weather", "arguments": {"town": "Bergen"}}
    )
    assert error_class(invalid) == "invalid_arguments"

    # progress comes through; canceling the call cancels it upstream
    started = asyncio.Event()
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))
        started.set()

    call = asyncio.create_task(client.call("fx__slow", {"id": client.era}, progress=on_progress))
    async with asyncio.timeout(10):
        await started.wait()
    assert progress[0][2] == "started" and progress[0][1] is not None
    call.cancel()
    await wait_for_file(tmp_path / f"canceled-{client.era}")

    # a catalog change upstream reaches the client as a list-changed notice
    if client.era == HANDSHAKE:
        assert client.notices is not None
        await client.call("fx__grow", {})
        await client.notices.next(timeout=10)
    else:
        async with client.client.listen(tools_list_changed=True) as events:  # type: ignore[attr-defined]
            await client.call("fx__grow", {})
            async with asyncio.timeout(10):
                async for _ in events:
                    break
    assert "fx__extra" in {t.name for t in await client.tools()}


async def test_stdio_refuses_an_unknown_surface_before_serving(tmp_path, capsys):
    config = load_config(bridge_config(tmp_path))
    assert await run_stdio(config, surface="nope") == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout carries protocol only
    assert "no surface named 'nope' (the config defines: " in captured.err


@contextlib.asynccontextmanager
async def stdio_bridge(
    config: dict, tmp_path: Path, *args: str, started: bool = True
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`bridge serve --stdio` on `config`, initialized, once its upstreams have started (its
    first `tools/list`, which waits for them, answered; with `started=False`, at once); killed
    if still running at the end."""
    (tmp_path / "bridge.json").write_text(json.dumps(config))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge.cli",
        "serve",
        "--stdio",
        "-c",
        str(tmp_path / "bridge.json"),
        *args,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        process.stdin.write(json.dumps(initialize).encode() + b"\n")
        await process.stdin.drain()
        async with asyncio.timeout(30):
            assert json.loads(await process.stdout.readline())["id"] == 1
            if started:
                for message in (
                    {"method": "notifications/initialized"},
                    {"id": "started", "method": "tools/list"},
                ):
                    process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
                await process.stdin.drain()
                assert (
                    json.loads(await process.stdout.readline())["id"] == "started"
                )  # its upstreams have listed
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
async def test_a_signal_stops_the_stdio_bridge_and_what_it_launched(sig, tmp_path):
    # SIGTERM once killed it at once, its launched processes left running on their ports; SIGINT
    # stopped them but the process hung until stdin closed
    port = free_port()
    config = {
        "store": {"path": str(tmp_path / "bridge.db")},
        "upstreams": [
            {
                "name": "a2t_demo",
                "kind": "a2t",
                "url": f"http://127.0.0.1:{port}",
                "start_timeout": 15,
                "launch": {
                    "command": "python",
                    "args": ["-m", "bridge.demo.a2t_server", "--port", str(port)],
                    "cwd": str(ROOT),
                },
            }
        ],
    }
    async with stdio_bridge(config, tmp_path) as process:
        os.kill(process.pid, getattr(signal, sig))
        async with asyncio.timeout(15):
            assert await process.wait() == 0, (await process.stderr.read()).decode()[-2000:]
        stderr = (await process.stderr.read()).decode()
        assert "Traceback" not in stderr, stderr
        with pytest.raises(OSError):  # the launched a2t server was stopped with it
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()


async def test_sigterm_while_closing_after_stdin_closed_lets_the_close_finish(tmp_path):
    # what the mcp SDK's stdio client does on leaving: close stdin, then SIGTERM 2 s later. An
    # upstream still busy (it ignores its own stdin closing) held the close up past that, and the
    # SIGTERM cancelled the close: a traceback, exit status 1, the upstream left running
    tiny = ROOT / "tests" / "adapters" / "mcp_fixtures" / "tiny_server.py"
    config = {
        "store": {"path": str(tmp_path / "bridge.db")},
        "upstreams": [
            {
                "name": "busy",
                "kind": "mcp",
                "command": sys.executable,
                "args": [str(tiny), "--linger", "30"],
                "shutdown_timeout": 1,
            }
        ],
    }
    async with stdio_bridge(config, tmp_path) as process:
        upstreams = child_pids(process.pid)
        assert upstreams
        process.stdin.close()
        await asyncio.sleep(0.3)  # closing: the upstream gets shutdown_timeout=1 s to leave
        os.kill(process.pid, signal.SIGTERM)
        async with asyncio.timeout(15):
            status = await process.wait()
        stderr = (await process.stderr.read()).decode()
        assert status == 0, stderr[-2000:]
        assert "Traceback" not in stderr, stderr
        assert not any(
            process_running(pid) for pid in upstreams
        )  # stopped by the close, not left lingering


def tiny_config(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    """A config of one upstream `fx`, the tiny MCP server (its tool `echo`)."""
    return {
        "store": {"path": str(tmp_path / "bridge.db")},
        "upstreams": [
            {"name": "fx", "kind": "mcp", "command": sys.executable, "args": [str(TINY_MCP_SERVER)]}
        ],
        **settings,
    }


async def test_sighup_applies_the_config_again_and_the_session_is_told_unless_it_removes_its_surface(
    tmp_path,
):
    # a reload removing the session's surface applied, and every request of the session answered
    # -32600 "no surface named 'agents' is configured", without a notice nor a line in the log
    # saying why; it is refused, and a reload that keeps the surface applies
    path, config = tmp_path / "bridge.json", tiny_config(tmp_path, surfaces=[{"name": "agents"}])
    async with stdio_bridge(config, tmp_path, "--surface", "agents") as process:
        assert (
            process.stdin is not None and process.stdout is not None and process.stderr is not None
        )

        async def send(message: dict) -> None:
            process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            await process.stdin.drain()

        async def listed(request_id: int) -> set[str]:
            await send({"id": request_id, "method": "tools/list"})
            answer = json.loads(await process.stdout.readline())
            assert answer["id"] == request_id, answer
            return {t["name"] for t in answer["result"]["tools"]}

        async with asyncio.timeout(45):
            assert "fx__echo" in await listed(2)
            gx = {**config["upstreams"][0], "name": "gx"}

            # the surface removed: nothing of the reload applies
            refused = {**config, "surfaces": [], "upstreams": [*config["upstreams"], gx]}
            path.write_text(json.dumps(refused))
            os.kill(process.pid, signal.SIGHUP)
            while "config reload" not in (line := (await process.stderr.readline()).decode()):
                pass
            assert "ERROR bridge.runtime: config reload: " in line, line
            assert (
                "surfaces: no surface named 'agents', which this stdio session serves (--surface agents) "
                "(fix: define surface 'agents' again, or restart the bridge with another surface); nothing changed"
            ) in line, line
            assert not any(
                n.startswith("gx__") for n in await listed(3)
            )  # nothing else of the config applied
            assert "fx__echo" in await listed(4)

            # the surface kept: the reload applies, and the session is told
            config["upstreams"].append(gx)
            path.write_text(json.dumps(config))
            os.kill(process.pid, signal.SIGHUP)
            while (
                json.loads(await process.stdout.readline()).get("method")
                != "notifications/tools/list_changed"
            ):
                pass
            names: set[str] = set()
            request_id = 5
            while "gx__echo" not in names:
                # told once the surface changed; its tools follow as gx lists them
                await send({"id": request_id, "method": "tools/list"})
                while (answer := json.loads(await process.stdout.readline())).get(
                    "id"
                ) != request_id:
                    pass
                names = {t["name"] for t in answer["result"]["tools"]}
                request_id += 1
            assert "fx__echo" in names
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            assert await process.wait() == 0


async def test_the_stdio_bridge_answers_initialize_at_once_and_its_first_listing_waits_for_the_start(
    tmp_path,
):
    # a client's connect timeout (10 to 30 s) was shorter than a slow upstream's start_timeout,
    # and initialize waited for every upstream's first attempt
    fifo = tmp_path / "slow.fifo"
    config = {
        "store": {"path": ":memory:"},
        "upstreams": [
            {
                "name": "fast",
                "kind": "mcp",
                "command": sys.executable,
                "args": [str(TINY_MCP_SERVER)],
            },
            held_upstream("slow", fifo),
        ],
    }
    try:
        async with stdio_bridge(
            config, tmp_path, started=False
        ) as process:  # initialized while slow is held
            assert process.stdin is not None and process.stdout is not None

            async def send(message: dict) -> None:
                process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
                await process.stdin.drain()

            async with asyncio.timeout(30):
                await send({"method": "notifications/initialized"})
                await send({"id": 2, "method": "tools/list"})
                await send({"id": 3, "method": "ping"})
                assert json.loads(await process.stdout.readline()) == {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "result": {},
                }  # the listing waits
                await release(fifo)
                listing = json.loads(await process.stdout.readline())
                assert listing["id"] == 2 and {t["name"] for t in listing["result"]["tools"]} == {
                    "fast__echo",
                    "slow__echo",
                }
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):
                assert await process.wait() == 0
    finally:
        unblock(fifo)


async def test_sigterm_while_an_upstream_starts_stops_the_stdio_bridge_at_once(tmp_path):
    fifo = tmp_path / "slow.fifo"
    config = {"store": {"path": ":memory:"}, "upstreams": [held_upstream("slow", fifo)]}
    try:
        async with stdio_bridge(
            config, tmp_path, started=False
        ) as process:  # initialized while slow is held
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):  # the upstream's start_timeout is 60 s
                assert await process.wait() == 0
            assert (
                process.stderr is not None
                and "Traceback" not in (await process.stderr.read()).decode()
            )
    finally:
        unblock(fifo)
