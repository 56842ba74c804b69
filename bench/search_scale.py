"""Search at scale: synthetic catalogs of 10,000, 100,000 and 1,000,000 tools

The catalogs are made from the development set's real names and descriptions, varied across
vendors, verbs and nouns. Prints build time, index size on disk, RSS, query latency and live
add/remove cost, and what the default semantic stage adds to a query, to memory and to indexing.

The first table feeds the tools to the index (bridge.search.index) directly: a catalog of a
million pydantic declarations would measure the catalog, not the index. Its queries run the
search path after the catalog: query analysis, the index query and the candidates' ids.

The second table runs the whole bridge over the same tools, listed by their vendors' upstreams
(10,000 and 100,000 by default; a million with --whole 1000000, about 10 minutes and 6.7 GB): the
catalog, the index and the static table kept in step with it, and ToolSearch.search, each size
in a process of its own.

Run: .venv/bin/python bench/search_scale.py [--sizes 10000,100000,1000000] [--whole 10000,100000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.model import UpstreamTool  # noqa: E402
from bridge.search.analysis import analyze_query, name_tokens, query_parts  # noqa: E402
from bridge.search.document import IndexedTool, _param_text, exact_names, name_text  # noqa: E402
from bridge.search.index import ToolIndex  # noqa: E402
from bridge.search.semantic import CANDIDATES as SEMANTIC_CANDIDATES  # noqa: E402
from bridge.search.semantic import QUERY_TOKENS  # noqa: E402
from bridge.search.stages import part_scores  # noqa: E402
from bridge.search.static import load_static  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "toolsearch"
VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "find",
    "fetch",
    "set",
    "add",
    "remove",
    "check",
    "compute",
    "export",
    "import",
    "validate",
    "sync",
    "archive",
    "restore",
    "describe",
]
OBJECTS = [
    "account",
    "invoice",
    "order",
    "customer",
    "ticket",
    "project",
    "repository",
    "file",
    "folder",
    "report",
    "payment",
    "subscription",
    "message",
    "channel",
    "event",
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
]
FALLBACK = [
    {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {"properties": {"city": {"description": "City name"}}},
    }
]


def seeds() -> list[dict[str, Any]]:
    path = DATA / "catalog.jsonl"
    if not path.exists():
        print(f"note: {path} is missing; using a tiny built-in seed list", file=sys.stderr)
        return FALLBACK
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def requests(count: int) -> list[str]:
    """The first `count` requests of the development set; where it is missing, three made-up ones
    in turn."""
    path = DATA / "queries-dev.jsonl"
    if not path.exists():
        print(f"note: {path} is missing; using three built-in requests", file=sys.stderr)
        made_up = ["weather in Paris", "create an invoice", "delete the user account"]
        return [made_up[i % 3] for i in range(count)]
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()][:count]


def _first_sentence(text: str) -> str:
    head = text.split(". ", 1)[0].strip()
    return head if head.endswith(".") else head + "."


class Synthetic:
    """Tool `i` of a synthetic catalog, the same on every call: a real declaration of the development
    set renamed for one of 2,000 vendors, a verb and a noun, its description and parameters joined
    with those of another declaration picked by a hash of `i` (so a million tools are not a few
    thousand texts repeated, which no real catalog is)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        words = sorted(
            {t for r in rows for t in name_tokens(r["name"]) if t.isalpha() and len(t) > 3}
        )
        self.vendors = [
            f"{words[(i * 31) % len(words)]}{words[(i * 17 + 5) % len(words)]}" for i in range(2000)
        ]
        self.params = [_param_text(r.get("parameters") or {}) for r in rows]
        self.params_joined = [(" ".join(names), " ".join(texts)) for names, texts in self.params]
        self.firsts = [_first_sentence(r.get("description") or "") for r in rows]
        self.name_words = [
            name_text(r["name"]) for r in rows
        ]  # the words of `verb_noun_<name>` follow

    @staticmethod
    def tool_id(i: int) -> str:
        h = f"{(i + 1) * 0x9E3779B97F4A7C15 % (1 << 128):032x}"  # str(uuid.UUID(int=...)), faster
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def _pick(self, i: int) -> tuple[int, int, str, str, str, str, str]:
        """Tool `i` (past the real ones): its two declarations, vendor, verb, noun, name, description."""
        n = len(self.rows)
        a, b = (i * 7919) % n, ((i * 0x9E3779B1) >> 7) % n
        vendor = self.vendors[i % len(self.vendors)]
        verb, obj = VERBS[(i // 7) % len(VERBS)], OBJECTS[(i // 140) % len(OBJECTS)]
        native = f"{verb}_{obj}_{self.rows[a]['name']}"
        description = f"{self.firsts[a]} {verb.capitalize()}s the {obj} of a {vendor} workspace. {self.firsts[b]}"
        return a, b, vendor, verb, obj, native, description

    def tool(self, i: int) -> IndexedTool:
        n = len(self.rows)
        if i < n:  # the real declarations themselves come first
            row, pnames, ptexts = self.rows[i], *self.params[i]
            return IndexedTool(
                tool_id=self.tool_id(i),
                namespace="seed",
                name=name_text(row["name"]),
                exact_names=exact_names(row["name"]),
                description=row.get("description") or "",
                params=" ".join(pnames),
                param_text=" ".join(ptexts),
            )
        a, b, vendor, verb, obj, native, description = self._pick(i)
        (names_b, texts_b), (params_a, text_a) = self.params[b], self.params_joined[a]
        return IndexedTool(
            tool_id=self.tool_id(i),
            namespace=vendor,
            name=f"{verb} {obj} {self.name_words[a]}",
            exact_names=exact_names(native, f"{vendor}__{native}"),
            description=description,
            params=" ".join([params_a, *names_b[:2]]),
            param_text=" ".join([text_a, *texts_b[:2]]),
            tags=[obj],
            read_only=verb in ("get", "list", "search", "find", "fetch", "describe"),
        )

    def tools(self, start: int, stop: int) -> Iterator[IndexedTool]:
        return (self.tool(i) for i in range(start, stop))

    def listings(self, size: int) -> dict[str, list[UpstreamTool]]:
        """The first `size` tools as upstreams list them (namespace -> tools; a name a vendor
        would list twice counts once): the same names, descriptions and parameters the index is
        fed, for the whole bridge."""
        out: dict[str, dict[str, UpstreamTool]] = {}
        for i in range(size):
            if i < len(self.rows):
                row = self.rows[i]
                namespace, native, description = "seed", row["name"], row.get("description") or ""
                schema = row.get("parameters") or {"type": "object", "properties": {}}
            else:
                a, b, namespace, _, _, native, description = self._pick(i)
                props_b = list(
                    ((self.rows[b].get("parameters") or {}).get("properties") or {}).items()
                )[:2]
                props = {
                    **((self.rows[a].get("parameters") or {}).get("properties") or {}),
                    **dict(props_b),
                }
                schema = {"type": "object", "properties": props}
            tools = out.setdefault(namespace, {})
            if native not in tools:
                tools[native] = UpstreamTool(
                    native_id=native, name=native, description=description, input_schema=schema
                )
        return {namespace: list(tools.values()) for namespace, tools in out.items()}


def rss_mb() -> float:
    """The process's peak resident memory: /proc's VmHWM, which is this program's own (getrusage's
    ru_maxrss also counts the process it was started from, kept across the exec), else ru_maxrss."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def resident_mb() -> float:
    """The process's resident memory now (the peak is `rss_mb`); 0 where /proc is not there."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def folder_mb(path: str) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 1e6


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def search(index: ToolIndex, text: str, limit: int = 10) -> list[tuple[str, float]]:
    """The search path minus the catalog: analyze, build the index query, fetch the 50
    candidates; for a request of several parts, each part's keyword scores among them."""
    parts = query_parts(text)
    hits = index.search(index.query(analyze_query(text)), limit=max(SEMANTIC_CANDIDATES, limit))
    if parts:
        part_scores(index, parts, [tool_id for tool_id, _ in hits])
    return hits


def semantic_cost(
    index: ToolIndex, synthetic: Synthetic, queries: list[str], size: int
) -> dict[str, Any]:
    """What the default semantic stage (the shipped static table) adds: the query path with its 50
    candidates, the query's vector and the candidates' cosines (gathered, as the stage does, from
    an array of every tool's float16 vector: random here, the cost is the same), its memory, and
    the CPU to embed tools (on 2,000 of them)."""
    encoder = load_static()
    if encoder is None:
        return {"sem_p95_ms": float("nan"), "sem_mb": float("nan"), "embed_ms_1k": float("nan")}
    texts = [
        f"{t.name}: {t.description} Parameters: {t.params} {t.param_text}"
        for t in synthetic.tools(size - 2000, size)
    ]
    c0 = time.process_time()
    for start in range(0, len(texts), 32):
        encoder.encode(texts[start : start + 32], encoder.tool_tokens)
    embed = (time.process_time() - c0) / len(texts) * 1e6
    rng, vectors = np.random.default_rng(0), np.empty((size, encoder.dim), np.float16)
    for start in range(0, size, 100_000):
        vectors[start : start + 100_000] = rng.standard_normal(
            (min(100_000, size - start), encoder.dim), np.float32
        )
    latencies = []
    for q in queries:
        t0 = time.perf_counter()
        hits = index.search(index.query(analyze_query(q)), limit=SEMANTIC_CANDIDATES)
        rows = [hash(tool_id) % size for tool_id, _ in hits]
        cosine = vectors[rows].astype(np.float32) @ encoder.encode([q], QUERY_TOKENS)[0]
        np.argsort(-cosine, kind="stable")
        latencies.append((time.perf_counter() - t0) * 1000)
    return {
        "sem_p95_ms": pct(latencies, 0.95),
        "sem_mb": vectors.nbytes / 1e6,
        "embed_ms_1k": embed,
    }


def misspelled(queries: list[str]) -> list[str]:
    """Short queries with a typing error: two long words of each request, the first with two
    of its letters swapped (the index widens such a word to the words one edit away)."""
    out = []
    for q in queries:
        words = re.findall(r"[a-z]{7,}", q.lower())[:2]
        if words:
            w = words[0]
            out.append(" ".join([w[:2] + w[3] + w[2] + w[4:], *words[1:]]))
    return out


def timed(index: ToolIndex, queries: list[str]) -> tuple[list[float], list[float]]:
    """Each query's wall time and the query thread's CPU time, in milliseconds."""
    wall, cpu = [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        search(index, q)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    return wall, cpu


def whole_search(
    size: int, synthetic: Synthetic, queries: list[str], workdir: str
) -> dict[str, Any]:
    """The whole bridge over the first `size` tools, listed by their vendors' upstreams: the
    catalog (its records, and its versions and names in an SQLite file), the on-disk index and the
    static table's vectors kept in step with it, and `ToolSearch.search` asked for 10 matches, as
    an agent asks. Run in a process of its own (`--whole-size`), so its memory is its own."""
    from search_quality import ListedUpstream

    from bridge.catalog import Catalog
    from bridge.config import SurfaceConfig
    from bridge.runtime import collector_held, settle_gc
    from bridge.search.service import ToolSearch
    from bridge.store import Store
    from bridge.surface import Surface

    gc.collect()
    before = resident_mb()
    listings = synthetic.listings(
        size
    )  # the bench's own, held until the end: what upstreams would list
    listings_mb = resident_mb() - before
    folder = tempfile.mkdtemp(
        prefix=f"whole-{size}-", dir=workdir
    )  # a new store, index and vector file: a first build
    catalog = Catalog(Store(os.path.join(folder, "bridge.db")))
    for namespace, tools in listings.items():
        catalog.add_upstream(ListedUpstream(namespace, tools))
    search = ToolSearch(catalog, os.path.join(folder, "index"), semantic="static")
    surface = Surface(SurfaceConfig(name="default"), catalog)
    namespaces = list(listings)

    def change(k: int) -> float:
        """Seconds from a catalog change (one more tool in an upstream's listing) until a search
        through the surface finds the new tool by a word only it has."""
        namespace, word = namespaces[(k * 37) % len(namespaces)], f"zqx{k}marker"
        listings[namespace].append(
            UpstreamTool(
                native_id=f"fresh_{k}",
                name=f"fresh_{k}",
                description=f"Fresh {word} tool.",
                input_schema={"type": "object", "properties": {}},
            )
        )
        t0 = time.perf_counter()
        catalog.apply_tools(namespace, listings[namespace])
        search.flush(None)
        while not search.search(word, surface=surface, limit=1).matches:
            time.sleep(
                0.005
            )  # a removed tool leaves answers at once; an added one is found once committed
        return time.perf_counter() - t0

    started = time.perf_counter()
    with collector_held():  # as Bridge.start holds it while the upstreams first list
        for namespace, tools in listings.items():
            catalog.apply_tools(namespace, tools)  # what each upstream's first listing does
    settle_gc(collected=True)  # as `bridge serve` does once started
    search.flush(None)
    searchable = time.perf_counter() - started
    assert search.semantic is not None
    search.search(
        "weather forecast", surface=surface, limit=10
    )  # a first search: the surface places every tool
    busy_latencies = []
    for q in queries:  # back to back, while the tools are embedded and the index compacted
        t0 = time.perf_counter()
        search.search(q, surface=surface, limit=10)
        busy_latencies.append((time.perf_counter() - t0) * 1000)
    # while the tools are embedded and the index compacted (once every upstream has listed), a
    # change every half second
    busy: list[float] = []
    embedded = compacted = None
    while embedded is None or compacted is None:
        busy.append(change(len(busy)))
        if embedded is None and search.semantic.flush(0):
            embedded = time.perf_counter() - started
        if compacted is None and search.index.compacted(0):
            compacted = time.perf_counter() - started
        time.sleep(0.5)
    settled = [change(len(busy) + k) for k in range(5)]
    for q in queries:  # a first pass: right after the build the index's merges may still be running
        search.search(q, surface=surface, limit=10)
    latencies = []
    for q in queries:
        t0 = time.perf_counter()
        search.search(q, surface=surface, limit=10)
        latencies.append((time.perf_counter() - t0) * 1000)
    search_segments = search.index.segments
    search.close()
    catalog.store.close()
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "tools": sum(len(tools) for tools in listings.values()),
        "upstreams": len(listings),
        "searchable_s": searchable,
        "embedded_s": embedded,
        "compacted_s": compacted,
        "segments": search_segments,
        "changes": len(busy),
        "change_busy_s": max(busy),
        "change_s": max(settled),
        "rss_mb": rss_mb(),
        "listings_mb": listings_mb,
        "busy_p50_ms": statistics.median(busy_latencies),
        "busy_p95_ms": pct(busy_latencies, 0.95),
        "p50_ms": statistics.median(latencies),
        "p95_ms": pct(latencies, 0.95),
        "p99_ms": pct(latencies, 0.99),
    }


def no_match_search(sizes: list[int], synthetic: Synthetic) -> list[dict[str, Any]]:
    """The cost of an answer no tool matched, with its `suggestions` (the tools nearest in
    meaning, gathered from at most SUGGEST_POOL tools): whole-bridge catalogs of about `sizes`
    tools (at most the pool), asked made-up words no tool has."""
    import random

    from search_quality import ListedUpstream

    from bridge.catalog import Catalog
    from bridge.config import SurfaceConfig
    from bridge.search.service import ToolSearch
    from bridge.search.suggest import SUGGEST_POOL
    from bridge.store import Store
    from bridge.surface import Surface

    letters = random.Random(7)
    words = [
        " ".join(
            "".join(
                letters.choice("bcdfghjklmnpqrstvwxz") + letters.choice("aeiouy") for _ in range(4)
            )
            for _ in range(2)
        )
        for _ in range(60)
    ]
    rows = []
    for size in sizes:
        listings, left = {}, min(size, SUGGEST_POOL)
        for namespace, tools in synthetic.listings(size * 2).items():
            if left > 0:
                listings[namespace], left = tools[:left], left - len(tools[:left])
        catalog = Catalog(Store())
        for namespace, tools in listings.items():
            catalog.add_upstream(ListedUpstream(namespace, tools))
            catalog.apply_tools(namespace, tools)
        search = ToolSearch(catalog, None, semantic="static")
        surface = Surface(SurfaceConfig(name="default"), catalog)
        search.flush(None)
        assert search.semantic is not None
        search.semantic.flush(None)
        asked = [q for q in words if not search.search(q, surface=surface).matches]
        latencies, suggested = [], []
        for q in asked:
            t0 = time.perf_counter()
            result = search.search(q, surface=surface)
            latencies.append((time.perf_counter() - t0) * 1000)
            suggested.append(len(result.suggestions or ()))
        search.close()
        rows.append(
            {
                "tools": sum(len(tools) for tools in listings.values()),
                "queries": len(asked),
                "suggested": statistics.mean(suggested) if suggested else 0.0,
                "p50_ms": statistics.median(latencies) if latencies else 0.0,
                "p95_ms": pct(latencies, 0.95) if latencies else 0.0,
            }
        )
    return rows


def whole_search_apart(size: int, workdir: str) -> dict[str, Any]:
    """`whole_search` in a child process: its JSON line."""
    done = subprocess.run(
        [sys.executable, __file__, "--whole-size", str(size), "--workdir", workdir],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(
            f"search_scale: the whole-bridge run over {size:,} tools failed:\n{done.stderr[-2000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_size(size: int, synthetic: Synthetic, queries: list[str], workdir: str) -> dict[str, Any]:
    path = os.path.join(workdir, f"index-{size}")
    shutil.rmtree(path, ignore_errors=True)
    index = ToolIndex(path, heap_size=1_000_000_000, threads=2)
    started, cpu_started = time.perf_counter(), time.process_time()
    index.bulk_load(synthetic.tools(0, size))
    build, build_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    for q in queries[:20]:
        search(index, q)  # warm up
    latencies, cpu = timed(index, queries)
    typo, _ = timed(index, misspelled(queries))
    rss = rss_mb()
    sem = semantic_cost(index, synthetic, queries, size)
    # live changes: 1,000 new tools, then the same 1,000 removed, each waited until searchable
    t0 = time.perf_counter()
    index.submit(list(synthetic.tools(size, size + 1000)))
    index.flush(60.0)
    add = time.perf_counter() - t0
    probe = synthetic.tool(size + 999)
    # every tool of its namespace: with the tiny fallback seed list there is only one namespace
    visible = any(
        tid == probe.tool_id
        for tid, _ in index.search(
            index.query(None, namespace=probe.namespace), limit=index.num_docs
        )
    )
    t0 = time.perf_counter()
    index.submit(deletes=[(t.namespace, t.tool_id) for t in synthetic.tools(size, size + 1000)])
    index.flush(60.0)
    remove = time.perf_counter() - t0
    gone = index.num_docs == size
    index.close()
    out = {
        "tools": size,
        "build_s": build,
        "build_cpu_s": build_cpu,
        "disk_mb": folder_mb(path),
        "rss_mb": rss,
        **sem,
        "p50_ms": statistics.median(latencies),
        "p95_ms": pct(latencies, 0.95),
        "p99_ms": pct(latencies, 0.99),
        "cpu_p95_ms": pct(cpu, 0.95),
        "typo_p95_ms": pct(typo, 0.95),
        "add_1000_s": add,
        "remove_1000_s": remove,
        "visible": visible and gone,
    }
    shutil.rmtree(path, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="10000,100000,1000000",
        help="comma-separated sizes of the first table (a million tools takes about 70 s and 1 GB)",
    )
    parser.add_argument(
        "--whole",
        default="10000,100000",
        help="comma-separated sizes of the whole-bridge table (catalog, index, static table and "
        "ToolSearch.search); empty for none; a million tools takes about 10 minutes and 6.7 GB",
    )
    parser.add_argument(
        "--whole-size", type=int, default=None, help=argparse.SUPPRESS
    )  # the child of whole_search_apart
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = seeds()
    synthetic = Synthetic(rows)
    queries = requests(300)
    if args.whole_size is not None:
        print(
            json.dumps(
                whole_search(
                    args.whole_size, synthetic, queries, args.workdir or tempfile.gettempdir()
                )
            )
        )
        return
    cols = [
        "tools",
        "build_s",
        "build_cpu_s",
        "disk_mb",
        "rss_mb",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "cpu_p95_ms",
        "typo_p95_ms",
        "sem_p95_ms",
        "sem_mb",
        "embed_ms_1k",
        "add_1000_s",
        "remove_1000_s",
        "visible",
    ]
    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {len(queries)} real requests as queries; "
        "tools fed to the index directly (no catalog)"
    )
    print(
        "build_cpu_s: CPU of all threads; cpu_p95_ms: the query thread's CPU; rss_mb: process peak so far; "
        "add/remove: 1,000 tools, until searchable; typo_p95_ms: two-word queries with a typing error "
        "(two letters swapped), whose misspelled word is widened to the words one edit away"
    )
    print(
        "sem_*: with the default semantic stage (static table): query p95 with its rerank, its tool vectors' memory; "
        "embed_ms_1k: its CPU to embed 1,000 tools"
    )
    print("".join(f"{c:>14}" for c in cols))
    with tempfile.TemporaryDirectory(prefix="bridge-search-scale-") as workdir:
        for size in sizes:
            row = run_size(size, synthetic, queries, workdir)
            print(cells(row, cols), flush=True)
        whole = [int(s) for s in args.whole.split(",") if s.strip()]
        if whole:
            print()
            print(
                "The whole bridge: the tools listed by their vendors' upstreams into the catalog, the index and the "
                "static table's vectors kept in step with it, ToolSearch.search asked for 10 matches (the rerank, "
                "the gain of an API's tools, the cover of a request's parts, the lookups, folding, the answer's "
                "records); searchable_s / embedded_s / compacted_s: from the listings until every tool is searchable / "
                "embedded / the index is compacted (docs/search.md, Segments and compaction); segments: those a search "
                "read; changes: one upstream lists one more tool, every half second until embedded and compacted; "
                "change_busy_s: the longest of those from the change until a search finds the tool; change_s: the "
                "longest of 5 changes after; rss_mb: the whole process's peak; listings_mb: the part of it that is the "
                "bench's own listings, which the upstreams hold; busy_p50_ms / busy_p95_ms: the requests searched back "
                "to back once searchable, while the bridge embeds and compacts (docs/search.md, Searches while the "
                "bridge is busy); p50_ms ... p99_ms: the same once it is done"
            )
            cols = [
                "tools",
                "upstreams",
                "searchable_s",
                "embedded_s",
                "compacted_s",
                "segments",
                "changes",
                "change_busy_s",
                "change_s",
                "rss_mb",
                "listings_mb",
                "busy_p50_ms",
                "busy_p95_ms",
                "p50_ms",
                "p95_ms",
                "p99_ms",
            ]
            print("".join(f"{c:>14}" for c in cols))
            for size in whole:
                print(cells(whole_search_apart(size, workdir), cols), flush=True)
    print()
    print(
        "Answers no tool matched: the whole bridge asked two made-up words that no tool has, answering no match and "
        "the tools nearest in meaning as suggestions (docs/search.md, The answer); suggested: their mean number"
    )
    cols = ["tools", "queries", "suggested", "p50_ms", "p95_ms"]
    print("".join(f"{c:>14}" for c in cols))
    for row in no_match_search([500, 2_000], synthetic):
        print(cells(row, cols), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def cells(row: dict[str, Any], cols: list[str]) -> str:
    return "".join(
        f"{row[c]:>14.2f}" if isinstance(row[c], float) else f"{row[c]!s:>14}" for c in cols
    )


if __name__ == "__main__":
    main()
