"""Search at 100,000 to 1,000,000 tools, on the default path and with dense candidates, one row a
size side by side.

The tools are bench/search_scale.py's synthetic catalog; the requests the development set's first
300.

*Default path* (`semantic: auto` without the `semantic` extra: keywords and the static table's
rerank), in a process of its own per size: the whole bridge (catalog, store, on-disk index, the
static table's vectors) fed every tool by its vendors' upstreams, `ToolSearch.search` asked for
10 matches. It prints the seconds until every tool is searchable and embedded, the process's
peak RSS, p50 / p95 of the requests once settled, and the seconds until 1,000 tools listed by a
new upstream are all found, and until they are found no more once it lists none.

*Dense candidates*: the approximate nearest-neighbour index (bridge.search.ann) alone, as the full
model's dense candidates draw from it. Its vectors are synthetic: the static table's (256
dimensions, a real embedding of each tool's text) mapped to the full model's 384 by a fixed
orthonormal map, which keeps every cosine, so the graph sees the model's dimensions and the text's
structure without the hour per 100,000 tools the model takes to embed them. It prints the build of
the whole index (wall and CPU seconds, the RSS it adds, a search's p95 while it builds), the
nearest 20 of each request as a search draws them (scored again by their float vectors) at p50 /
p95, how many of the exact 10 nearest they hold, the exact product's p50, and the seconds until
1,000 tools added (and 1,000 removed) are drawn, counted from their vectors' arrival.

Run: .venv/bin/python bench/search_dense_scale.py [--sizes 100000,300000,1000000]
     [--parts default,dense] [--cache DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _procs  # noqa: E402
import search_scale  # noqa: E402

from bridge.search.ann import THREADS, AnnIndex  # noqa: E402
from bridge.search.static import load_static  # noqa: E402

DIM = 384
QUERIES = 300
CHANGED = 1000  # tools added, then removed


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def requests() -> list[str]:
    return search_scale.requests(QUERIES)


# ------------------------------------------------------------------ dense candidates


def projection() -> np.ndarray:
    """A fixed orthonormal map from the static table's 256 dimensions to the model's 384."""
    rng = np.random.default_rng(7)
    return np.linalg.qr(rng.standard_normal((DIM, 256)))[0].astype(np.float32)


def embedded(texts: list[str]) -> np.ndarray:
    """The texts' static-table vectors, mapped to DIM dimensions (cosines unchanged)."""
    encoder = load_static()
    assert encoder is not None
    rows = [encoder.encode(texts[i : i + 4096], 128) for i in range(0, len(texts), 4096)]
    out = np.concatenate(rows).astype(np.float32) @ projection().T
    return np.ascontiguousarray(out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9))


def tool_vectors(
    count: int, synthetic: search_scale.Synthetic, cache: Path | None
) -> tuple[list[str], np.ndarray]:
    """The first `count` synthetic tools' ids and vectors; with `cache`, kept there (a million
    take minutes to embed) and a longer kept list's first rows used."""
    ids = [synthetic.tool_id(i) for i in range(count)]
    if cache is not None:
        for kept in sorted(cache.glob("vectors-*.npy")):
            if int(kept.stem.split("-")[1]) >= count:
                return ids, np.load(kept, mmap_mode="r")[:count].copy()
    tools = (synthetic.tool(i) for i in range(count))
    vectors = embedded([f"{t.name} {t.description}" for t in tools])
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        np.save(cache / f"vectors-{count}.npy", vectors)
    return ids, vectors


