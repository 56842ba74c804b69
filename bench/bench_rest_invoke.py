"""Throughput and latency of `POST /tools/{id}:invoke` (IETF A2T draft) through the bridge,
served by `bridge serve` on loopback, to a local a2t-dialect upstream (bridge/demo/a2t_server.py on
aiohttp), compared in the same run with calling that upstream directly and through a bare
proxy (bench/_bare_proxy.py: uvicorn and one aiohttp call, the floor of the bridge's HTTP
stack), at 1, 16 and 64 concurrent clients. Each server and the client run as their own
processes. Prints a table: p50/p99 latency in ms, requests per second, each proxy's overhead
and share of the direct throughput, and the CPU time each process spends per request."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = {1: 2000, 16: 6000, 64: 8000}
WARMUP = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start(argv: list[str], ready: bytes, stream: str) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE if stream == "stdout" else asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE if stream == "stderr" else asyncio.subprocess.DEVNULL,
    )
    pipe = process.stdout if stream == "stdout" else process.stderr
    assert pipe is not None
    async with asyncio.timeout(60):
        while True:
            line = await pipe.readline()
            if not line:
                raise RuntimeError(f"{argv[2:4]} exited before it was ready")
            if line.startswith(ready):
                break
    drain = asyncio.create_task(_drain(pipe))
    _DRAINS.add(drain)  # held until done: the loop keeps only a weak reference to a task
    drain.add_done_callback(_DRAINS.discard)
    return process


_DRAINS: set[asyncio.Task[None]] = set()


async def _drain(pipe: asyncio.StreamReader) -> None:
    while await pipe.readline():
        pass


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            async with asyncio.timeout(10):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


Call = Callable[[aiohttp.ClientSession], Awaitable[None]]


async def measure(call: Call, concurrency: int, total: int) -> tuple[list[float], float, float]:
    """Per-request latencies (seconds), the wall time of `total` requests from `concurrency`
    clients on one pooled session, and the CPU time this (client) process spent per request."""
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=30)
    ) as session:
        for _ in range(min(WARMUP, total)):
            await call(session)
        latencies: list[float] = []
        remaining = total

        async def client() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                await call(session)
                latencies.append(time.perf_counter() - started)

        began, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return latencies, time.perf_counter() - began, (time.process_time() - cpu) / total


def cpu_seconds(process: asyncio.subprocess.Process) -> float | None:
    """CPU time (user + system) a process has used so far; None where /proc is missing. Unlike
    wall-clock numbers it does not depend on what else the machine is running."""
    try:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_request(before: float | None, after: float | None, count: int) -> str:
    return (
        f"{(after - before) / count * 1e6:.0f}"
        if before is not None and after is not None
        else "n/a"
    )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def main(scale: float) -> int:
    upstream_port, bridge_port, floor_port = free_port(), free_port(), free_port()
    upstream = await start(
        [sys.executable, "-m", "bridge.demo.a2t_server", "--port", str(upstream_port)],
        b"a2t demo server listening",
        "stdout",
    )
    bridge = floor = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = {
                "store": {"path": str(Path(tmp) / "bench.db")},
                "upstreams": [
                    {
                        "name": "demo",
                        "kind": "a2t",
                        "url": f"http://127.0.0.1:{upstream_port}",
                        "max_concurrency": 256,
                    }
                ],
                "surfaces": [{"name": "default", "load": ["*"]}],
                # this measures invocation: the semantic search stage would embed the catalog in the
                # background while the first rows run
                "search": {"semantic": False},
            }
            (Path(tmp) / "bench.yaml").write_text(yaml.safe_dump(config))
            bridge = await start(
                [
                    sys.executable,
                    "-m",
                    "bridge.cli",
                    "serve",
                    "-c",
                    str(Path(tmp) / "bench.yaml"),
                    "--port",
                    str(bridge_port),
                ],
                b"bridge: upstreams started",
                "stderr",
            )
            base = f"http://127.0.0.1:{bridge_port}"
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{base}/tools/demo__add") as response,
            ):
                tool_id = (await response.json())["toolId"]
            direct_url = f"http://127.0.0.1:{upstream_port}/tools/add"
            bridged_url = f"{base}/tools/{tool_id}:invoke"
            direct_body = json.dumps({"a": 2, "b": 3}).encode()
            bridged_body = json.dumps(
                {
                    "name": "demo__add",
                    "input_parameters": [{"name": "a", "value": 2}, {"name": "b", "value": 3}],
                }
            ).encode()
            headers = {"Content-Type": "application/json"}

            floor = await start(
                [
                    sys.executable,
                    "bench/_bare_proxy.py",
                    f"http://127.0.0.1:{upstream_port}",
                    str(floor_port),
                ],
                b"bare proxy listening",
                "stdout",
            )
            floor_url = f"http://127.0.0.1:{floor_port}/"

            async def floored(session: aiohttp.ClientSession) -> None:
                async with session.post(floor_url, data=direct_body, headers=headers) as response:
                    body = await response.read()
                    assert response.status == 200 and b'"result": 5' in body, body

            async def direct(session: aiohttp.ClientSession) -> None:
                async with session.post(direct_url, data=direct_body, headers=headers) as response:
                    body = await response.read()
                    assert response.status == 200 and b'"result": 5' in body, body

            async def bridged(session: aiohttp.ClientSession) -> None:
                async with session.post(
                    bridged_url, data=bridged_body, headers=headers
                ) as response:
                    body = await response.read()
                    assert response.status == 200 and b'"value":5}' in body, body

            rows = []
            for concurrency, count in REQUESTS.items():
                count = max(100, int(count * scale))
                up_cpu = cpu_seconds(upstream)
                d_lat, d_wall, d_client = await measure(direct, concurrency, count)
                up_cpu_direct = cpu_seconds(upstream)
                d_p50, d_rps = quantile(d_lat, 0.5), count / d_wall
                rows.append(
                    [
                        str(concurrency),
                        "direct",
                        f"{d_p50:.2f}",
                        f"{quantile(d_lat, 0.99):.2f}",
                        f"{d_rps:,.0f}",
                        "",
                        "",
                        f"{d_client * 1e6:.0f}",
                        cpu_per_request(up_cpu, up_cpu_direct, count + WARMUP),
                        "",
                    ]
                )
                for label, process, call in (
                    ("bare proxy", floor, floored),
                    ("bridge", bridge, bridged),
                ):
                    before = cpu_seconds(process)
                    lat, wall, client_cpu = await measure(call, concurrency, count)
                    after = cpu_seconds(process)
                    p50, rps = quantile(lat, 0.5), count / wall
                    rows.append(
                        [
                            "",
                            label,
                            f"{p50:.2f}",
                            f"{quantile(lat, 0.99):.2f}",
                            f"{rps:,.0f}",
                            f"{p50 - d_p50:+.2f}",
                            f"{rps / d_rps:.0%}",
                            f"{client_cpu * 1e6:.0f}",
                            "",
                            cpu_per_request(before, after, count + WARMUP),
                        ]
                    )
    finally:
        for process in (bridge, floor, upstream):
            if process is not None:
                await stop(process)
    header = [
        "clients",
        "path",
        "p50 ms",
        "p99 ms",
        "req/s",
        "p50 overhead ms",
        "throughput kept",
        "client CPU us/req",
        "upstream CPU us/req",
        "proxy CPU us/req",
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(
        "POST /tools/{id}:invoke through the bridge vs POST /tools/add on the a2t upstream, and a bare proxy (loopback)"
    )
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    print(
        "aim: the bridge adds < 1 ms at p50 and keeps >= 50% of the direct throughput. The bare proxy (bench/_bare_proxy.py)\n"
        "is the floor of the HTTP stack: uvicorn and one aiohttp call, nothing else. CPU columns: process CPU time per\n"
        "request (upstream and proxy: warm-up included), independent of other load on the machine. With the three processes\n"
        "CPU-bound on the machine's cores, a proxy keeps about (client + upstream) / (client + upstream + proxy) of the\n"
        "direct throughput: half of it needs a proxy that costs no more CPU than the client and the upstream together."
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply the request counts (e.g. 0.1 for a quick run)",
    )
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main(args.scale)))
