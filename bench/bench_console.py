"""The designers' console at 100,000 tools: time to the first answer of the catalog page and of a
search at the server (an HTTP round trip on loopback, first and repeated), and time to the page
drawn in headless Chromium (from navigation, and for a search typed on the page). Needs Debian's
chromium and chromium-driver for the browser part; prints a table."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_catalog import synthetic_tools
from tests.browser import find_chromium, headless_chromium
from tests.fakes import FakeConfig, FakeUpstream
from tests.serve.console_env import ThreadedBridge

TOKEN = "bench-console-token"
QUERY = "export the invoices of a customer"


def upstreams(n: int, count: int) -> list[FakeUpstream]:
    tools = synthetic_tools(n, count, destructive_deletes=True)
    # a loaded machine may take more than the default 20 s to declare 10,000 tools of one upstream
    return [
        FakeUpstream(FakeConfig(name=name, start_timeout=900), tools=listed)
        for name, listed in tools.items()
    ]


def timed_get(base: str, path: str) -> float:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {TOKEN}"})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
    return (time.perf_counter() - began) * 1000


def server_rows(base: str) -> list[tuple[str, str]]:
    q = urllib.parse.quote(QUERY)
    cases = [
        ("catalog, first page", "/ui/api/catalog?limit=50"),
        ("catalog, page at offset 50,000", "/ui/api/catalog?limit=50&offset=50000"),
        (
            "catalog, read-only + destructive=false filter",
            "/ui/api/catalog?read_only=true&destructive=false",
        ),
        ("catalog, one upstream and a tag", "/ui/api/catalog?upstream=vendor3&tag=invoice"),
        ("search (same engine as /search)", f"/ui/api/catalog?q={q}"),
        ("session (counts and filters' values)", "/ui/api/session"),
        ("a tool's page", "/ui/api/tools/vendor6__export_invoice_16"),
    ]
    rows = []
    for label, path in cases:
        first = timed_get(base, path)
        again = statistics.median(timed_get(base, path) for _ in range(5))
        rows.append((label, f"{first:8.1f} ms first, {again:7.1f} ms after"))
    return rows


def browser_rows(base: str) -> list[tuple[str, str]]:
    if find_chromium() is None:
        return [("browser", "skipped: no chromium and chromedriver")]
    driver = headless_chromium()
    try:
        driver.get(f"{base}/ui#/upstreams")
        driver.execute_script(
            "sessionStorage.setItem('a2t-bridge-console-token', arguments[0])", TOKEN
        )

        def mark() -> Any:
            return driver.execute_script(
                "const m = performance.getEntriesByName('catalog-rendered'); "
                "return m.length ? m[m.length - 1].startTime : null"
            )

        def until_mark() -> float:
            deadline = time.monotonic() + 60
            while (found := mark()) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("the catalog page was not drawn within 60 s")
                time.sleep(0.01)
            return float(found)

        loads, searches = [], []
        for _ in range(3):
            driver.get("about:blank")
            driver.get(f"{base}/ui#/catalog")
            loads.append(until_mark())  # ms from the navigation's start
            driver.execute_script(
                "performance.clearMarks(); window.__began = performance.now(); "
                "location.hash = '#/catalog?q=' + encodeURIComponent(arguments[0]);",
                QUERY,
            )
            drawn = until_mark()
            searches.append(drawn - driver.execute_script("return window.__began"))
        return [
            (
                "browser: catalog page, navigation to drawn",
                f"{statistics.median(loads):8.1f} ms (median of 3)",
            ),
            (
                "browser: search typed on the page to drawn",
                f"{statistics.median(searches):8.1f} ms (median of 3)",
            ),
        ]
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=100_000)
    parser.add_argument("--upstreams", type=int, default=10)
    parser.add_argument(
        "--semantic",
        default="auto",
        help="search.semantic: auto (the default) embeds the tools in the background after the "
        "start, which competes for the CPU with the first requests; off leaves it out",
    )
    args = parser.parse_args()
    config = {
        "store": {"path": ":memory:"},
        "server": {"tokens": [{"token": TOKEN}]},
        "surfaces": [{"name": "default", "defer": ["*"]}],
        "search": {"semantic": args.semantic},
    }
    began = time.perf_counter()
    with ThreadedBridge(
        config, upstreams(args.tools, args.upstreams), start_timeout=900, settle_gc=True
    ) as served:
        listed = len(served.bridge.catalog) if served.bridge is not None else 0
        if listed != args.tools:
            raise SystemExit(f"the catalog holds {listed:,} tools, not {args.tools:,}")
        rows = [
            ("tools", f"{args.tools:,} from {args.upstreams} upstreams"),
            ("bridge started and indexed", f"{time.perf_counter() - began:8.1f} s"),
        ]
        rows += server_rows(served.base)
        rows += browser_rows(served.base)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")


if __name__ == "__main__":
    main()
