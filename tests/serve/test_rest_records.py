"""Agent Tool records over REST (search, surfaces, declarations, invoke, persisted results), the
probes, and the OpenAPI document that describes every route."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from openapi_spec_validator import validate
from starlette.routing import Route

from bridge.config import parse_config
from bridge.model import UpstreamResult
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app, rest_routes
from bridge.serve.openapi_doc import openapi_document
from bridge.store import WAL_KEPT_BYTES
from tests.fakes import FakeConfig, FakeUpstream, tool
from tests.search.support import FullDisk
from tests.serve.rest_env import TOKEN_ALL, TOKEN_NARROW, config_with, narrow_surfaces, serving
from tests.servers import serve_asgi, until


def catalog() -> FakeUpstream:
    return FakeUpstream(
        name="docs",
        tools=[
            tool("search_documents", description="Full text search over documents", read_only=True),
            tool("delete_document", description="Delete a document", destructive=True),
            tool("secret_keys", description="List secret keys"),
        ],
    )


async def test_search_keyword_select_and_filters():
    async with serving(
        catalog(), FakeUpstream(name="other", tools=[tool("documents_count")])
    ) as served:
        status, body, _ = await served.get("/search", q="search documents")
        assert status == 200 and body["query_type"] == "keyword"
        assert body["matches"][0]["name"] == "docs__search_documents"
        _, body, _ = await served.get("/search", q="documents", namespace="other")
        assert [m["name"] for m in body["matches"]] == ["other__documents_count"]
        _, body, _ = await served.get(
            "/search", q="select:docs__delete_document,nope", include_schema="true"
        )
        assert body["query_type"] == "select" and body["missing_names"] == ["nope"]
        assert body["matches"][0]["input_schema"]["type"] == "object"
        for params in (
            {},
            {"q": " "},
            {"q": "x", "limit": "many"},
            {"q": "x", "read_only": "maybe"},
        ):
            status, body, _ = await served.get("/search", **params)
            assert status == 400 and body["error"]["error_class"] == "invalid_arguments"
        # a filter alone lists the tools that pass it
        status, body, _ = await served.get("/search", namespace="docs")
        assert status == 200 and {m["name"] for m in body["matches"]} == {
            "docs__search_documents",
            "docs__delete_document",
            "docs__secret_keys",
        }
        _, body, _ = await served.get("/search", q="", read_only="true")
        assert [m["name"] for m in body["matches"]] == ["docs__search_documents"]


async def test_search_nothing_matched_answers_suggestions_by_meaning():
    async with serving(catalog(), config=config_with(search={"semantic": "static"})) as served:
        status, body, _ = await served.get("/search", q="erase that memo")
        assert status == 200 and body["matches"] == [] and body["next_action"] == "refine_query"
        assert [s["name"] for s in body["suggestions"]] == [
            "docs__delete_document"
        ] and "suggestions" in body["hint"]
        _, body, _ = await served.get("/search", q="documents")
        assert "suggestions" not in body


async def test_search_refuses_unknown_repeated_and_malformed_parameters():
    from bridge.search.analysis import MAX_QUERY_CHARS

    async with serving(catalog()) as served:
        for path, parameter in (
            (
                "/search?q=documents&readonly=true",
                "readonly",
            ),  # misspelt: would silently drop the filter
            ("/search?q=documents&namespace=docs&namespace=other", "namespace"),
            ("/search?q=a&q=b", "q"),
            ("/search?q=documents&limit=1_0", "limit"),
            ("/search?q=documents&limit=%2B4", "limit"),
            ("/search?q=documents&limit=%20 2", "limit"),
            ("/search?q=documents&limit=%D9%A3", "limit"),
            ("/search?q=documents&limit=" + "9" * 5000, "limit"),
            ("/search?q=" + "w" * (MAX_QUERY_CHARS + 1), "q"),
        ):
            status, body, _ = await served.get(path)
            assert status == 400 and body["error"]["error_class"] == "invalid_arguments", path
            assert (
                body["error"]["details"]["parameter"] == parameter
                and len(body["error"]["message"]) < 300
            ), path
        # tags may repeat; a limit past the maximum is clamped; the longest query taken is searched
        status, body, _ = await served.get("/search?q=documents&tags=a&tag=b&limit=" + "9" * 40)
        assert status == 200 and body["matches"] == []
        status, body, _ = await served.get("/search?limit=-3&q=documents")
        assert status == 400 and "at least 1" in body["error"]["message"]
        status, body, _ = await served.get(
            "/search", q=("search documents " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS]
        )
        assert status == 200 and body["matches"][0]["name"] == "docs__search_documents"


async def test_surfaces_and_declarations_respect_the_callers_surface():
    async with serving(catalog(), config=config_with(**narrow_surfaces())) as served:
        status, body, _ = await served.get("/surfaces/narrow", token=TOKEN_NARROW)
        assert status == 200 and body["surface_id"] == "narrow"
        # the surface's own rule hides it: neither listed nor counted
        assert body["blocked_tools"] == [] and "docs__secret_keys" not in str(body)
        status, body, _ = await served.get("/surfaces/default", token=TOKEN_NARROW)
        assert status == 404  # another token's surface
        status, decl, _ = await served.get(
            f"/declarations/{served.tool_id('docs__search_documents')}", token=TOKEN_NARROW
        )
        assert (
            status == 200
            and decl["namespace"] == "docs"
            and decl["input_contract"]["model_input_schema"]["type"] == "object"
        )
        assert decl["safety"]["read_only"] is True and decl["schema_version"] == "0.2.0"
        hidden = await served.get(
            f"/declarations/{served.tool_id('docs__secret_keys')}", token=TOKEN_NARROW
        )
        assert hidden[0] == 404 and hidden[1]["error"]["error_class"] == "unknown_tool"
        assert (
            await served.get(
                f"/declarations/{served.tool_id('docs__secret_keys')}", token=TOKEN_ALL
            )
        )[0] == 200


async def test_invoke_record_answers_the_envelope_with_the_status_of_its_error_class():
    up = catalog()
    async with serving(up, config=config_with(**narrow_surfaces())) as served:
        status, body, _ = await served.post(
            "/invoke",
            {"tool": "docs__search_documents", "arguments": {"text": "q"}},
            token=TOKEN_ALL,
        )
        assert status == 200 and body["status"] == "succeeded" and body["content"][0]["text"] == "q"
        status, body, _ = await served.post(
            "/invoke",
            {"tool": "docs__search_documents", "arguments": {}, "version": 1},
            token=TOKEN_ALL,
        )
        assert status == 200 and body["version"] == 1
        status, body, _ = await served.post(
            "/invoke", {"tool": "docs__delete_document", "arguments": {}}, token=TOKEN_ALL
        )
        assert (
            status == 403
            and body["error"]["error_class"] == "permission_denied"
            and body["is_error"] is True
        )
        blocked = await served.post(
            "/invoke", {"tool": "docs__secret_keys", "arguments": {}}, token=TOKEN_NARROW
        )
        missing = await served.post(
            "/invoke", {"tool": "docs__no_such", "arguments": {}}, token=TOKEN_NARROW
        )
        assert missing[0] == 404 and missing[1]["error"]["error_class"] == "unknown_tool"
        # a tool a rule of the caller's surface blocks: answered as a missing one
        message = missing[1]["error"]["message"].replace("docs__no_such", "docs__secret_keys")
        assert blocked[0] == 404
        assert blocked[1]["error"] == {**missing[1]["error"], "message": message}
        # a misspelt key would run the tool with no arguments: refused, naming it
        for body, pointer in (
            ({"arguments": {}}, "/tool"),
            ({"tool": "x", "arguments": []}, "/arguments"),
            ({"tool": "x", "version": 0}, "/version"),
            ({"tool": "docs__search_documents", "argumnets": {"text": "q"}}, "/argumnets"),
        ):
            status, answer, _ = await served.post("/invoke", body, token=TOKEN_ALL)
            assert status == 400 and answer["error"]["details"]["pointer"] == pointer


async def test_large_results_are_persisted_and_served_back():
    config = config_with(invoke={"inline_result_limit": 256, "preview_chars": 10})
    async with serving(FakeUpstream(name="big"), config=config) as served:
        status, body, _ = await served.post(
            "/invoke", {"tool": "big__echo", "arguments": {"text": "y" * 5000}}
        )
        assert status == 200 and body["persisted"]["persisted_ref"]["uri"].startswith(
            "bridge://results/"
        )
        ref = body["persisted"]["persisted_ref"]["ref"]
        status, payload, response = await served.get(f"/results/{ref}")
        assert status == 200 and response.content_type == "application/json"
        assert payload["content"][0]["text"] == "y" * 5000
        status, body, _ = await served.get("/results/blob_missing")
        assert status == 404 and body["error"]["error_code"] == "result_not_found"


async def test_a_persisted_result_is_read_only_through_the_surface_that_made_it_and_the_oldest_go():
    config = config_with(
        invoke={"inline_result_limit": 256, "preview_chars": 10, "results_keep": 10},
        **narrow_surfaces(),
    )
    async with serving(FakeUpstream(name="big"), config=config) as served:
        refs = []
        for i in range(25):
            status, body, _ = await served.post(
                "/invoke",
                {"tool": "big__echo", "arguments": {"text": f"{i}" * 5000}},
                token=TOKEN_ALL,
            )
            assert status == 200
            refs.append(body["persisted"]["persisted_ref"]["ref"])
        status, payload, _ = await served.get(f"/results/{refs[-1]}", token=TOKEN_ALL)
        assert status == 200 and payload["content"][0]["text"] == "24" * 5000
        # another token's surface reads it as no result at all
        status, body, _ = await served.get(f"/results/{refs[-1]}", token=TOKEN_NARROW)
        assert status == 404 and body["error"]["error_code"] == "result_not_found"
        # about results_keep of the latest are kept
        kept = [
            ref for ref in refs if (await served.get(f"/results/{ref}", token=TOKEN_ALL))[0] == 200
        ]
        assert refs[-10:] == kept[-10:] and 10 <= len(kept) <= 20 and refs[0] not in kept


async def test_dropping_the_oldest_results_leaves_the_store_its_size(tmp_path):
    """The oldest persisted results go in one transaction, which SQLite built to overwrite what is
    deleted writes to the write-ahead log whole; the log is then cut back, not kept that large."""
    store = tmp_path / "bridge.db"
    config = config_with(
        store={"path": str(store)},
        search={"persist": False},
        invoke={"inline_result_limit": 256, "preview_chars": 10, "results_keep": 10},
    )
    big = FakeUpstream(name="big")
    big.result = UpstreamResult(content=[{"type": "text", "text": "y" * 4_000_000}])
    async with serving(big, config=config) as served:
        for _ in range(25):  # the 21st drops 11 results, 44 MB
            status, body, _ = await served.post("/invoke", {"tool": "big__echo"})
            assert status == 200 and body["persisted"] is not None
        wal = store.with_name(store.name + "-wal")
        assert wal.stat().st_size <= WAL_KEPT_BYTES
        status, payload, _ = await served.get(
            f"/results/{body['persisted']['persisted_ref']['ref']}"
        )
        assert status == 200 and payload["content"][0]["text"] == "y" * 4_000_000


async def test_persisted_results_are_kept_within_results_keep_mb_written_off_the_event_loop():
    config = config_with(
        invoke={"inline_result_limit": 256, "preview_chars": 10, "results_keep_mb": 1}
    )
    big = FakeUpstream(name="big")
    async with serving(big, config=config) as served:
        store = served.bridge.store
        writers: list[int] = []
        put = store.put_result

        def recorded(*args, **kwargs):
            writers.append(threading.get_ident())
            return put(*args, **kwargs)

        store.put_result = recorded
        refs = []
        for i in range(15):  # 15 results of 200 KB: 3 MB, past 1 MB
            status, body, _ = await served.post(
                "/invoke", {"tool": "big__echo", "arguments": {"text": f"{i % 10}" * 200_000}}
            )
            assert status == 200
            refs.append(body["persisted"]["persisted_ref"]["ref"])
        kept = [ref for ref in refs if (await served.get(f"/results/{ref}"))[0] == 200]
        sizes = dict(store._db.execute("SELECT ref, size FROM results").fetchall())
        assert kept == refs[-len(kept) :] and 2 <= len(kept) < 15  # the latest, about 1 MB of them
        assert (1 << 20) - sizes[kept[0]] < sum(sizes.values()) <= (1 << 20) * 11 // 10
        big.result = UpstreamResult(
            content=[{"type": "text", "text": "z" * 3_000_000}]
        )  # one result past the cap itself
        status, body, _ = await served.post("/invoke", {"tool": "big__echo"})
        status, payload, _ = await served.get(
            f"/results/{body['persisted']['persisted_ref']['ref']}"
        )
        assert (
            status == 200 and payload["content"][0]["text"] == "z" * 3_000_000
        )  # the newest is always kept
        assert (
            writers and threading.get_ident() not in writers
        )  # written on a worker thread, not the loop's


async def test_health_and_readiness():
    broken = FakeUpstream(
        FakeConfig(name="down", fail_start="connection refused", retry_initial=30)
    )
    async with serving(broken) as served:
        status, body, _ = await served.get("/healthz")
        assert status == 200 and body == {"status": "ok"}
        status, body, _ = await served.get("/readyz")
        assert status == 503 and body["ready"] is False
        assert body["upstreams"] == [
            {
                "name": "down",
                "kind": "fake",
                "state": "failed",
                "tool_count": 0,
                "reason": "connection refused",
            }
        ]
    async with serving(
        catalog(),
        broken.__class__(FakeConfig(name="down", fail_start="refused", retry_initial=30)),
        config=config_with(**narrow_surfaces()),
    ) as served:
        # probes need no token; counts and reasons only for a caller with one
        status, body, _ = await served.get("/readyz")
        assert status == 200 and body["ready"] is True and "tools" not in body
        assert all(set(u) == {"name", "kind", "state"} for u in body["upstreams"])
        _, body, _ = await served.get("/readyz", token=TOKEN_ALL)
        assert any(u.get("reason") == "refused" for u in body["upstreams"]) and body["tools"] == 3
        assert (await served.get("/healthz"))[0] == 200


@contextlib.asynccontextmanager
async def served_unindexed(
    *upstreams: FakeUpstream,
    disk_full: bool = False,
) -> AsyncIterator[tuple[Bridge, aiohttp.ClientSession, threading.Event]]:
    """A bridge started over `upstreams` and served, its search index taking in no tool until
    the event given is set; with `disk_full`, its commits failing while its writer's `failing`."""
    bridge = Bridge(parse_config(config_with()), extra_upstreams=list(upstreams))
    if disk_full:
        bridge.search.index._writer = FullDisk(bridge.search.index._writer)
        bridge.search.index._writer.failing = True
        bridge.search.index.retry_first = bridge.search.index.retry_last = 0.05
    let_go = threading.Event()
    convert = bridge.search.index.convert
    assert convert is not None

    def held(decl: Any) -> Any:  # on the index's writer thread
        let_go.wait(30)
        return convert(decl)

    bridge.search.index.convert = held
    await bridge.start()
    app = build_app(bridge)
    try:
        async with serve_asgi(app) as base, aiohttp.ClientSession(base_url=base) as http:
            yield bridge, http, let_go
    finally:
        let_go.set()
        await close_app(app)
        await bridge.close()