def dense_row(size: int, synthetic: search_scale.Synthetic, cache: Path | None) -> dict[str, Any]:
    ids, vectors = tool_vectors(size + CHANGED, synthetic, cache)
    encoder = load_static()
    assert encoder is not None
    q = encoder.encode(requests(), 128).astype(np.float32) @ projection().T
    gc.collect()
    before = search_scale.resident_mb()
    ann = AnnIndex(DIM)
    during: list[float] = []
    built = threading.Event()

    def searching() -> None:  # a search every 50 ms while the graph is built
        n = 0
        while not built.wait(0.05):
            started = time.perf_counter()
            ann.nearest(q[n % len(q)], 20)
            during.append(time.perf_counter() - started)
            n += 1

    searcher = threading.Thread(target=searching)
    searcher.start()
    started, cpu = time.perf_counter(), time.process_time()
    ann.update(ids[:size], vectors[:size], [])
    build, build_cpu = time.perf_counter() - started, time.process_time() - cpu
    built.set()
    searcher.join()
    after = search_scale.resident_mb()
    rows = {tool_id: i for i, tool_id in enumerate(ids)}
    times, cpu_times, agree = [], [], 0
    for n, query in enumerate(q):
        started, cpu = time.perf_counter(), time.thread_time()
        found = [tool_id for tool_id, _ in ann.nearest(query, 20)]
        scores = vectors[[rows[tool_id] for tool_id in found]] @ query  # as DenseIndex.nearest
        best = [found[i] for i in np.argsort(-scores)[:10]]
        times.append(time.perf_counter() - started)
        cpu_times.append(time.thread_time() - cpu)
        if n < 100:
            exact = np.argpartition(-(vectors[:size] @ query), 10)[:10]
            agree += len({ids[i] for i in exact} & set(best))
    exact_times = []
    for query in q[:30]:
        started = time.perf_counter()
        np.argpartition(-(vectors[:size] @ query), 20)[:20]
        exact_times.append(time.perf_counter() - started)
    started, cpu = time.perf_counter(), time.process_time()
    ann.update(ids[size:], vectors[size:], [])
    added, added_cpu = time.perf_counter() - started, time.process_time() - cpu
    drawn = sum(ann.nearest(vectors[i], 1)[0][0] == ids[i] for i in range(size, size + CHANGED))
    started = time.perf_counter()
    ann.update([], vectors[:0], ids[:CHANGED])
    removed = time.perf_counter() - started
    gone = set(ids[:CHANGED])
    assert not any(t in gone for query in q[:50] for t, _ in ann.nearest(query, 20))
    return {
        "ann build s": build,
        "ann build CPU s": build_cpu,
        "ann RSS + MB": after - before,
        "graph MB": ann.memory_bytes / 2**20,
        "ann p95 building ms": 1000 * pct(during, 95) if during else 0.0,
        "ann p50 ms": 1000 * pct(times, 50),
        "ann p95 ms": 1000 * pct(times, 95),
        "ann CPU p95 ms": 1000 * pct(cpu_times, 95),
        "of exact 10": agree / 1000,
        "exact p50 ms": 1000 * pct(exact_times, 50),
        "ann +1,000 s": added,
        "ann +1,000 CPU s": added_cpu,
        "drawn": drawn / CHANGED,
        "ann -1,000 s": removed,
    }


# ------------------------------------------------------------------ the default path


