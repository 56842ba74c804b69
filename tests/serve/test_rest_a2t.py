"""The a2t dialect served under /a2t: capabilities, groups as upstreams, listing and search,
execution with HTTP 200 error objects, and group_refresh notices."""

from __future__ import annotations

import gc

from bridge.model import ToolDeclaration, ToolError, UpstreamResult
from bridge.serve.rest_a2t import GENERATION_HEADER, HISTORY_DECLARATIONS, SEARCH_MATCHES
from tests.fakes import FakeUpstream, tool
from tests.serve.rest_env import (
    TOKEN_ALL,
    TOKEN_NARROW,
    config_with,
    indexed,
    narrow_surfaces,
    serving,
)
from tests.servers import raw_exchange


def two_upstreams() -> tuple[FakeUpstream, FakeUpstream]:
    weather = FakeUpstream(
        name="weather",
        tools=[tool("forecast", description="Weather forecast for a city"), tool("secret_radar")],
    )
    math = FakeUpstream(
        name="math",
        tools=[
            tool("add", description="Add numbers"),
            tool("multiply", description="Multiply numbers"),
        ],
    )
    return weather, math


async def test_capabilities_point_to_the_served_endpoints():
    async with serving(*two_upstreams()) as served:
        status, caps, _ = await served.get("/.well-known/a2t-capabilities.json")
        assert status == 200
        assert caps["version"] == "1.0" and caps["features"] == {
            "groups": True,
            "search": True,
            "dynamic_tools": True,
        }
        assert caps["endpoints"] == {"tools": "/a2t/tools", "groups": "/a2t/groups"}
        status, tools, _ = await served.get(caps["endpoints"]["tools"])
        status2, groups, _ = await served.get(caps["endpoints"]["groups"])
        assert status == status2 == 200 and tools["total"] == 4 and groups["total"] == 2


async def test_groups_are_upstreams_with_visible_tool_counts():
    async with serving(*two_upstreams(), config=config_with(**narrow_surfaces())) as served:
        _, body, response = await served.get("/a2t/groups", token=TOKEN_ALL)
        assert [(g["id"], g["tool_count"]) for g in body["groups"]] == [("math", 2), ("weather", 2)]
        assert response.headers[GENERATION_HEADER].isdigit()
        _, body, _ = await served.get("/a2t/groups", token=TOKEN_NARROW)
        assert [(g["id"], g["tool_count"]) for g in body["groups"]] == [("math", 2), ("weather", 1)]
        _, body, _ = await served.get("/a2t/groups", token=TOKEN_ALL, q="weath")
        assert [g["id"] for g in body["groups"]] == ["weather"]
        _, body, _ = await served.get("/a2t/groups", token=TOKEN_ALL, parent_id="root")
        assert body["groups"] == [] and body["total"] == 0


async def test_tool_listing_offsets_search_and_group_listing():
    async with serving(*two_upstreams()) as served:
        _, body, _ = await served.get("/a2t/tools", offset=1, limit=2)
        assert [t["name"] for t in body["tools"]] == ["math__multiply", "weather__forecast"]
        assert (body["total"], body["offset"], body["limit"]) == (4, 1, 2)
        first = body["tools"][0]
        assert first["group_id"] == "math" and first["input_schema"]["type"] == "object"
        assert first["x-agent-tool"]["namespace"] == "math"
        _, body, _ = await served.get("/a2t/tools", q="forecast weather")
        assert body["tools"][0]["name"] == "weather__forecast"
        _, body, _ = await served.get("/a2t/groups/math/tools")
        assert sorted(t["name"] for t in body["tools"]) == ["math__add", "math__multiply"]
        status, body, _ = await served.get("/a2t/groups/nowhere/tools")
        assert status == 404 and body["error"]["error_code"] == "group_not_found"
        status, body, _ = await served.get("/a2t/tools", limit=-1)
        assert status == 400


async def test_search_on_tools_gives_the_best_hundred_matches():
    many = FakeUpstream(
        name="many",
        tools=[tool(f"report_{i:03}", description=f"Build report number {i}") for i in range(130)],
    )
    async with serving(many) as served:
        status, body, _ = await served.get("/a2t/tools", q="report " * 3000)
        assert status == 400 and body["error"]["details"]["parameter"] == "q"
        _, body, _ = await served.get("/a2t/tools", q="report", limit=1000)
        assert body["total"] == SEARCH_MATCHES == 100 and len(body["tools"]) == 100