async def test_readiness_waits_for_the_search_index_to_take_in_what_the_start_listed():
    # a 5,596-tool federation answered 200 while a search still missed most of its last
    # upstreams' tools: the start had ended, the index had not taken them in
    async def get(http: aiohttp.ClientSession, path: str, **params: str) -> tuple[int, Any]:
        async with http.get(path, params=params) as response:
            return response.status, await response.json()

    async with served_unindexed(catalog()) as (bridge, http, let_go):
        status, body = await get(http, "/readyz")
        assert status == 503 and body["ready"] is False and body["starting"] == [], body
        assert body["search"] == "indexing"
        found = (await get(http, "/search", q="search documents"))[1]
        assert found["matches"] == []  # what it waits for
        let_go.set()
        assert await bridge.wait_indexed() == "ready"
        status, body = await get(http, "/readyz")
        assert status == 200 and body["ready"] is True and body["search"] == "ready", body
        found = (await get(http, "/search", q="search documents"))[1]
        assert found["matches"][0]["name"] == "docs__search_documents"
    # an index whose commits fail (a full disk) does not hold readiness: it says so
    async with served_unindexed(catalog(), disk_full=True) as (bridge, http, let_go):
        disk = bridge.search.index._writer
        let_go.set()
        assert await bridge.wait_indexed() == "failing"
        status, body = await get(http, "/readyz")
        assert status == 200 and body["ready"] is True and body["search"] == "failing", body
        disk.failing = False  # the disk takes writes again: the next try commits
        await until(lambda: bridge.search_state() == "ready")


