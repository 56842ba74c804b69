"""MCP frontend benchmark.

1. tools/call through the bridge to an MCP upstream, against calling that upstream directly, in
   the same run, at 1 and 32 concurrent sessions (handshake-era ClientSessions over streamable
   HTTP; the upstream and the bridge each run as their own process: bench/_mcp_echo_server.py and
   `bridge serve`).
2. tools/list and search_tools latency over MCP (both protocol eras) with 100,000 deferred tools:
   a catalog built with Catalog.apply_tools over an in-bench upstream, the MCP frontend on uvicorn
   in this process.

Run: .venv/bin/python bench/bench_mcp_frontend.py [--tools 100000] [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
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

import httpx2  # noqa: E402
import uvicorn  # noqa: E402
from _procs import pct, process, table  # noqa: E402
from mcp import Client, ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from bridge.config import parse_config  # noqa: E402
from bridge.model import SafetyHints, UpstreamResult, UpstreamTool  # noqa: E402
from bridge.runtime import Bridge  # noqa: E402
from bridge.serve.mcp import MCPFrontend  # noqa: E402
from bridge.upstream import CallContext, Upstream, UpstreamConfig  # noqa: E402

PY = sys.executable


# ------------------------------------------------------------------------------------ helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def wait_listening(port: int, proc: asyncio.subprocess.Process, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if proc.returncode is not None:
                err = (await proc.stderr.read()).decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"process exited with {proc.returncode}: {err[-2000:]}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.05)


async def wait_ready(base: str, timeout: float = 60) -> None:
    """Until the bridge's /readyz answers 200: it listens before its upstreams have listed."""
    async with asyncio.timeout(timeout), httpx2.AsyncClient() as http:
        while (await http.get(f"{base}/readyz")).status_code != 200:
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def session(url: str) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http:
        async with (
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            yield s


# ------------------------------------------------------------------------------------ part 1: calls


async def run_sessions(
    url: str, tool: str, sessions: int, calls_each: int
) -> tuple[list[float], float]:
    """Latencies (ms) of every call and the wall time of the whole run."""
    latencies: list[float] = []
    ready = asyncio.Barrier(sessions + 1)
    done = asyncio.Event()

    async def one(n: int) -> None:
        async with session(url) as s:
            for i in range(3):  # warm up this session
                await s.call_tool(tool, {"text": f"warm {i}"})
            await ready.wait()
            for i in range(calls_each):
                started = time.perf_counter()
                result = await s.call_tool(tool, {"text": f"s{n} c{i}"})
                latencies.append((time.perf_counter() - started) * 1000)
                if result.is_error:
                    raise RuntimeError(f"call failed: {result.content}")
            await done.wait()

    tasks = [asyncio.create_task(one(n)) for n in range(sessions)]
    async with asyncio.timeout(600):
        await ready.wait()
        started = time.perf_counter()
        while len(latencies) < sessions * calls_each:
            for task in tasks:
                if task.done() and task.exception():
                    raise task.exception()  # type: ignore[misc]
            await asyncio.sleep(0.005)
        wall = time.perf_counter() - started
        done.set()
        await asyncio.gather(*tasks)
    return latencies, wall


async def bench_calls(calls: int, work: Path) -> list[list[str]]:
    work.mkdir()
    up_port, bridge_port = free_port(), free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": bridge_port},
        "store": {"path": str(work / "bridge.db")},
        "upstreams": [
            {
                "name": "up",
                "kind": "mcp",
                "url": f"http://127.0.0.1:{up_port}/mcp",
                "protocol": "legacy",
            }
        ],
        "search": {"semantic": "off"},  # this measures calls, not search
    }
    (work / "bridge.json").write_text(json.dumps(config))
    rows = []
    echo = (PY, str(ROOT / "bench" / "_mcp_echo_server.py"), str(up_port))
    async with process(*echo, grace=5, stderr=asyncio.subprocess.PIPE) as upstream:
        await wait_listening(up_port, upstream)
        serve = (PY, "-m", "bridge.cli", "serve", "-c", str(work / "bridge.json"))
        async with process(*serve, grace=5, stderr=asyncio.subprocess.PIPE) as bridge:
            await wait_listening(bridge_port, bridge)
            await wait_ready(f"http://127.0.0.1:{bridge_port}")
            direct_url, bridge_url = (
                f"http://127.0.0.1:{up_port}/mcp",
                f"http://127.0.0.1:{bridge_port}/mcp",
            )
            async with session(bridge_url) as s:
                names = [t.name for t in (await s.list_tools()).tools]
                assert "up__echo" in names, names
            for sessions in (1, 32):
                calls_each = calls if sessions == 1 else max(5, calls // 16)
                measured = {}
                for label, url, tool in (
                    ("direct", direct_url, "echo"),
                    ("via bridge", bridge_url, "up__echo"),
                ):
                    latencies, wall = await run_sessions(url, tool, sessions, calls_each)
                    measured[label] = statistics.median(latencies)
                    rows.append(
                        [
                            label,
                            str(sessions),
                            str(len(latencies)),
                            f"{len(latencies) / wall:,.0f}",
                            f"{statistics.median(latencies):.2f}",
                            f"{pct(latencies, 0.95):.2f}",
                            "",
                        ]
                    )
                rows[-1][-1] = f"+{measured['via bridge'] - measured['direct']:.2f} ms p50"
    return rows


# ------------------------------------------------------------------------------------ part 2: 100k deferred

VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "archive",
    "export",
    "import",
    "sync",
]
QUALIFIERS = [
    "primary",
    "archived",
    "shared",
    "draft",
    "pending",
    "recurring",
    "external",
    "internal",
    "scheduled",
    "public",
    "private",
    "billing",
    "support",
    "sales",
    "marketing",
    "legal",
    "finance",
    "travel",
    "medical",
    "school",
    "regional",
    "global",
    "daily",
    "weekly",
    "monthly",
    "yearly",
    "urgent",
    "default",
    "custom",
    "template",
    "tagged",
    "flagged",
    "starred",
    "hidden",
    "locked",
    "signed",
    "unsigned",
    "verified",
    "expired",
    "active",
    "inactive",
    "open",
    "closed",
    "merged",
    "blocked",
    "approved",
    "rejected",
    "refunded",
    "paid",
    "unpaid",
]
OBJECTS = [
    "invoice",
    "customer",
    "order",
    "file",
    "message",
    "event",
    "ticket",
    "item",
    "report",
    "employee",
    "payment",
    "subscription",
    "channel",
    "calendar",
    "contact",
    "product",
    "shipment",
    "warehouse",
    "policy",
    "user",
    "group",
    "role",
    "token",
    "webhook",
    "dataset",
    "model",
    "job",
    "pipeline",
    "repository",
    "issue",
    "comment",
    "note",
    "task",
    "project",
    "meeting",
    "room",
    "device",
    "sensor",
    "alert",
    "metric",
    "log",
    "backup",
    "snapshot",
    "volume",
    "bucket",
    "domain",
    "certificate",
    "license",
    "coupon",
    "refund",
    "quote",
    "contract",
    "lead",
    "opportunity",
    "campaign",
    "survey",
    "form",
    "page",
    "post",
    "video",
    "image",
    "playlist",
    "album",
    "track",
    "recipe",
    "menu",
    "reservation",
    "flight",
    "hotel",
    "car",
    "booking",
    "route",
    "map",
    "place",
    "review",
    "rating",
    "question",
    "answer",
    "course",
    "lesson",
    "grade",
    "student",
    "teacher",
    "patient",
    "appointment",
    "prescription",
    "claim",
    "account",
    "budget",
    "expense",
    "asset",
    "vendor",
    "supplier",
    "stock",
    "price",
    "currency",
    "transfer",
    "loan",
    "card",
    "statement",
    "folder",
    "label",
    "thread",
    "draft",
    "attachment",
    "signature",
    "workflow",
    "trigger",
    "schedule",
    "queue",
    "cluster",
    "node",
    "pod",
    "service",
    "secret",
    "config",
    "feature",
    "experiment",
    "segment",
    "audience",
    "translation",
    "glossary",
    "document",
    "spreadsheet",
    "slide",
    "whiteboard",
    "poll",
    "badge",
    "reward",
    "game",
    "match",
    "team",
    "player",
    "league",
    "season",
    "vehicle",
    "driver",
    "parcel",
    "package",
    "release",
    "build",
    "deployment",
    "artifact",
    "branch",
    "commit",
    "review_request",
    "sprint",
    "epic",
    "story",
    "bug",
    "incident",
    "runbook",
    "oncall",
    "status_page",
    "invoice_line",
    "tax_rate",
    "discount",
    "gift_card",
    "wishlist",
    "cart",
    "checkout",
    "return",
    "exchange",
    "inventory",
    "catalog",
    "category",
    "brand",
    "supplier_order",
    "purchase_order",
    "receipt",
    "timesheet",
    "payroll",
    "benefit",
    "leave",
    "shift",
    "candidate",
    "interview",
    "offer",
    "onboarding",
    "training",
]
QUERIES = [
    "create a new invoice",
    "list overdue unpaid invoices",
    "archive old customer records",
    "export monthly sales report",
    "delete expired certificate",
    "update shipment route",
    "search support tickets",
    "sync calendar events",
    "get patient appointment",
    "import product catalog",
    "refund a payment",
    "schedule weekly backup",
    "approve purchase order",
    "find flight reservation",
    "list open pull request reviews",
    "get weather alert",
    "update employee payroll",
    "create playlist of tracks",
    "close incident runbook",
    "export student grades",
]