async def test_search_on_tools_lists_each_upstreams_tool():
    ups = [
        FakeUpstream(name=n, tools=[tool("forecast", description="Weather forecast for a city.")])
        for n in ("east", "west")
    ]
    async with serving(*ups) as served:
        _, body, _ = await served.get("/a2t/tools", q="weather forecast")
        assert (
            sorted(t["name"] for t in body["tools"]) == ["east__forecast", "west__forecast"]
            and body["total"] == 2
        )
        _, found, _ = await served.get(
            "/search", q="weather forecast"
        )  # the search record folds them
        assert len(found["matches"]) == 1 and len(found["matches"][0]["alternatives"]) == 1


async def test_execute_answers_200_with_result_or_error_object():
    weather, math = two_upstreams()
    async with serving(weather, math, config=config_with(**narrow_surfaces())) as served:
        status, body, _ = await served.post(
            "/a2t/tools/math__add", {"text": "2+2"}, token=TOKEN_ALL
        )
        assert status == 200 and body["result"] == {"echo": {"text": "2+2"}} and "error" not in body
        status, body, _ = await served.post(
            "/a2t/groups/math/tools/math__add", {"body": {"text": "wrapped"}}, token=TOKEN_ALL
        )
        assert status == 200 and body["result"] == {"echo": {"text": "wrapped"}}

        math.result = UpstreamResult(
            is_error=True, error=ToolError(error_class="execution_failed", message="overflow")
        )
        status, body, _ = await served.post("/a2t/tools/math__add", {}, token=TOKEN_ALL)
        assert status == 200 and body["result"] is None
        assert body["error"] == {
            "code": "execution_failed",
            "message": "overflow",
            "error_class": "execution_failed",
            "recoverability": "not_recoverable",
        }
        status, body, _ = await served.post("/a2t/tools/math__add", {"text": 5}, token=TOKEN_ALL)
        assert status == 200 and body["error"]["code"] == "invalid_arguments"

        # unknown tools answer the reference's tool_not_found, and so does a tool a rule of the
        # caller's surface blocks
        missing = await served.post("/a2t/tools/weather__nothing", {}, token=TOKEN_NARROW)
        wrong_group = await served.post(
            "/a2t/groups/math/tools/weather__forecast", {}, token=TOKEN_ALL
        )
        for status, body, _ in (missing, wrong_group):
            assert (
                status == 200
                and body["result"] is None
                and body["error"]["code"] == "tool_not_found"
            )
        status, body, _ = await served.post(
            "/a2t/tools/weather__secret_radar", {}, token=TOKEN_NARROW
        )
        message = missing[1]["error"]["message"].replace("nothing", "secret_radar")
        assert status == 200 and body["result"] is None
        assert body["error"] == {**missing[1]["error"], "message": message}
        assert weather.calls == []

        status, body, _ = await served.post("/a2t/tools/math__add", raw=b"{nope", token=TOKEN_ALL)
        assert status == 400 and body["error"]["details"]["pointer"] == ""
        status, body, _ = await served.post("/a2t/tools/math__add", [1], token=TOKEN_ALL)
        assert status == 400
        status, body, _ = await served.post("/a2t/tools/math__add", {})
        assert status == 401


