"""The public GitHub REST API description (npm package @octokit/openapi, about 1,200 operations)
through the OpenAPI upstream: time to load and map every operation, the catalog merge on top,
RSS, and the cost per call of validating arguments and building the request. Prints a table.

Run: .venv/bin/python bench/bench_openapi_github.py [--sample 300] [--full-validation]
The document is downloaded once with `npm pack` into bench/.cache/; without npm or network the
benchmark prints a SKIP line and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.openapi import OpenAPIConfig, OpenAPIUpstream  # noqa: E402
from adapters.openapi_params import build_request  # noqa: E402
from bridge.catalog import Catalog  # noqa: E402
from bridge.invoke import SchemaValidators  # noqa: E402
from bridge.store import Store  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _npm import GITHUB_DOCUMENT, GITHUB_MEMBER, GITHUB_PACKAGE, npm_files  # noqa: E402


def fetch_document() -> Path | None:
    """The cached description, or a fresh one from `npm pack @octokit/openapi`."""
    return GITHUB_DOCUMENT if npm_files(GITHUB_PACKAGE, {GITHUB_MEMBER: GITHUB_DOCUMENT}, "bench_openapi_github") else None


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
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("oneOf", "anyOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return sample_value(schema[key][0], depth + 1)
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
        return {k: sample_value(props.get(k), depth + 1) for k in schema.get("required") or [] if k in props}
    return "x"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(path: Path, sample: int, full_validation: bool) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    gc.collect()
    rss_before = rss_mb()
    config = OpenAPIConfig(name="github", spec=str(path), start_timeout=120, validate_spec="auto")
    upstream = OpenAPIUpstream(config)
    started = time.perf_counter()
    await upstream.start()
    tools = await upstream.list_tools()
    load_map = time.perf_counter() - started
    rows.append(("load + map (read, parse, resolve $refs, map)", f"{load_map:.2f} s", f"{len(tools)} operations -> tools"))
    rows.append(("RSS after load + map", f"{rss_mb():.0f} MB", f"{rss_mb() - rss_before:+.0f} MB over imports"))

    catalog = Catalog(Store())
    catalog.add_upstream(upstream)
    started = time.perf_counter()
    catalog.apply_tools("github", tools)
    merge = time.perf_counter() - started
    rows.append(("catalog merge (names, ids, versions, store)", f"{merge:.2f} s", f"{len(catalog)} declarations"))
    rows.append(("load + map + merge", f"{load_map + merge:.2f} s", "aim: < 5 s"))
    rows.append(("peak RSS", f"{peak_mb():.0f} MB", "aim: < 500 MB"))

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
    rows.append(("validate arguments, first call (compile)", f"{statistics.median(cold) * 1e6:.0f} us p50",
                 f"p95 {percentile(cold, 0.95) * 1e6:.0f} us over {len(chosen)} operations"))
    rows.append(("validate arguments, cached validator", f"{statistics.median(warm) * 1e6:.0f} us p50",
                 f"p95 {percentile(warm, 0.95) * 1e6:.0f} us, {invalid // 5} samples rejected"))

    build: list[float] = []
    for decl, args in zip(chosen, arguments, strict=True):
        op = upstream.operation(decl.native_id)
        assert op is not None
        t = time.perf_counter()
        build_request(op, {k: v for k, v in args.items()} if isinstance(args, dict) else {})
        build.append(time.perf_counter() - t)
    rows.append(("build HTTP request (styles, body)", f"{statistics.median(build) * 1e6:.0f} us p50",
                 f"p95 {percentile(build, 0.95) * 1e6:.0f} us"))
    await catalog.close()

    if full_validation:
        full = OpenAPIUpstream(OpenAPIConfig(name="github_full", spec=str(path), start_timeout=600, validate_spec="full"))
        started = time.perf_counter()
        await full.start()
        rows.append(("load + map with validate_spec: full", f"{time.perf_counter() - started:.1f} s",
                     "openapi-spec-validator over the whole document"))
        await full.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300, help="operations sampled for the per-call costs")
    parser.add_argument("--full-validation", action="store_true", help="also time validate_spec: full (slow)")
    args = parser.parse_args()
    path = fetch_document()
    if path is None:
        return 0
    rows = asyncio.run(run(path, args.sample, args.full_validation))
    print(f"GitHub REST API description ({path.stat().st_size / 1e6:.1f} MB JSON) through the OpenAPI upstream")
    widths = [max(len(r[i]) for r in [("STEP", "RESULT", "NOTE"), *rows]) for i in range(3)]
    for row in [("STEP", "RESULT", "NOTE"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