async def test_openapi_document_is_valid_and_describes_every_route():
    async with serving(catalog()) as served:
        status, document, _ = await served.get("/openapi.json")
        assert status == 200
    validate(document)  # openapi-spec-validator, OpenAPI 3.1
    assert document["openapi"] == "3.1.0"
    documented = {
        re.sub(r"\{[^}]+\}", "{}", path): set(ops) for path, ops in document["paths"].items()
    }
    routes, closers = rest_routes(served.bridge)
    for close in closers:
        close()
    for route in routes:
        assert isinstance(route, Route)
        key = re.sub(r"\{[^}]+\}", "{}", route.path)
        assert key in documented, f"{route.path} is not in /openapi.json"
        assert {m.lower() for m in route.methods or ()} - {"head"} <= documented[key], route.path
    assert openapi_document(server_url="https://tools.example")["servers"] == [
        {"url": "https://tools.example"}
    ]


async def test_an_empty_path_segment_answers_a_documented_404():
    async with serving(catalog()) as served:
        _, document, _ = await served.get("/openapi.json")
        group = next(iter(served.bridge.catalog.declarations())).namespace
        for path, template in (
            (f"/a2t/groups/{group}/tools/", "/a2t/groups/{groupId}/tools/{name}"),
            ("/a2t/tools/", "/a2t/tools/{name}"),
            ("/tools/:invoke", "/tools/{toolId}:invoke"),
            ("/tools/x/versions/:invoke", "/tools/{toolId}/versions/{versionNum}:invoke"),
        ):
            status, body, _ = await served.post(path, {})
            assert status == 404 and "error" in body, (path, status, body)
            assert "404" in document["paths"][template]["post"]["responses"], template
            # every body route may answer 408 (server.body_timeout); both a2t execute routes take the generation header
            assert "408" in document["paths"][template]["post"]["responses"], template
            if template.startswith("/a2t/"):
                assert "A2T-Catalog-Generation" in [
                    p["name"] for p in document["paths"][template]["post"]["parameters"]
                ], template
        assert "tag" in [p["name"] for p in document["paths"]["/tools"]["get"]["parameters"]]
