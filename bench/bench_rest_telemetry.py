"""Throughput and latency of REST `POST /invoke` through `bridge serve` with its telemetry off
and on, in one run: the same bridge config served three times on loopback, to one a2t-dialect
upstream (bridge/demo/a2t_server.py), each a process of its own:

- `off`: no metrics route, no traces, no audit stream (`telemetry.metrics: false`);
- `on, dropped`: metrics, an audit file and the audit stream as OTLP logs, and tracing with a
  sampler that keeps none of the traces begun here;
- `on, sampled`: the same, every trace kept and exported.

Spans and audit records go to a collector that discards them (bench/_otlp_sink.py). The three
bridges take turns, a round of requests each at 1 and at 16 concurrent clients, so that the
machine's drift falls on all alike; a row gives the median over the rounds of each round's
requests per second and p50, the p99 of all requests, the bridge process's CPU time per
request (independent of other load on the machine), and that of its span export child, which
encodes and sends the spans (over all rounds and both concurrencies, once it is idle: it
exports a few seconds behind).

    python bench/bench_rest_telemetry.py [--rounds 5] [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_rest_invoke import WARMUP, cpu_seconds, free_port, measure, quantile, start, stop

CONCURRENCY = (1, 16)


def children_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the live child processes of process `pid` have used so far."""
    total = 0.0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def idle_children_cpu_seconds(pid: int) -> float:
    """`children_cpu_seconds` once it stops growing (for a second; 20 s at most)."""
    last, deadline = children_cpu_seconds(pid), time.monotonic() + 20
    while time.monotonic() < deadline:
        await asyncio.sleep(1)
        now = children_cpu_seconds(pid)
        if now == last:
            break
        last = now
    return last


def config(folder: Path, upstream: int, sink: int, mode: str) -> Path:
    data: dict = {
        "store": {"path": str(folder / f"{mode}.db")},
        "upstreams": [
            {
                "name": "demo",
                "kind": "a2t",
                "url": f"http://127.0.0.1:{upstream}",
                "max_concurrency": 256,
            }
        ],
        "surfaces": [{"name": "default", "load": ["*"]}],
        "search": {"semantic": False},
    }
    if mode == "off":
        data["telemetry"] = {"metrics": False}
    else:
        data["telemetry"] = {
            "otlp_endpoint": f"http://127.0.0.1:{sink}",
            "sample_ratio": 1.0 if mode == "on, sampled" else 0.0,
        }
        data["audit"] = {"path": str(folder / f"{mode}.jsonl"), "otlp": True}
    path = folder / f"{mode.replace(', ', '-')}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def main(rounds: int, requests: int) -> int:
    upstream_port, sink_port = free_port(), free_port()
    modes = ("off", "on, dropped", "on, sampled")
    processes: list[asyncio.subprocess.Process] = []
    try:
        processes.append(
            await start(
                [sys.executable, "-m", "bridge.demo.a2t_server", "--port", str(upstream_port)],
                b"a2t demo server listening",
                "stdout",
            )
        )
        processes.append(
            await start(
                [sys.executable, "bench/_otlp_sink.py", str(sink_port)],
                b"otlp sink listening",
                "stdout",
            )
        )
        bridges: dict[str, tuple[asyncio.subprocess.Process, str]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for mode in modes:
                port = free_port()
                process = await start(
                    [
                        sys.executable,
                        "-m",
                        "bridge.cli",
                        "serve",
                        "-c",
                        str(config(Path(tmp), upstream_port, sink_port, mode)),
                        "--port",
                        str(port),
                    ],
                    b"bridge: upstreams started",
                    "stderr",
                )
                processes.append(process)
                bridges[mode] = (process, f"http://127.0.0.1:{port}/invoke")
            body = json.dumps({"tool": "demo__add", "arguments": {"a": 2, "b": 3}}).encode()
            headers = {"Content-Type": "application/json"}
            rps: dict[tuple[str, int], list[float]] = {}
            p50: dict[tuple[str, int], list[float]] = {}
            latencies: dict[tuple[str, int], list[float]] = {}
            cpu: dict[tuple[str, int], float] = {}
            for _ in range(rounds):
                for concurrency in CONCURRENCY:
                    for mode, (process, url) in bridges.items():

                        async def call(session: aiohttp.ClientSession, url: str = url) -> None:
                            async with session.post(url, data=body, headers=headers) as response:
                                answer = await response.read()
                                assert response.status == 200, answer

                        key = (mode, concurrency)
                        before = cpu_seconds(process)
                        lat, wall, _ = await measure(call, concurrency, requests)
                        after = cpu_seconds(process)
                        rps.setdefault(key, []).append(requests / wall)
                        p50.setdefault(key, []).append(quantile(lat, 0.5))
                        latencies.setdefault(key, []).extend(lat)
                        if before is not None and after is not None:
                            cpu[key] = cpu.get(key, 0.0) + (after - before) / (
                                requests + min(WARMUP, requests)
                            )
            served = rounds * len(CONCURRENCY) * (requests + min(WARMUP, requests))
            child_cpu = {
                mode: await idle_children_cpu_seconds(process.pid) / served
                for mode, (process, _) in bridges.items()
            }
    finally:
        for process in reversed(processes):
            await stop(process)
    print(
        f"POST /invoke through bridge serve to an a2t upstream, telemetry off and on; {rounds} rounds of "
        f"{requests} requests per row"
    )
    header = (
        "clients",
        "telemetry",
        "req/s",
        "kept",
        "p50 ms",
        "+p50 µs",
        "p99 ms",
        "bridge CPU µs/req",
        "+CPU µs",
        "child CPU µs/req",
    )
    print("".join(f"{h:>19}" for h in header))
    for concurrency in CONCURRENCY:
        base = (
            statistics.median(rps[("off", concurrency)]),
            statistics.median(p50[("off", concurrency)]),
            cpu.get(("off", concurrency), 0.0) / rounds,
        )
        for mode in modes:
            key = (mode, concurrency)
            speed, median = statistics.median(rps[key]), statistics.median(p50[key])
            used = cpu.get(key, 0.0) / rounds
            row = (
                str(concurrency),
                mode,
                f"{speed:,.0f}",
                f"{speed / base[0]:.0%}",
                f"{median:.2f}",
                f"{(median - base[1]) * 1000:+.0f}",
                f"{quantile(latencies[key], 0.99):.2f}",
                f"{used * 1e6:.0f}",
                f"{(used - base[2]) * 1e6:+.0f}",
                f"{child_cpu[mode] * 1e6:.0f}",
            )
            print("".join(f"{c:>19}" for c in row))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="turns the bridges take")
    parser.add_argument(
        "--requests", type=int, default=2000, help="requests per bridge, round and concurrency"
    )
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main(args.rounds, args.requests)))
