"""Dense candidates at scale: the approximate nearest-neighbour index (bridge.search.ann) over
100,000 to 1,000,000 tools, against the exact product it takes over from past 20,000.

The tools are bench/search_scale.py's synthetic catalog. Their vectors are the static table's
(bridge.search.static, 256 dimensions, a real embedding of each tool's text) mapped to the full
model's 384 by a fixed orthonormal map, which keeps every cosine: the graph sees the model's
dimensions, and the text's structure, without the hour per 100,000 tools the model takes to embed
them. The requests are the development set's first 300, embedded the same way.

Per size it prints: the build of the whole index (seconds, the process's RSS before and after, the
graph's own memory), the nearest 20 of each request as a search draws them (the graph's candidates
scored again by their float vectors) at p50 / p95, how many of the exact 10 nearest they hold, the
exact product's p50 over the same vectors, and the seconds until 1,000 tools added (and 1,000
removed) are drawn: the update of the index once they are embedded.

Run: .venv/bin/python bench/search_dense_scale.py [--sizes 100000,300000] [--threads 1]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import search_scale  # noqa: E402

from bridge.search.ann import AnnIndex  # noqa: E402
from bridge.search.static import load_static  # noqa: E402

DIM = 384
QUERIES = 300


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def embedded(texts: list[str], projection: np.ndarray) -> np.ndarray:
    """The texts' static-table vectors, mapped to DIM dimensions (cosines unchanged)."""
    encoder = load_static()
    assert encoder is not None
    rows = [encoder.encode(texts[i : i + 4096], 128) for i in range(0, len(texts), 4096)]
    out = np.concatenate(rows).astype(np.float32) @ projection.T
    return np.ascontiguousarray(out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9))


def run_size(size: int, synthetic: search_scale.Synthetic, queries: np.ndarray) -> dict[str, float]:
    projection = np.linalg.qr(np.random.default_rng(7).standard_normal((DIM, 256)))[0]
    projection = projection.astype(np.float32)
    tools = [synthetic.tool(i) for i in range(size + 1000)]
    vectors = embedded([f"{t.name} {t.description}" for t in tools], projection)
    ids = [t.tool_id for t in tools]
    del tools
    q = queries @ projection.T
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    ann = AnnIndex(DIM)
    ann.update(ids[:size], vectors[:size], [])
    build = time.perf_counter() - started
    after = rss_mb()
    rows = {tool_id: i for i, tool_id in enumerate(ids)}
    times, agree = [], 0
    for n, query in enumerate(q):
        started = time.perf_counter()
        found = [tool_id for tool_id, _ in ann.nearest(query, 20)]
        scores = vectors[[rows[tool_id] for tool_id in found]] @ query  # as DenseIndex.nearest
        best = [found[i] for i in np.argsort(-scores)[:10]]
        times.append(time.perf_counter() - started)
        if n < 100:
            exact = np.argpartition(-(vectors[:size] @ query), 10)[:10]
            agree += len({ids[i] for i in exact} & set(best))
    exact_times = []
    for query in q[:30]:
        started = time.perf_counter()
        scores = vectors[:size] @ query
        np.argpartition(-scores, 20)[:20]
        exact_times.append(time.perf_counter() - started)
    started = time.perf_counter()
    ann.update(ids[size:], vectors[size:], [])
    added = time.perf_counter() - started
    drawn = sum(ann.nearest(vectors[i], 1)[0][0] == ids[i] for i in range(size, size + 1000))
    started = time.perf_counter()
    ann.update([], vectors[:0], ids[:1000])
    removed = time.perf_counter() - started
    return {
        "tools": size,
        "build s": build,
        "RSS before MB": before,
        "RSS after MB": after,
        "graph MB": ann.memory_bytes / 2**20,
        "p50 ms": 1000 * pct(times, 50),
        "p95 ms": 1000 * pct(times, 95),
        "of exact 10": agree / 1000,
        "exact p50 ms": 1000 * pct(exact_times, 50),
        "1,000 added s": added,
        "added drawn": drawn / 1000,
        "1,000 removed s": removed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,300000", help="catalog sizes, comma-separated")
    parser.add_argument("--data", type=Path, default=search_scale.DATA, help="the development set")
    args = parser.parse_args()
    search_scale.DATA = args.data
    synthetic = search_scale.Synthetic(search_scale.seeds())
    encoder = load_static()
    assert encoder is not None
    requests = [
        json.loads(line)["query"]
        for line in (search_scale.DATA / "queries-dev.jsonl").read_text().splitlines()[:QUERIES]
    ]
    queries = encoder.encode(requests, 128).astype(np.float32)
    cols = None
    for size in (int(s) for s in args.sizes.split(",")):
        row = run_size(size, synthetic, queries)
        if cols is None:
            cols = list(row)
            print("".join(f"{c:>16}" for c in cols))
        print("".join(f"{row[c]:>16,.2f}" for c in cols), flush=True)
        gc.collect()


if __name__ == "__main__":
    main()