def default_row(size: int, workdir: str) -> dict[str, Any]:
    """The whole bridge over `size` tools with the static table (`semantic: auto` without the
    extra), in this process (run apart: its memory is its own)."""
    from search_quality import ListedUpstream

    from bridge.catalog import Catalog
    from bridge.config import SurfaceConfig
    from bridge.model import UpstreamTool
    from bridge.runtime import collector_held, settle_gc
    from bridge.search.service import ToolSearch
    from bridge.store import Store
    from bridge.surface import Surface

    synthetic = search_scale.Synthetic(search_scale.seeds())
    listings = synthetic.listings(size)
    catalog = Catalog(Store(os.path.join(workdir, "bridge.db")))
    for namespace, tools in listings.items():
        catalog.add_upstream(ListedUpstream(namespace, tools))
    fresh = [
        UpstreamTool(
            native_id=f"fresh_{k}",
            name=f"fresh_{k}",
            description=f"Reconcile the zqx{k}marker ledger of a workspace.",
            input_schema={"type": "object", "properties": {}},
        )
        for k in range(CHANGED)
    ]
    catalog.add_upstream(ListedUpstream("fresh", []))
    search = ToolSearch(catalog, os.path.join(workdir, "index"), semantic="static")
    surface = Surface(SurfaceConfig(name="default"), catalog)
    started = time.perf_counter()
    with collector_held():  # as Bridge.start holds it while the upstreams first list
        for namespace, tools in listings.items():
            catalog.apply_tools(namespace, tools)
    settle_gc(collected=True)  # as `bridge serve` does once started
    search.flush(None)
    searchable = time.perf_counter() - started
    assert search.semantic is not None
    search.semantic.flush(None)
    embedded_s = time.perf_counter() - started
    search.index.compacted(None)
    queries = requests()
    for q in queries:  # a first pass: caches warm, merges done
        search.search(q, surface=surface, limit=10)
    latencies, cpu = [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        search.search(q, surface=surface, limit=10)
        latencies.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)

    def found(k: int) -> bool:
        return bool(search.search(f"zqx{k}marker", surface=surface, limit=1).matches)

    probes = range(0, CHANGED, 97)  # 11 of the 1,000, the last listed among them
    t0 = time.perf_counter()
    catalog.apply_tools("fresh", fresh)
    while not all(found(k) for k in [*probes, CHANGED - 1]):
        time.sleep(0.005)
    added = time.perf_counter() - t0
    t0 = time.perf_counter()
    catalog.apply_tools("fresh", [])
    while any(found(k) for k in [*probes, CHANGED - 1]):
        time.sleep(0.005)
    removed = time.perf_counter() - t0
    search.close()
    catalog.store.close()
    return {
        "searchable s": searchable,
        "embedded s": embedded_s,
        "peak RSS MB": search_scale.rss_mb(),
        "p50 ms": float(np.percentile(latencies, 50)),
        "p95 ms": float(np.percentile(latencies, 95)),
        "CPU p95 ms": float(np.percentile(cpu, 95)),
        "+1,000 s": added,
        "-1,000 s": removed,
    }


def default_row_apart(size: int) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix=f"bridge-dense-scale-{size}-")
    try:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                *("--default-size", str(size), "--workdir", workdir),
                *("--data", str(search_scale.DATA)),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if done.returncode != 0:
        sys.exit(f"the default path over {size:,} tools failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="100000,300000,1000000",
        help="catalog sizes, comma-separated (a million takes about 10 minutes and 7 GB on the "
        "default path, and a quarter hour of CPU and 3.5 GB with dense candidates)",
    )
    parser.add_argument("--parts", default="default,dense", help="default, dense or both")
    parser.add_argument("--data", type=Path, default=search_scale.DATA, help="the development set")
    parser.add_argument("--cache", type=Path, default=None, help="keep the tools' vectors here")
    parser.add_argument("--default-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    search_scale.DATA = args.data
    if args.default_size is not None:  # the child of default_row_apart
        print(json.dumps(default_row(args.default_size, args.workdir)))
        return
    parts = set(args.parts.split(","))
    synthetic = search_scale.Synthetic(search_scale.seeds())
    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, niceness "
        f"{os.nice(0)}; the approximate index adds with {THREADS} threads",
        flush=True,
    )
    table: list[dict[str, Any]] = []
    for size in (int(s) for s in args.sizes.split(",")):
        row: dict[str, Any] = {"tools": size}
        if "default" in parts:
            row.update(default_row_apart(size))
            print(json.dumps(row), flush=True)
        if "dense" in parts:
            row.update(dense_row(size, synthetic, args.cache))
            print(json.dumps(row), flush=True)
        row["load"] = os.getloadavg()[0]
        table.append(row)
        gc.collect()
    cols = list(table[0])
    print(_procs.table([[_cell(row[c]) for c in cols] for row in table], cols))


def _cell(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


if __name__ == "__main__":
    main()
