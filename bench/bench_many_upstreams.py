"""A bridge federating hundreds of upstreams: `bridge serve` on a config of stdio MCP servers
(bench/_tiny_mcp_server.py, 10 tools each) and OpenAPI documents (20 operations each, served by
an aiohttp app in this process), a tenth of each broken (a command not found, a document that
answers 404). Measured twice on one store (a first start, then a restart that reopens the store
and the search index): the seconds until it listens and until every upstream has settled, the
peak memory, descriptors and processes, the CPU and warnings a minute of an idle sample taken
once settled (the broken upstreams still backing off), the latency of /healthz, /readyz, /tools,
/search and MCP tools/list, and the seconds SIGTERM takes, with the processes it leaves.

Run: .venv/bin/python bench/bench_many_upstreams.py [--mcp 200] [--openapi 100] [--idle 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from _procs import table
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "bench" / "_tiny_mcp_server.py"
NOUNS = [
    "user",
    "invoice",
    "repo",
    "issue",
    "ticket",
    "order",
    "payment",
    "file",
    "report",
    "device",
]
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vendor_document(vendor: int, base: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for noun in NOUNS:
        paths[f"/v{vendor}/{noun}s"] = {
            "get": {
                "operationId": f"list_{noun}s",
                "summary": f"List the {noun}s of vendor {vendor}",
                "responses": {"200": {"description": "ok"}},
            }
        }
        paths[f"/v{vendor}/{noun}s/{{id}}"] = {
            "get": {
                "operationId": f"get_{noun}",
                "summary": f"Get one {noun} of vendor {vendor}",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {"200": {"description": "ok"}},
            }
        }
    return {
        "openapi": "3.0.3",
        "info": {"title": f"vendor {vendor}", "version": "1"},
        "servers": [{"url": base}],
        "paths": paths,
    }


async def vendor_apis(port: int) -> web.AppRunner:
    base = f"http://127.0.0.1:{port}"

    async def document(request: web.Request) -> web.Response:
        return web.json_response(vendor_document(int(request.match_info["vendor"]), base))

    async def operation(request: web.Request) -> web.Response:
        return web.json_response({"path": request.path})

    app = web.Application()
    app.router.add_get("/specs/{vendor}.json", document)
    app.router.add_get("/v{vendor}/{tail:.*}", operation)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def bench_config(work: Path, mcp: int, openapi: int, api_port: int, port: int) -> Path:
    upstreams: list[dict[str, Any]] = []
    for i in range(mcp):
        broken = i < mcp // 10
        upstreams.append(
            {
                "name": f"mcp{i}",
                "kind": "mcp",
                "command": str(work / "missing") if broken else "python",
                "args": [] if broken else [str(TINY), str(i)],
            }
        )
    for i in range(openapi):
        where = "missing" if i < openapi // 10 else "specs"
        upstreams.append(
            {
                "name": f"api{i}",
                "kind": "openapi",
                "spec": f"http://127.0.0.1:{api_port}/{where}/{i}.json",
            }
        )
    path = work / "bridge.json"
    path.write_text(
        json.dumps(
            {
                "server": {"port": port},
                "store": {"path": str(work / "bridge.db")},
                "upstreams": upstreams,
            }
        )
    )
    return path


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    children.setdefault(int(stat.read().rsplit(")", 1)[1].split()[1]), []).append(
                        int(entry)
                    )
            except OSError:
                pass
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found[1:]


def proc_status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key + ":"))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def latency(http: aiohttp.ClientSession, send: Any, repeat: int = 10) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeat):
        begun = time.perf_counter()
        size = len(await send(http))
        times.append((time.perf_counter() - begun) * 1000)
    return statistics.median(times), size


async def one_run(
    label: str, config: Path, port: int, idle: float, requests: dict[str, list[str]]
) -> list[str]:
    log = config.with_name(f"{label}.log")
    begun = time.perf_counter()
    with open(log, "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bridge.cli",
            "serve",
            "-c",
            str(config),
            cwd=str(ROOT),
            stdout=out,
            stderr=out,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    base = f"http://127.0.0.1:{port}"
    listening = settled = None
    peak_fds = peak_procs = 0
    states: dict[str, int] = {}
    tools = 0
    try:
        async with aiohttp.ClientSession(base) as http:
            async with asyncio.timeout(120):
                while settled is None:
                    peak_fds = max(peak_fds, len(os.listdir(f"/proc/{proc.pid}/fd")))
                    peak_procs = max(peak_procs, len(descendants(proc.pid)))
                    try:
                        async with http.get("/readyz") as response:
                            ready = await response.json()
                            upstreams, tools = ready["upstreams"], ready["tools"]
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.1)
                        continue
                    listening = listening or time.perf_counter() - begun
                    states = {}
                    for upstream in upstreams:
                        states[upstream["state"]] = states.get(upstream["state"], 0) + 1
                    if "connecting" not in states:
                        settled = time.perf_counter() - begun
                    else:
                        await asyncio.sleep(0.1)
            warnings = log.read_text().count(" WARNING ")
            cpu = cpu_seconds(proc.pid)
            await asyncio.sleep(idle)
            idle_cpu = (cpu_seconds(proc.pid) - cpu) / idle * 100
            idle_warnings = (log.read_text().count(" WARNING ") - warnings) * 60 / idle

            async def get(path: str) -> Any:
                async def send(http: aiohttp.ClientSession) -> bytes:
                    async with http.get(path) as response:
                        return await response.read()

                return send

            async with http.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS) as response:
                session = {
                    **MCP_HEADERS,
                    "Mcp-Session-Id": response.headers.get("Mcp-Session-Id", ""),
                    "MCP-Protocol-Version": "2025-11-25",
                }

            async def tools_list(http: aiohttp.ClientSession) -> bytes:
                async with http.post(
                    "/mcp",
                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                    headers=session,
                ) as response:
                    return await response.read()

            for path in ["/healthz", "/readyz", "/tools", "/search?q=list+invoices+of+a+vendor"]:
                ms, size = await latency(http, await get(path))
                requests.setdefault(path, []).append(f"{ms:.1f} ms ({size:,} B)")
            ms, size = await latency(http, tools_list)
            requests.setdefault("MCP tools/list", []).append(f"{ms:.1f} ms ({size:,} B)")
        hwm = proc_status(proc.pid, "VmHWM") / 1024
        fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        children = descendants(proc.pid)
        stopping = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            await proc.wait()
        stopped = time.perf_counter() - stopping
        left = [pid for pid in children if os.path.exists(f"/proc/{pid}")]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    ready = f"{states.get('ready', 0)}/{sum(states.values())}"
    return [
        label,
        ready,
        f"{tools:,}",
        f"{listening:.1f}",
        f"{settled:.1f}",
        f"{hwm:.0f}",
        f"{fds} (peak {peak_fds})",
        str(peak_procs),
        f"{idle_cpu:.1f}",
        f"{idle_warnings:.0f}",
        f"{stopped:.1f}",
        str(len(left)),
    ]


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mcp", type=int, default=200, help="stdio MCP servers (a tenth of them broken)"
    )
    parser.add_argument(
        "--openapi", type=int, default=100, help="OpenAPI documents (a tenth of them answering 404)"
    )
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of the idle sample")
    args = parser.parse_args()
    print(
        f"Many upstreams ({os.cpu_count()} CPUs, Python {sys.version.split()[0]}, ulimit -n {resource.getrlimit(resource.RLIMIT_NOFILE)[0]})\n"
    )
    if not sys.platform.startswith("linux"):
        print("skipped: reads /proc")
        return 0
    api_port, port = free_port(), free_port()
    runner = await vendor_apis(api_port)
    requests: dict[str, list[str]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = bench_config(Path(tmp), args.mcp, args.openapi, api_port, port)
            rows = [
                await one_run(label, config, port, args.idle, requests)
                for label in ("first start", "restart, same store")
            ]
    finally:
        await runner.cleanup()
    print(
        f"bridge serve: {args.mcp} stdio MCP servers and {args.openapi} OpenAPI documents, a tenth of each broken"
    )
    print(
        table(
            rows,
            [
                "RUN",
                "READY",
                "TOOLS",
                "LISTEN S",
                "SETTLED S",
                "PEAK RSS MB",
                "FDS",
                "PROCS",
                "IDLE CPU %",
                "WARNINGS/MIN IDLE",
                "SIGTERM S",
                "LEFT",
            ],
        )
    )
    print()
    print("request latency, median of 10 (first start, restart)")
    print(
        table(
            [[path, *times] for path, times in requests.items()],
            ["REQUEST", "FIRST START", "RESTART"],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