class BenchUpstream(Upstream):
    """The in-bench upstream: tools handed to Catalog.apply_tools; calls echo their arguments."""

    kind = "bench"

    async def start(self) -> None:
        return None

    async def list_tools(self) -> list[UpstreamTool]:
        return []

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        return UpstreamResult(content=[{"type": "text", "text": json.dumps(arguments)}])

    async def close(self) -> None:
        return None


def synthetic_tools(count: int) -> list[UpstreamTool]:
    tools = []
    for i in range(count):
        verb = VERBS[i % len(VERBS)]
        qualifier = QUALIFIERS[(i // len(VERBS)) % len(QUALIFIERS)]
        obj = OBJECTS[(i // (len(VERBS) * len(QUALIFIERS))) % len(OBJECTS)]
        round_ = i // (len(VERBS) * len(QUALIFIERS) * len(OBJECTS))
        name = f"{verb}_{qualifier}_{obj}" + (f"_v{round_ + 1}" if round_ else "")
        tools.append(
            UpstreamTool(
                native_id=name,
                name=name,
                description=f"{verb.capitalize()} a {qualifier} {obj.replace('_', ' ')} record in the "
                f"{qualifier} workspace. Returns the {obj.replace('_', ' ')} as JSON.",
                input_schema={
                    "type": "object",
                    "properties": {
                        f"{obj}_id": {
                            "type": "string",
                            "description": f"Id of the {obj.replace('_', ' ')}.",
                        },
                        "fields": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": [f"{obj}_id"],
                },
                safety=SafetyHints(
                    read_only=verb in ("get", "list", "search", "export"),
                    sources={"read_only": "declared"},
                ),
                tags=[qualifier],
            )
        )
    return tools


async def timed(repeat: int, fn: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(repeat):
        started = time.perf_counter()
        await fn(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def bench_large_catalog(
    count: int, repeat: int, work: Path
) -> tuple[list[list[str]], list[str]]:
    work.mkdir()
    notes = []
    config = parse_config(
        {
            "store": {"path": str(work / "bridge.db")},
            "surfaces": [
                {
                    "name": "default",
                    "load": [f"bench__get_primary_{o}" for o in OBJECTS[:20]],
                    "defer": ["*"],
                }
            ],
            # the default stage without the `semantic` extra (the full model would take hours here)
            "search": {"semantic": "static"},
        }
    )
    upstream = BenchUpstream(UpstreamConfig(name="bench", kind="bench"))
    bridge = Bridge(config, extra_upstreams=[upstream])
    tools = synthetic_tools(count)
    listed = started = time.perf_counter()
    embedded = None
    bridge.catalog.apply_tools("bench", tools)
    built = time.perf_counter() - started
    started = time.perf_counter()
    await bridge.search.wait_indexed(timeout=900)
    indexed = time.perf_counter() - started
    if bridge.search.semantic is not None:  # embedded before measuring, not while
        await asyncio.to_thread(bridge.search.semantic.flush, 900)
        embedded = time.perf_counter() - listed
    counts = bridge.surfaces.get("default").counts()  # type: ignore[union-attr]
    notes.append(
        f"catalog of {len(bridge.catalog):,} tools built in {built:.1f} s, indexed in {indexed:.1f} s more; "
        f"surface: {counts['loaded']} loaded, {counts['deferred']:,} deferred; peak RSS {rss_mb():,.0f} MB"
    )
    if embedded is not None:
        notes.append(
            f"semantic stage (static table): every tool embedded {embedded:.1f} s after the listing (in the background)"
        )
    frontend = MCPFrontend(bridge)
    app = frontend.http_app([], host="127.0.0.1")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    rows = []
    try:
        async with asyncio.timeout(60):
            while not server.started:
                await asyncio.sleep(0.01)
        url = f"http://127.0.0.1:{port}/mcp"
        # handshake era
        async with session(url) as s:
            first = await s.list_tools()
            listed = await timed(repeat, lambda i: s.list_tools())
            searched = await timed(
                repeat,
                lambda i: s.call_tool(
                    "search_tools", {"query": QUERIES[i % len(QUERIES)], "limit": 10}
                ),
            )
            found = (
                await s.call_tool("search_tools", {"query": "refund a payment"})
            ).structured_content
        rows.append(
            [
                "tools/list",
                "2025-11-25",
                str(len(first.tools)),
                f"{statistics.median(listed):.2f}",
                f"{pct(listed, 0.95):.2f}",
            ]
        )
        rows.append(
            [
                "search_tools",
                "2025-11-25",
                "10",
                f"{statistics.median(searched):.2f}",
                f"{pct(searched, 0.95):.2f}",
            ]
        )
        notes.append(f"'refund a payment' → {', '.join(m['name'] for m in found['matches'][:3])}")
        # 2026-07-28 era
        async with Client(url, mode="2026-07-28", cache=None) as c:
            first = await c.list_tools()
            listed = await timed(repeat, lambda i: c.list_tools())
            searched = await timed(
                repeat,
                lambda i: c.call_tool(
                    "search_tools", {"query": QUERIES[i % len(QUERIES)], "limit": 10}
                ),
            )
        rows.append(
            [
                "tools/list",
                "2026-07-28",
                str(len(first.tools)),
                f"{statistics.median(listed):.2f}",
                f"{pct(listed, 0.95):.2f}",
            ]
        )
        rows.append(
            [
                "search_tools",
                "2026-07-28",
                "10",
                f"{statistics.median(searched):.2f}",
                f"{pct(searched, 0.95):.2f}",
            ]
        )
    finally:
        server.should_exit = True
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(10):
                await task
        await frontend.aclose()
        await bridge.close()
    return rows, notes


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tools", type=int, default=100_000, help="deferred tools in part 2")
    parser.add_argument(
        "--calls",
        type=int,
        default=300,
        help="calls of the one-session run (32 sessions make calls/16 each)",
    )
    parser.add_argument("--repeat", type=int, default=40, help="requests per latency row of part 2")
    parser.add_argument("--part", choices=("all", "calls", "catalog"), default="all")
    args = parser.parse_args()
    print(f"MCP frontend benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})\n")
    with tempfile.TemporaryDirectory(
        prefix="bench-mcp-"
    ) as work:  # each part's store and index, removed after
        return await run_parts(args, Path(work))


async def run_parts(args: argparse.Namespace, work: Path) -> int:
    if args.part in ("all", "calls"):
        print(
            "tools/call: direct to the MCP upstream vs through the bridge (streamable HTTP, 2025-11-25 sessions)"
        )
        try:
            call_rows = await bench_calls(args.calls, work / "calls")
            print(
                table(
                    call_rows,
                    ["PATH", "SESSIONS", "CALLS", "CALLS/S", "P50 MS", "P95 MS", "BRIDGE COST"],
                )
            )
        except Exception as exc:
            print(f"skipped: {type(exc).__name__}: {exc}")
        print()
    if args.part in ("all", "catalog"):
        print(
            f"tools/list and search_tools over MCP with {args.tools:,} deferred tools ({args.repeat} requests each)"
        )
        rows, notes = await bench_large_catalog(args.tools, args.repeat, work / "catalog")
        print(table(rows, ["REQUEST", "ERA", "TOOLS/MATCHES", "P50 MS", "P95 MS"]))
        for note in notes:
            print(f"  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
