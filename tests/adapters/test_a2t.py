"""`kind: a2t` against real HTTP servers on loopback: the IETF draft (paging, the drafts' sloppy
shapes, version pins, retries of 5xx) and the a2t dialect (endpoints from the capabilities
document, listing with limit ≥ total and de-duplication, the three meta shapes, error objects)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from adapters.a2t.upstream import A2TConfig, A2TUpstream
from bridge.catalog import Catalog
from bridge.demo.a2t_server import create_app as demo_app
from bridge.model import BridgeError
from bridge.store import Store
from bridge.upstream import CallContext
from tests.servers import clear_proxy_environment, forward_proxy, proxy_loopback_too


async def until(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def ctx(timeout: float = 5.0) -> CallContext:
    return CallContext(invocation_id="inv_test", timeout=timeout)


def upstream(url: str, **extra: Any) -> A2TUpstream:
    retries = extra.pop("retries", {"count": 2, "backoff": 0.01})
    return A2TUpstream(A2TConfig(name="remote", url=url, retries=retries, **extra))


class IETFServer:
    """An IETF A2T server written the way the drafts' examples read: versions as strings, the
    enum array wrapped in braces, `required` left out, a page size it picks itself."""

    def __init__(self, count: int = 5, page_size: int = 2) -> None:
        self.page_size = page_size
        self.requests: Counter[str] = Counter()
        self.invocations: list[tuple[str, Any]] = []
        self.failures: list[int] = []  # statuses answered (in order) before invocations succeed
        self.traceparents: list[str | None] = []  # the `traceparent` header of each invocation
        self.tools = {f"00000000-0000-4000-8000-{i:012d}": self.signature(i) for i in range(count)}

    @staticmethod
    def signature(i: int, version: int = 1) -> dict[str, Any]:
        return {
            "toolId": f"00000000-0000-4000-8000-{i:012d}",
            "name": f"lookup_{i}",
            "description": f"Lookup number {i}.",
            "version": str(version),
            "currentVersion": 2 if i == 0 else 1,
            "tags": ["lookups"],
            "input_parameters": [
                {"id": "city", "name": "City", "type": "string", "description": "The city."},
                {
                    "id": "cls",
                    "name": "Flight Class",
                    "type": "enum",
                    "allowed-values": {
                        "values": [
                            {"name": "ECONOMY", "description": "Least expensive cabin."},
                            {"name": "BUSINESS", "description": "Next to top tier."},
                        ]
                    },
                    "required": False,
                },
                {"id": "n", "name": "nights", "type": "int", "required": False},
            ]
            + (
                [{"id": "pets", "name": "pets", "type": "boolean", "required": True}]
                if version == 2
                else []
            ),
            "output_parameters": [
                {"id": "temp-fh", "name": "Temperature in Fahrenheit", "type": "int"}
            ],
        }

    def app(self) -> web.Application:
        async def list_tools(request: web.Request) -> web.Response:
            self.requests["list"] += 1
            self.requests[f"pageLimit={request.query.get('pageLimit')}"] += 1
            start = int(request.query.get("pageCursor", "0").lstrip("c") or 0)
            ids = sorted(self.tools)
            page = ids[start : start + self.page_size]
            paging: dict[str, Any] = {"pageLimit": self.page_size}
            if start + self.page_size < len(ids):
                paging["next"] = f"c{start + self.page_size}"
            return web.json_response({"items": [self.tools[i] for i in page], "paging": paging})

        async def get_version(request: web.Request) -> web.Response:
            tool_id, version = request.match_info["tool_id"], int(request.match_info["version"])
            if tool_id not in self.tools or version not in (1, 2):
                return web.json_response({"message": "no such version"}, status=404)
            return web.json_response(self.signature(int(tool_id[-12:]), version))

        async def invoke(request: web.Request) -> web.Response:
            body = await request.json()
            self.invocations.append((request.path, body))
            self.traceparents.append(request.headers.get("traceparent"))
            if self.failures:
                status = self.failures.pop(0)
                return web.Response(
                    status=status, text="temporarily unavailable", headers={"Retry-After": "0"}
                )
            values = {p["name"]: p["value"] for p in body["input_parameters"]}
            return web.json_response(
                {
                    "output_parameters": [
                        {
                            "name": "Temperature in Fahrenheit",
                            "value": 60 + len(values.get("City", "")),
                        }
                    ]
                }
            )

        app = web.Application()
        app.router.add_get("/tools", list_tools)
        app.router.add_get("/tools/{tool_id}/versions/{version}", get_version)
        app.router.add_post(r"/tools/{tool_id}:invoke", invoke)
        app.router.add_post(r"/tools/{tool_id}/versions/{version}:invoke", invoke)
        return app


async def test_ietf_pages_until_no_next_and_maps_signatures():
    server = IETFServer(count=5, page_size=2)
    async with TestServer(server.app(), host="127.0.0.1") as http:
        up = upstream(str(http.make_url("")).rstrip("/"), page_limit=1)
        await up.start()
        try:
            assert up.dialect == "ietf"
            tools = {t.name: t for t in await up.list_tools()}
            assert sorted(tools) == [f"lookup_{i}" for i in range(5)]
            assert server.requests["list"] == 3 and server.requests["pageLimit=1"] == 3
            t = tools["lookup_1"]
            mapping = t.external_mapping
            assert mapping["source"] == "ietf-a2t" and mapping["tool_id"] == t.native_id
            assert (mapping["version"], mapping["current_version"]) == (1, 1)
            assert mapping["parameter_ids"] == {
                "City": "city",
                "Flight Class": "cls",
                "nights": "n",
            }
            schema = t.input_schema
            assert schema["required"] == ["City"]  # `required` defaults to true
            assert schema["properties"]["Flight Class"] == {
                "type": "string",
                "enum": ["ECONOMY", "BUSINESS"],
                "x-enum-descriptions": {
                    "ECONOMY": "Least expensive cabin.",
                    "BUSINESS": "Next to top tier.",
                },
            }
            assert schema["properties"]["nights"] == {
                "type": "integer",
                "maximum": 65535,
            }  # the draft's default max
            assert t.output_schema == {
                "type": "object",
                "properties": {"Temperature in Fahrenheit": {"type": "integer"}},
            }
            result = await up.invoke(t.native_id, {"City": "Omaha"}, ctx())
            assert result.structured_content == {"Temperature in Fahrenheit": 65}
            path, body = server.invocations[-1]
            assert path == f"/tools/{t.native_id}:invoke"
            assert body == {
                "name": "lookup_1",
                "input_parameters": [{"name": "City", "value": "Omaha"}],
            }
        finally:
            await up.close()


async def test_an_invocation_carries_the_calls_w3c_trace_context():
    server = IETFServer(count=1)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with TestServer(server.app(), host="127.0.0.1") as http:
        up = upstream(str(http.make_url("")).rstrip("/"))
        await up.start()
        try:
            tool_id = (await up.list_tools())[0].native_id
            traced = CallContext(invocation_id="inv_t", timeout=5.0, traceparent=traceparent)
            await up.invoke(tool_id, {"City": "Omaha"}, traced)
            await up.invoke(tool_id, {"City": "Omaha"}, ctx())
            assert server.traceparents == [traceparent, None]
        finally:
            await up.close()


async def test_the_server_is_reached_through_the_environment_proxy_unless_no_proxy_names_it(
    monkeypatch,
):
    clear_proxy_environment(monkeypatch)
    server = IETFServer(count=1)
    async with TestServer(server.app(), host="127.0.0.1") as http, forward_proxy() as (proxy, seen):
        base = str(http.make_url("")).rstrip("/")
        monkeypatch.setenv("HTTP_PROXY", proxy)
        proxy_loopback_too(monkeypatch)  # the loopback server stands for a remote one
        for bypass in ("", "127.0.0.1"):
            monkeypatch.setenv("NO_PROXY", bypass)
            seen.clear()
            up = upstream(base)
            await up.start()
            try:
                assert [t.name for t in await up.list_tools()] == ["lookup_0"]
            finally:
                await up.close()
            assert bool(seen) == (not bypass) and all(
                line.split(" ")[1].startswith(base) for line in seen
            ), seen


async def test_ietf_version_pins_use_the_tested_version():
    server = IETFServer(count=2)
    async with TestServer(server.app(), host="127.0.0.1") as http:
        up = upstream(
            str(http.make_url("")).rstrip("/"),
            pins={"lookup_0": 1, "00000000-0000-4000-8000-000000000001": 7},
        )
        await up.start()
        try:
            tools = {t.name: t for t in await up.list_tools()}
            pinned = tools["lookup_0"]
            assert (
                pinned.external_mapping["version"] == 1
                and pinned.external_mapping["pinned"] is True
            )
            assert pinned.external_mapping["current_version"] == 2
            assert (
                "pets" not in pinned.input_schema["properties"]
            )  # version 1's signature, not the current one
            await up.invoke(pinned.native_id, {"City": "Oslo"}, ctx())
            assert server.invocations[-1][0] == f"/tools/{pinned.native_id}/versions/1:invoke"
            missing = tools["lookup_1"]  # pinned to a version the server does not have
            assert (
                missing.blocked_reason == "setup_required"
                and "Pinned to version 7" in missing.description
            )
        finally:
            await up.close()


async def test_ietf_retries_5xx_then_reports_dependency_unavailable():
    server = IETFServer(count=1)
    async with TestServer(server.app(), host="127.0.0.1") as http:
        up = upstream(str(http.make_url("")).rstrip("/"))
        await up.start()
        try:
            tool_id = (await up.list_tools())[0].native_id
            server.failures = [503, 502]
            result = await up.invoke(tool_id, {"City": "Rome"}, ctx())
            assert not result.is_error and len(server.invocations) == 3
            server.failures = [503, 503, 503, 503]
            result = await up.invoke(tool_id, {"City": "Rome"}, ctx())
            assert result.is_error and result.error.error_class == "dependency_unavailable"
            assert (
                len(server.invocations) == 6 and "temporarily unavailable" in result.error.message
            )
            server.failures = [504]
            result = await up.invoke(tool_id, {"City": "Rome"}, ctx())
            assert (
                result.error.error_class == "timeout" and len(server.invocations) == 7
            )  # not retried
            server.failures = [400]
            result = await up.invoke(tool_id, {}, ctx())
            assert result.error.error_class == "invalid_arguments"
        finally:
            await up.close()


async def test_a_call_the_upstream_closes_under_is_dependency_unavailable():
    """A call waiting to retry when its upstream is closed (the catalog reconnects it: its
    launched process exited) ends as `dependency_unavailable`, not as a bridge fault."""
    server = IETFServer(count=1)
    async with TestServer(server.app(), host="127.0.0.1") as http:
        up = upstream(str(http.make_url("")).rstrip("/"), retries={"count": 3, "backoff": 0.5})
        await up.start()
        try:
            tool_id = (await up.list_tools())[0].native_id
            server.failures = [503, 503, 503, 503]
            call = asyncio.create_task(up.invoke(tool_id, {"City": "Oslo"}, ctx()))
            await until(lambda: len(server.invocations) == 1)
            await up.close()
            try:
                await call
                raise AssertionError("the call should fail")
            except BridgeError as exc:
                assert (
                    exc.error_class == "dependency_unavailable" and "not connected" in exc.message
                )
            assert len(server.invocations) == 1
        finally:
            await up.close()


async def test_a_server_that_went_away_marks_the_upstream_unavailable():
    server = IETFServer(count=1)
    http = TestServer(server.app(), host="127.0.0.1")
    await http.start_server()
    catalog = Catalog(Store())
    up = upstream(
        str(http.make_url("")).rstrip("/"), retries={"count": 1, "backoff": 0.01}, retry_initial=30
    )
    catalog.add_upstream(up)
    await catalog.start()
    try:
        tool_id = (await up.list_tools())[0].native_id
        await http.close()
        try:
            await up.invoke(tool_id, {"City": "Lima"}, ctx())
            raise AssertionError("the call should fail")
        except BridgeError as exc:
            assert exc.error_class == "dependency_unavailable" and "unreachable" in exc.message
        await until(lambda: catalog.slot("remote").health.state != "ready")
        assert "unreachable" in catalog.slot("remote").health.reason
    finally:
        await catalog.close()
        await http.close()


async def test_unreachable_server_fails_start_with_a_reason():
    up = upstream("http://127.0.0.1:9", retries={"count": 0}, start_timeout=2)
    try:
        await up.start()
        raise AssertionError("start should fail")
    except Exception as exc:
        assert "unreachable" in str(exc) and "127.0.0.1:9" in str(exc)
    finally:
        await up.close()


async def test_a2t_dialect_against_the_demo_server_through_a_catalog():
    async with TestServer(demo_app(), host="127.0.0.1") as http:
        catalog = Catalog(Store())
        up = upstream(str(http.make_url("")).rstrip("/"))
        catalog.add_upstream(up)
        await catalog.start()
        try:
            assert up.dialect == "a2t"
            names = sorted(d.name for d in catalog.declarations())
            assert names == [
                "remote__add",
                "remote__discover_math",
                "remote__divide",
                "remote__get_weather",
            ]
            decl = catalog.resolve("remote__get_weather")
            assert decl.external_mappings[0] == {
                "source": "a2t",
                "base_url": up.base,
                "tool_name": "get_weather",
                "group_id": "weather",
            }
            assert decl.input_schema["properties"]["units"]["enum"] == ["celsius", "fahrenheit"]
            result = await up.invoke("add", {"a": 2, "b": 40}, ctx())
            assert result.content == [{"type": "text", "text": "42"}]
            result = await up.invoke(
                "divide", {"a": 1, "b": 0}, ctx()
            )  # HTTP 200 with an error object
            assert (
                result.is_error
                and result.error.error_class == "execution_failed"
                and result.error.error_code == "execution_error"
            )
            result = await up.invoke("nope", {}, ctx())
            assert result.error.error_class == "unknown_tool"
            # a meta nested in the result (the examples' shape): the new tool is in the catalog at once
            result = await up.invoke("discover_math", {}, ctx())
            assert result.content == [{"type": "text", "text": "Discovered 1 new math tool"}]
            await until(lambda: catalog.resolve("remote__multiply") is not None)
            assert (await up.invoke("multiply", {"a": 6, "b": 7}, ctx())).content[0]["text"] == "42"
        finally:
            await catalog.close()


class A2TQuirkServer:
    """An a2t server with its endpoints off the default paths, a small page cap, random order and
    each meta shape on demand."""

    def __init__(self) -> None:
        self.tools = {
            f"t{i}": {
                "name": f"t{i}",
                "description": f"tool {i}",
                "input_schema": {"type": "object"},
                "group_id": "g1" if i < 3 else "g2",
            }
            for i in range(5)
        }
        self.requests: Counter[str] = Counter()
        self.bodies: list[Any] = []
        self.next_meta: dict[str, Any] | None = None
        self.token_seen: list[str | None] = []

    def app(self) -> web.Application:
        async def capabilities(request: web.Request) -> web.Response:
            self.token_seen.append(request.headers.get("Authorization"))
            return web.json_response(
                {
                    "version": "1.0",
                    "features": {"groups": True, "search": False, "dynamic_tools": True},
                    "endpoints": {"tools": "/api/v2/tools", "groups": "/api/v2/groups"},
                    "limits": {"max_tools_per_request": 2},
                }
            )

        def page(items: list[dict[str, Any]], request: web.Request) -> web.Response:
            random.shuffle(items)
            limit = min(int(request.query.get("limit") or 100), 2)
            offset = int(request.query.get("offset") or 0)
            return web.json_response(
                {"tools": items[offset : offset + limit], "total": len(items), "limit": limit}
            )

        async def tools(request: web.Request) -> web.Response:
            self.requests["tools"] += 1
            return page(list(self.tools.values()), request)

        async def group_tools(request: web.Request) -> web.Response:
            group = request.match_info["group"]
            self.requests[f"group:{group}"] += 1
            return page([t for t in self.tools.values() if t["group_id"] == group], request)

        async def execute(request: web.Request) -> web.Response:
            self.bodies.append(await request.json())
            body: dict[str, Any] = {"result": "ok"}
            if self.next_meta is not None:
                body.update(self.next_meta)
                self.next_meta = None
            return web.json_response(body)

        app = web.Application()
        app.router.add_get("/.well-known/a2t-capabilities.json", capabilities)
        app.router.add_get("/api/v2/tools", tools)
        app.router.add_post("/api/v2/tools/{name}", execute)
        app.router.add_get("/api/v2/groups/{group}/tools", group_tools)
        return app


async def test_a2t_endpoints_from_capabilities_paging_dedupe_and_meta_shapes():
    server = A2TQuirkServer()
    async with TestServer(server.app(), host="127.0.0.1") as http:
        catalog = Catalog(Store())
        up = upstream(
            str(http.make_url("")).rstrip("/"), wrap_body=True, bearer_token="s3cret-token-value"
        )
        catalog.add_upstream(up)
        await catalog.start()
        try:
            assert server.token_seen == ["Bearer s3cret-token-value"]
            assert sorted(d.native_name for d in catalog.declarations()) == [
                "t0",
                "t1",
                "t2",
                "t3",
                "t4",
            ]
            assert "s3cret" not in str(await up.health())

            await up.invoke("t0", {"x": 1}, ctx())
            assert server.bodies[-1] == {"body": {"x": 1}}  # wrap_body

            # top level with `data` (the Go helpers' shape): only that group is listed again
            before = server.requests.copy()
            server.tools["t9"] = {
                "name": "t9",
                "description": "new in g2",
                "input_schema": {"type": "object"},
                "group_id": "g2",
            }
            server.next_meta = {"meta": {"type": "group_refresh", "data": {"group_ids": ["g2"]}}}
            await up.invoke("t0", {}, ctx())
            await until(lambda: catalog.resolve("remote__t9") is not None)
            assert server.requests["group:g2"] > before["group:g2"]
            assert (
                server.requests["tools"] == before["tools"]
                and server.requests["group:g1"] == before["group:g1"]
            )

            # top level, flat (the README's shape)
            server.next_meta = {
                "meta": {
                    "type": "tools_added",
                    "tools": [
                        {"name": "t7", "description": "added", "input_schema": {"type": "object"}}
                    ],
                }
            }
            await up.invoke("t0", {}, ctx())
            await until(lambda: catalog.resolve("remote__t7") is not None)
        finally:
            await catalog.close()


async def test_forced_a2t_dialect_without_capabilities_fails_clearly():
    async with TestServer(IETFServer().app(), host="127.0.0.1") as http:
        up = upstream(str(http.make_url("")).rstrip("/"), dialect="a2t")
        try:
            await up.start()
            raise AssertionError("start should fail")
        except Exception as exc:
            assert "no a2t capabilities document" in str(exc)
        finally:
            await up.close()


async def test_answers_over_max_response_bytes_are_refused_with_or_without_a_length():
    big = b'{"output_parameters": [{"name": "t", "value": "' + b"x" * 5000 + b'"}]}'

    async def declared(request: web.Request) -> web.Response:
        return web.Response(body=big, content_type="application/json")

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(big), 1000):
            await response.write(big[start : start + 1000])
        await response.write_eof()
        return response

    server = IETFServer(count=1)
    app = server.app()
    app.router.add_post("/big/declared:invoke", declared)
    app.router.add_post("/big/chunked:invoke", chunked)
    async with TestServer(app, host="127.0.0.1") as http:
        base = str(http.make_url("")).rstrip("/")
        for limit, refused in ((len(big) - 1, True), (len(big), False)):
            up = upstream(base, max_response_bytes=limit)
            await up.start()
            try:
                for path in ("declared", "chunked"):
                    up._invoke_urls["big"] = f"{base}/big/{path}:invoke"
                    if refused:
                        try:
                            await up.invoke("big", {}, ctx())
                            raise AssertionError(f"{path}: an answer over the limit was read")
                        except BridgeError as exc:
                            assert (
                                exc.error_class == "result_too_large"
                                and "max_response_bytes" in exc.message
                            )
                    else:
                        result = await up.invoke("big", {}, ctx())
                        assert not result.is_error, (path, result)
            finally:
                await up.close()


async def test_a_redirect_is_reported_not_followed_with_the_upstreams_headers():
    received: list[str | None] = []

    async def landing(request: web.Request) -> web.Response:
        received.append(request.headers.get("X-Api-Key"))
        return web.json_response({"output_parameters": []})

    other = web.Application()
    other.router.add_post("/landing", landing)
    async with TestServer(other, host="127.0.0.1") as elsewhere:
        server = IETFServer(count=1)
        app = server.app()

        async def moved(request: web.Request) -> web.Response:
            return web.Response(
                status=307, headers={"location": str(elsewhere.make_url("/landing"))}
            )

        app.router.add_post("/moved:invoke", moved)
        async with TestServer(app, host="127.0.0.1") as http:
            base = str(http.make_url("")).rstrip("/")
            up = upstream(base, headers={"X-Api-Key": "a2t-Secret-1"})
            await up.start()
            try:
                up._invoke_urls["moved"] = f"{base}/moved:invoke"
                result = await up.invoke("moved", {}, ctx())
                assert result.is_error and "HTTP 307, a redirect to" in result.error.message
                assert (
                    "/landing" in result.error.message
                    and "a2t-Secret-1" not in result.error.message
                )
                assert received == []  # the other origin never saw the request, nor its key
            finally:
                await up.close()


async def test_capabilities_naming_endpoints_on_another_origin_fail_the_start_without_sending_the_token():
    received: list[str | None] = []

    async def listing(request: web.Request) -> web.Response:
        received.append(request.headers.get("Authorization"))
        return web.json_response([])

    other = web.Application()
    other.router.add_get("/a2t/tools", listing)
    async with TestServer(other, host="127.0.0.1") as elsewhere:

        async def capabilities(request: web.Request) -> web.Response:
            return web.json_response(
                {"version": "1.0", "endpoints": {"tools": str(elsewhere.make_url("/a2t/tools"))}}
            )

        app = web.Application()
        app.router.add_get("/.well-known/a2t-capabilities.json", capabilities)
        async with TestServer(app, host="127.0.0.1") as http:
            up = upstream(str(http.make_url("")).rstrip("/"), bearer_token="a2t-Secret-2")
            try:
                await up.start()
                raise AssertionError("start should fail")
            except BridgeError as exc:
                assert exc.error_class == "setup_required" and "another origin" in exc.message
                assert str(elsewhere.make_url("/a2t/tools")) in exc.message
            finally:
                await up.close()
    assert received == []  # the other origin never saw the bearer token


async def test_a_listing_whose_pages_never_end_stops_and_keeps_what_it_read(caplog):
    """Pages that go on listing the same tools (a fresh cursor each time, or a total never
    reached) once read max_pages of them: gigabytes, then "no answer within start_timeout"."""
    from adapters.a2t.upstream import STALE_PAGES

    requests: Counter[str] = Counter()
    same = [IETFServer.signature(i) for i in range(3)]
    a2t_tools = [
        {"name": f"t{i}", "description": f"tool {i}", "input_schema": {"type": "object"}}
        for i in range(4)
    ]

    async def ietf_tools(request: web.Request) -> web.Response:
        requests["ietf"] += 1
        return web.json_response({"items": same, "paging": {"next": f"c{requests['ietf']}"}})

    async def capabilities(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": "1.0",
                "endpoints": {"tools": "/a2t/tools"},
                "limits": {"max_tools_per_request": 4},
            }
        )

    async def a2t_listing(
        request: web.Request,
    ) -> web.Response:  # says a million, lists the same four
        requests["a2t"] += 1
        return web.json_response({"tools": a2t_tools, "total": 1_000_000, "limit": 4})

    ietf, a2t = web.Application(), web.Application()
    ietf.router.add_get("/tools", ietf_tools)
    a2t.router.add_get("/.well-known/a2t-capabilities.json", capabilities)
    a2t.router.add_get("/a2t/tools", a2t_listing)
    async with TestServer(ietf, host="127.0.0.1") as one, TestServer(a2t, host="127.0.0.1") as two:
        for http, dialect, names, read in (
            (one, "ietf", [f"lookup_{i}" for i in range(3)], 1 + STALE_PAGES),
            (two, "a2t", [f"t{i}" for i in range(4)], 2),
        ):
            up = upstream(str(http.make_url("")).rstrip("/"))
            await up.start()
            try:
                assert up.dialect == dialect
                assert sorted(t.name for t in await up.list_tools()) == names
                assert requests[dialect] == read, requests
            finally:
                await up.close()
    assert caplog.text.count("the paging does not end") == 2


async def test_an_answer_nesting_past_the_json_reader_is_an_error_result_not_a_traceback(caplog):
    signature = IETFServer.signature(0)

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"items": [signature], "paging": {}})

    async def deep(request: web.Request) -> web.Response:
        return web.Response(body=b"[" * 5000 + b"]" * 5000, content_type="application/json")

    app = web.Application()
    app.router.add_get("/tools", listing)
    app.router.add_post(r"/tools/{tool_id}:invoke", deep)
    async with TestServer(app, host="127.0.0.1") as http:
        up = upstream(str(http.make_url("")).rstrip("/"))
        await up.start()
        try:
            tool = (await up.list_tools())[0]
            try:
                await up.invoke(tool.native_id, {"City": "x"}, ctx())
            except BridgeError as exc:  # the answer as text: no JSON object
                assert (
                    exc.error_class == "execution_failed" and "must be a JSON object" in exc.message
                )
            else:
                raise AssertionError("a deep answer was taken")
        finally:
            await up.close()
    assert "RecursionError" not in caplog.text


async def test_a_launched_process_that_exits_while_another_serves_the_address_is_not_launched_over_and_over(
    tmp_path, caplog
):
    # a second bridge on the same config (or a CLI command beside `bridge serve`): its launch
    # fails on a port in use, while the first bridge's process answers there
    import time

    from bridge.config import parse_config
    from bridge.runtime import Bridge

    launches = tmp_path / "launches"
    async with TestServer(demo_app(), host="127.0.0.1") as http:
        config = parse_config(
            {
                "store": {"path": ":memory:"},
                "search": {"persist": False},
                "upstreams": [
                    {
                        "name": "demo",
                        "kind": "a2t",
                        "url": str(http.make_url("")).rstrip("/"),
                        "retry_initial": 0.05,
                        "retry_max": 0.1,
                        "launch": {
                            "command": "python",
                            "args": ["-c", f"open({str(launches)!r}, 'a').write('x')"],
                        },
                    }
                ],
            }
        )
        async with Bridge(config) as bridge:
            slot = bridge.catalog.slot("demo")
            await until(
                lambda: (
                    launches.exists() and slot.health.state == "ready" and not slot.sidecar.running
                ),
                timeout=10,
            )
            ends = (
                time.monotonic() + 1.5
            )  # once a second it was launched again, and marked unavailable
            while time.monotonic() < ends:
                assert slot.health.state == "ready", slot.health.reason
                await asyncio.sleep(0.05)
            assert launches.read_text() == "x"
            assert (
                await bridge.invoker.invoke("demo__add", {"a": 2, "b": 3})
            ).status == "succeeded"
