"""Catalog build for 100,000 synthetic declarations (merged, versioned, stored in SQLite) and
pipeline overhead per invocation with a no-op upstream. Prints a table."""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.catalog import Catalog
from bridge.config import InvokeConfig
from bridge.invoke import Invoker
from bridge.model import SafetyHints, UpstreamResult, UpstreamTool
from bridge.store import Store
from bridge.surface import Surfaces
from bridge.upstream import CallContext, Upstream, UpstreamConfig

VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "export",
    "sync",
    "archive",
    "restore",
]
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


def synthetic_tools(
    n: int, upstreams: int, *, destructive_deletes: bool = False
) -> dict[str, list[UpstreamTool]]:
    """`n` tools of a few verbs and nouns over `upstreams` vendors (`vendor0`...), by vendor; the
    get, list and search tools read-only, and with `destructive_deletes` the delete tools
    destructive."""
    out: dict[str, list[UpstreamTool]] = {f"vendor{i}": [] for i in range(upstreams)}
    for i in range(n):
        verb, noun = VERBS[i % len(VERBS)], NOUNS[(i // len(VERBS)) % len(NOUNS)]
        ns = f"vendor{i % upstreams}"
        out[ns].append(
            UpstreamTool(
                native_id=f"{verb}_{noun}_{i}",
                name=f"{verb}_{noun}_{i}",
                description=f"{verb.title()} a {noun} record number {i} in the vendor system.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": f"{noun} id"},
                        "limit": {"type": "integer"},
                    },
                    "required": ["id"],
                },
                safety=SafetyHints(
                    read_only=verb in ("get", "list", "search"),
                    destructive=destructive_deletes and verb == "delete",
                ),
                tags=[noun],
            )
        )
    return out


class NoopUpstream(Upstream):
    kind = "noop"

    async def start(self) -> None:
        return None

    async def list_tools(self) -> list[UpstreamTool]:
        return []

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        return UpstreamResult(content=[{"type": "text", "text": "ok"}])

    async def close(self) -> None:
        return None


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def bench_build(n: int, upstreams: int) -> list[tuple[str, str]]:
    tools = synthetic_tools(n, upstreams)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        store = Store(db)
        catalog = Catalog(store)
        for name in tools:
            catalog.add_upstream(NoopUpstream(UpstreamConfig(name=name, kind="noop")))
        gc.collect()
        t0 = time.perf_counter()
        for name, batch in tools.items():
            catalog.apply_tools(name, batch)
        build = time.perf_counter() - t0
        rows.append((f"build {n:,} tools ({upstreams} upstreams), first run", f"{build:.2f} s"))
        rows.append(("peak RSS after build", f"{rss_mb():.0f} MB"))
        rows.append(("store size", f"{db.stat().st_size / 1e6:.1f} MB"))
        # a restart: names and versions come from the store, nothing new is written
        store.close()
        store2 = Store(db)
        catalog2 = Catalog(store2)
        for name in tools:
            catalog2.add_upstream(NoopUpstream(UpstreamConfig(name=name, kind="noop")))
        t0 = time.perf_counter()
        for name, batch in tools.items():
            catalog2.apply_tools(name, batch)
        rows.append(
            (f"rebuild {n:,} tools after restart (unchanged)", f"{time.perf_counter() - t0:.2f} s")
        )
        store2.close()
    return rows


async def bench_relist(n: int) -> list[tuple[str, str]]:
    """One upstream of `n` tools lists them again (what `refresh_interval` does, or a change
    notice), while the event loop also runs a task waking every millisecond, as a server's calls
    would: how long the listing took, and the longest the loop was held, with the listing taken
    on the loop and as the bridge takes it, unchanged and with one tool changed."""
    tools = [tool for batch in synthetic_tools(n, 1).values() for tool in batch]
    one_changed = [
        tools[0].model_copy(update={"description": "Says something else now."}),
        *tools[1:],
    ]
    catalog = Catalog(Store())
    catalog.add_upstream(NoopUpstream(UpstreamConfig(name="big", kind="noop")))
    catalog.apply_tools("big", tools)
    slot = catalog.slot("big")
    rows = []
    for label, listing, relist in (
        (
            "unchanged, taken on the event loop",
            tools,
            lambda: catalog._apply(slot, tools, ready=True),
        ),
        ("unchanged, as the bridge takes it", tools, lambda: catalog.take_tools("big", tools)),
        (
            "one of them changed, as the bridge takes it",
            one_changed,
            lambda: catalog.take_tools("big", one_changed),
        ),
    ):
        gaps: list[float] = []
        done = asyncio.Event()

        async def tick(gaps: list[float] = gaps, done: asyncio.Event = done) -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        change = relist()
        if asyncio.iscoroutine(change):
            change = await change
        took = time.perf_counter() - t0
        done.set()
        await ticker
        assert (
            len(change.updated) == (listing is one_changed)
            and not change.added
            and not change.removed
        )
        rows.append((f"re-list {n:,} tools of one upstream, {label}: taken in", f"{took:.2f} s"))
        rows.append(("  event loop held at most", f"{max(gaps) * 1000:.0f} ms"))
    return rows


async def bench_pipeline(calls: int) -> list[tuple[str, str]]:
    store = Store()
    catalog = Catalog(store)
    catalog.add_upstream(NoopUpstream(UpstreamConfig(name="noop", kind="noop")))
    catalog.apply_tools("noop", synthetic_tools(10, 1)["vendor0"])
    name = next(iter(catalog.declarations())).name
    invoker = Invoker(catalog, Surfaces([], catalog), store, InvokeConfig())
    args = {"id": "42", "limit": 5}
    upstream = catalog.slot("noop").upstream
    ctx = CallContext(invocation_id="x", timeout=5)
    for _ in range(500):  # warm caches
        await invoker.invoke(name, args)
    direct, piped = [], []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        await upstream.invoke("get_user_0", args, ctx)
        t1 = time.perf_counter_ns()
        result = await invoker.invoke(name, args)
        t2 = time.perf_counter_ns()
        assert not result.is_error
        direct.append(t1 - t0)
        piped.append(t2 - t1)
    await invoker.aclose()
    overhead = sorted(p - d for p, d in zip(piped, direct, strict=True))

    def pct(values: list[int], q: float) -> str:
        return f"{values[min(len(values) - 1, int(q * len(values)))] / 1000:.1f} µs"

    return [
        (f"pipeline overhead p50 ({calls:,} calls, no-op upstream)", pct(overhead, 0.50)),
        ("pipeline overhead p99", pct(overhead, 0.99)),
        ("pipeline mean per call", f"{statistics.mean(piped) / 1000:.1f} µs"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=100_000)
    parser.add_argument("--upstreams", type=int, default=20)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    rows = asyncio.run(bench_build(args.tools, args.upstreams))
    rows += asyncio.run(bench_relist(args.tools))
    rows += asyncio.run(bench_pipeline(args.calls))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  value")
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