async def test_group_refresh_names_the_groups_changed_since_the_callers_last_view():
    weather, math = two_upstreams()
    async with serving(weather, math) as served:
        await served.get("/a2t/tools")  # the caller's view
        _, body, _ = await served.post("/a2t/tools/math__add", {})
        assert "meta" not in body
        weather.change_tools([*weather.tools, tool("humidity")])
        await until_name(served, "weather__humidity")
        _, body, _ = await served.post("/a2t/tools/math__add", {})
        assert body["meta"] == {"type": "group_refresh", "data": {"group_ids": ["weather"]}}
        _, body, _ = await served.post("/a2t/tools/math__add", {})
        assert "meta" not in body  # told once

        # a client that echoes the generation header gets exact notices whoever else shares its address
        _, _, response = await served.get("/a2t/groups/math/tools")
        seen = response.headers[GENERATION_HEADER]
        math.change_tools(math.tools[:1])
        await until_gone(served, "math__multiply")
        _, body, response = await served.post(
            "/a2t/tools/math__add", {}, headers={GENERATION_HEADER: seen}
        )
        assert body["meta"]["data"]["group_ids"] == ["math"]
        assert int(response.headers[GENERATION_HEADER]) > int(seen)
        _, body, _ = await served.post(
            "/a2t/tools/math__add",
            {},
            headers={GENERATION_HEADER: response.headers[GENERATION_HEADER]},
        )
        assert "meta" not in body
        # a header that is no generation number is read as absent, never a 500
        for odd in ("1" * 40, "-3", "abc"):
            status, body, _ = await served.post(
                "/a2t/tools/math__add", {}, headers={GENERATION_HEADER: odd}
            )
            assert status == 200 and "error" not in body, (odd, body)
        # the byte 0xB2 is '²' in Latin-1, which passes str.isdigit(); aiohttp would send it as UTF-8
        answer = await raw_exchange(
            served.base,
            b"POST /a2t/tools/math__add HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + GENERATION_HEADER.encode()
            + b": \xb2\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


async def test_group_refresh_hides_groups_the_caller_cannot_see():
    weather, math = two_upstreams()
    async with serving(weather, math, config=config_with(**narrow_surfaces())) as served:
        await served.get("/a2t/tools", token=TOKEN_NARROW)
        weather.change_tools([*weather.tools, tool("secret_sonar")])
        await until_name(served, "weather__secret_sonar")
        _, body, _ = await served.post("/a2t/tools/math__add", {}, token=TOKEN_NARROW)
        assert "meta" not in body


async def test_the_change_history_holds_a_bounded_number_of_declarations():
    """An upstream whose tools are all declared again at each change (a reconnect marks them
    unavailable, then lists them anew) leaves no more than HISTORY_DECLARATIONS replaced
    declarations behind; a caller whose view is older than the history hears of every group."""
    weather, math = two_upstreams()
    async with serving(weather, math, config=config_with(search={"semantic": "off"})) as served:
        _, _, response = await served.get("/a2t/tools")
        first_view = response.headers[GENERATION_HEADER]
        catalog = served.bridge.catalog
        for n in range(250):  # 12,500 declarations
            catalog.apply_tools(
                "weather", [tool(f"t{i}", description=f"Tool {i}, listing {n}.") for i in range(50)]
            )
        _, _, response = await served.get("/a2t/tools")
        recent_view = response.headers[GENERATION_HEADER]
        catalog.apply_tools("math", [tool("add", description="Add two numbers")])
        await indexed(
            served.bridge
        )  # the index's writer lets go of the changes it committed before
        gc.collect()
        alive = sum(isinstance(o, ToolDeclaration) for o in gc.get_objects())
        assert alive <= len(catalog) + HISTORY_DECLARATIONS
        _, body, _ = await served.post(
            "/a2t/tools/math__add", {}, headers={GENERATION_HEADER: recent_view}
        )
        assert body["meta"]["data"]["group_ids"] == ["math"]
        _, body, _ = await served.post(
            "/a2t/tools/math__add", {}, headers={GENERATION_HEADER: first_view}
        )
        assert body["meta"]["data"]["group_ids"] == ["math", "weather"]


async def until_name(served, name: str) -> None:
    from tests.servers import until

    await until(lambda: served.bridge.catalog.resolve(name) is not None)


async def until_gone(served, name: str) -> None:
    from tests.servers import until

    await until(lambda: served.bridge.catalog.resolve(name) is None)


async def test_group_refresh_notices_survive_an_upstream_removed():
    from bridge.catalog import Catalog
    from bridge.config import SurfaceConfig
    from bridge.serve.rest_a2t import CatalogViews
    from bridge.store import Store
    from bridge.surface import Surface

    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="math", tools=[tool("add")]))
    empty = FakeUpstream(name="empty")
    empty.tools = []
    catalog.add_upstream(empty)
    await catalog.start()
    views = CatalogViews(catalog)
    try:
        since = catalog.generation
        await catalog.remove_upstream("empty")  # a change of no tool, naming an upstream gone
        await catalog.remove_upstream("math")
        assert views.changed_groups(since, Surface(SurfaceConfig(name="default"), catalog)) == [
            "math"
        ]
    finally:
        views.close()
        await catalog.close()
