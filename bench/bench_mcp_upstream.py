"""Cost of one proxied MCP call: the demo MCP server's `echo` called through the bridge's whole
pipeline (resolve, validate, permit, execute on the upstream's session, map, log) against the
same server called directly with the mcp SDK in the same run, over stdio and over streamable
HTTP, in both protocol eras. Prints a table.

A second table: how long a large listing holds the event loop, and with it every call the
bridge serves. A stdio server (bench/_catalog_mcp_server.py) lists 20,000 tools (the development
catalog's declarations, renamed) in one page; the adapter lists them while a task measures how
late the loop wakes it, with the page's checks and the tools' conversion on the event loop and
on a worker thread (adapters/mcp/upstream.py, OFF_LOOP_TOOLS)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp import Client, StdioServerParameters  # noqa: E402

import adapters.mcp.listing as mcp_listing  # noqa: E402
import adapters.mcp.upstream as mcp_adapter  # noqa: E402
from adapters.mcp.config import MCPConfig  # noqa: E402
from bridge.config import parse_config  # noqa: E402
from bridge.runtime import Bridge, settle_gc  # noqa: E402

SERVER = [sys.executable, "-m", "bridge.demo.mcp_server"]
ARGS = {"text": "hello from the benchmark"}
CATALOG = ROOT.parent / "shared" / "data" / "toolsearch" / "catalog.jsonl"
LISTING_SERVER = ROOT / "bench" / "_catalog_mcp_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def http_server() -> AsyncIterator[str]:
    """The demo server over streamable HTTP in its own process; ready when its port accepts."""
    port = _free_port()
    process = await asyncio.create_subprocess_exec(*SERVER, "--http", str(port), cwd=str(ROOT))
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    if process.returncode is not None:
                        raise RuntimeError("the demo MCP server did not start") from None
                    await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            async with asyncio.timeout(5):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


def summary(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "p50": statistics.median(samples),
        "p99": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "rate": 1000 / statistics.fmean(samples),  # sequential calls per second
    }


@contextlib.asynccontextmanager
async def direct_client(target: Any, mode: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    async with Client(target, mode=mode, cache=None) as client:
        await client.list_tools()

        async def call() -> None:
            result = await client.call_tool("echo", ARGS)
            assert not result.is_error

        yield call


@contextlib.asynccontextmanager
async def bridged_client(
    entry: dict[str, Any],
) -> AsyncIterator[tuple[str, Callable[[], Awaitable[None]]]]:
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [{"name": "demo", "kind": "mcp", **entry}],
            "search": {"semantic": "off"},
        },
        base_dir=str(ROOT),
    )
    async with Bridge(config) as bridge:
        slot = bridge.catalog.slot("demo")
        assert slot.health.state == "ready", slot.health.reason

        async def call() -> None:
            result = await bridge.invoker.invoke("demo__echo", ARGS)
            assert result.status == "succeeded", result.error

        yield slot.upstream.protocol_version or "?", call  # type: ignore[attr-defined]


async def compare(
    direct: Callable[[], Awaitable[None]],
    bridged: Callable[[], Awaitable[None]],
    calls: int,
    warmup: int,
) -> tuple[dict[str, float], dict[str, float]]:
    """Both paths in turns, so a busy machine slows both alike."""
    for _ in range(warmup):
        await direct()
        await bridged()
    samples: dict[str, list[float]] = {"direct": [], "bridged": []}
    for i in range(calls):
        order = (
            (("direct", direct), ("bridged", bridged))
            if i % 2
            else (("bridged", bridged), ("direct", direct))
        )
        for key, call in order:
            start = time.perf_counter()
            await call()
            samples[key].append((time.perf_counter() - start) * 1000)
    return summary(samples["direct"]), summary(samples["bridged"])


async def run(calls: int, warmup: int) -> list[list[str]]:
    rows: list[list[str]] = []

    def add(
        transport: str,
        version: str,
        path: str,
        stats: dict[str, float],
        base: dict[str, float] | None,
    ) -> None:
        extra = f"{stats['p50'] - base['p50']:+.3f}" if base else ""
        rows.append(
            [
                transport,
                version,
                path,
                f"{stats['p50']:.3f}",
                f"{stats['p99']:.3f}",
                f"{stats['rate']:.0f}",
                extra,
            ]
        )

    for mode in ("legacy", "2026-07-28"):
        stdio = StdioServerParameters(command=SERVER[0], args=SERVER[1:], cwd=str(ROOT))
        entry = {"command": "python", "args": SERVER[1:], "cwd": str(ROOT), "protocol": mode}
        async with (
            direct_client(stdio, mode) as sdk_call,
            bridged_client(entry) as (version, bridge_call),
        ):
            sdk, via = await compare(sdk_call, bridge_call, calls, warmup)
        add("stdio", version, "SDK direct", sdk, None)
        add("stdio", version, "via bridge", via, sdk)
        async with http_server() as url:
            async with (
                direct_client(url, mode) as sdk_call,
                bridged_client({"url": url, "protocol": mode}) as (version, bridge_call),
            ):
                sdk, via = await compare(sdk_call, bridge_call, calls, warmup)
        add("http", version, "SDK direct", sdk, None)
        add("http", version, "via bridge", via, sdk)
    return rows


async def loop_held(upstream: mcp_adapter.MCPUpstream) -> tuple[int, float, float, float]:
    """(tools listed, seconds taken, longest hold of the event loop in ms, seconds in holds of
    over 50 ms) of one listing, measured by a task asking to wake every millisecond."""
    lags: list[float] = []
    listing = True

    async def tick() -> None:
        while listing:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - started)

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    tools = await upstream.list_tools()
    taken = time.perf_counter() - started
    listing = False
    await ticker
    return len(tools), taken, 1000 * max(lags), sum(lag for lag in lags if lag > 0.05)


async def listing_holds(count: int, repeat: int) -> tuple[list[list[str]], float]:
    """The table's rows, and the size of the listed tools' declarations in MB."""
    rows = []
    declarations = [
        json.loads(line)
        for line in CATALOG.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    with tempfile.TemporaryDirectory(prefix="bench-mcp-listing-") as work:
        shard = Path(work) / "tools.jsonl"
        with shard.open("w", encoding="utf-8") as fh:
            for i in range(count):
                declaration = declarations[i % len(declarations)]
                fh.write(json.dumps({**declaration, "name": f"{declaration['name']}_{i}"}) + "\n")
        size_mb = shard.stat().st_size / 1e6
        config = MCPConfig(
            name="big",
            kind="mcp",
            command="python",
            args=[str(LISTING_SERVER), str(shard)],
            protocol="legacy",
            ping_interval=None,
        )
        default = mcp_listing.OFF_LOOP_TOOLS
        async with mcp_adapter.MCPUpstream(config) as upstream:
            settle_gc()  # as the bridge has it once started
            for where, threshold in (("event loop", 10**9), ("worker thread", default)):
                mcp_listing.OFF_LOOP_TOOLS = threshold
                try:
                    for _ in range(repeat):
                        listed, taken, longest, held = await loop_held(upstream)
                        rows.append(
                            [where, f"{listed:,}", f"{taken:.2f}", f"{longest:.0f}", f"{held:.2f}"]
                        )
                finally:
                    mcp_listing.OFF_LOOP_TOOLS = default
    return rows, size_mb


def table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--listed", type=int, default=20_000, help="tools of the large listing")
    parser.add_argument("--listings", type=int, default=3, help="listings measured each way")
    opts = parser.parse_args()
    rows = asyncio.run(run(opts.calls, opts.warmup))
    print(
        f"MCP upstream call cost: demo server `echo`, {opts.calls} sequential calls per path, paths in turns (after {opts.warmup} warm-up)"
    )
    table(["transport", "protocol", "path", "p50 ms", "p99 ms", "calls/s", "p50 overhead ms"], rows)
    if not CATALOG.exists():
        print(f"listing table left out: {CATALOG} not found")
        return
    rows, size_mb = asyncio.run(listing_holds(opts.listed, opts.listings))
    print(
        f"A listing of {opts.listed:,} tools in one tools/list page over stdio: how long it holds the event loop "
        "(and every call the bridge serves)"
    )
    table(
        [
            "page checks and conversion on",
            "tools",
            "listed in s",
            "loop held at most ms",
            "s in holds over 50 ms",
        ],
        rows,
    )
    print(
        f"what remains held is mostly parsing the page's message (about {size_mb:.0f} MB), which holds the interpreter wherever it runs"
    )


if __name__ == "__main__":
    main()
