"""MCP frontend over streamable HTTP (the bridge on uvicorn, loopback), with the mcp SDK's clients
in both protocol eras: listing, search, deferred loading, call_tool, blocked tools, progress,
cancellation, error results and change notices."""

from __future__ import annotations

import asyncio
import json
import ssl

import httpx2
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from bridge.model import BridgeError, UpstreamResult
from tests.fakes import FakeConfig, FakeUpstream, tool
from tests.serve.mcp_support import (
    ERAS,
    HANDSHAKE,
    MODERN,
    CancelAwareUpstream,
    error_class,
    http_client,
    served_bridge,
    text_of,
)
from tests.servers import until

SURFACE = {
    "surfaces": [
        {
            "name": "default",
            "load": ["svc__echo", "svc__slow"],
            "defer": ["*"],
            "block": [{"name": "svc__wipe", "reason": "policy_blocked"}],
        }
    ]
}


def svc_tools() -> list:
    return [
        tool(
            "echo",
            read_only=True,
            output_schema={"type": "object", "properties": {"echo": {"type": "object"}}},
        ),
        tool("slow"),
        tool(
            "weather",
            description="Get the weather forecast for a city.",
            props={"city": {"type": "string"}},
            required=["city"],
        ),
        tool("wipe", description="Delete every weather record.", destructive=True),
    ]


def upstream() -> CancelAwareUpstream:
    return CancelAwareUpstream(
        FakeConfig(name="svc", retry_initial=0.05, retry_max=0.1), tools=svc_tools()
    )


@pytest.mark.parametrize("era", ERAS)
async def test_list_shows_loaded_tools_and_meta_tools(era):
    async with served_bridge(SURFACE, [upstream()]) as srv, http_client(srv.url, era) as client:
        tools = {t.name: t for t in await client.tools()}
        assert set(tools) == {"search_tools", "call_tool", "svc__echo", "svc__slow"}
        echo = tools["svc__echo"]
        assert echo.annotations is not None and echo.annotations.read_only_hint is True
        assert echo.output_schema == {"type": "object", "properties": {"echo": {"type": "object"}}}
        assert echo.input_schema["type"] == "object"
        assert echo.meta["a2t-bridge/tool"]["upstream"] == "svc"
        # no safety fact known: no hint rendered, so the client assumes MCP's fail-safe defaults
        assert tools["svc__slow"].annotations is None
        assert tools["search_tools"].annotations.read_only_hint is True
        result = await client.call("svc__echo", {"text": "hi"})
        assert not result.is_error
        assert result.structured_content == {"echo": {"text": "hi"}}
        assert text_of(result) == "hi"


@pytest.mark.parametrize("era", ERAS)
async def test_tools_list_is_paginated(era):
    many = FakeUpstream(name="many", tools=[tool(f"t{i:02d}") for i in range(7)])
    async with served_bridge({}, [many], page_size=3) as srv, http_client(srv.url, era) as client:
        first = await client.page(None)
        assert len(first.tools) == 3 and first.next_cursor
        names = [t.name for t in await client.tools()]
        assert names == [f"many__t{i:02d}" for i in range(7)]  # nothing deferred: no meta tools
        # a cursor the server never issued is invalid params, whatever digits it holds
        for cursor in ("o²", "o" + "9" * 5000, "x3"):
            with pytest.raises(MCPError) as refused:
                await client.page(cursor)
            assert (
                refused.value.error.code == types.INVALID_PARAMS
                and "invalid cursor" in refused.value.error.message
            )


@pytest.mark.parametrize("era", ERAS)
async def test_search_returns_matches_with_full_schemas(era):
    async with served_bridge(SURFACE, [upstream()]) as srv, http_client(srv.url, era) as client:
        found = await client.search("weather forecast")
        match = next(m for m in found["matches"] if m["name"] == "svc__weather")
        assert match["input_schema"]["required"] == ["city"]
        assert match["description"].startswith("Get the weather forecast")
        assert match["loading_state"] == "deferred"
        assert (match["namespace"], match["native_name"]) == (
            "svc",
            "weather",
        )  # the upstream's own name, as REST's native_ref
        assert (await client.search("weather forecast", limit=1.0))["matches"][0][
            "name"
        ] == "svc__weather"  # 1.0 is an integer
        selected = await client.search("select:svc__weather,svc__nope")
        assert [m["name"] for m in selected["matches"]] == ["svc__weather"]
        assert selected["missing_names"] == ["svc__nope"]
        if era == HANDSHAKE:
            assert "tool list" in found["how_to_call"]
        else:
            assert "call_tool" in found["how_to_call"]


@pytest.mark.parametrize("era", ERAS)
async def test_an_error_of_a_tool_listed_with_an_output_schema_keeps_to_that_schema(era):
    """A client checks structuredContent against the tool's outputSchema, error results too (the
    TypeScript SDK refuses the result): the error record then travels in the bridge's `_meta` entry."""
    svc = upstream()
    async with served_bridge(SURFACE, [svc]) as srv, http_client(srv.url, era) as client:
        schemas = {t.name: t.output_schema for t in await client.tools()}
        assert schemas["svc__echo"] and schemas["search_tools"] and not schemas["svc__slow"]
        refused = [
            await client.call("svc__echo", {"text": 5}),  # invalid_arguments, before anything runs
            await client.call("search_tools", {"query": ""}),  # invalid_arguments
        ]
        svc.raise_error = BridgeError("the service is down", error_class="dependency_unavailable")
        refused.append(await client.call("svc__echo", {"text": "hi"}))
        for result, name, expected in zip(
            refused,
            ("svc__echo", "search_tools", "svc__echo"),
            ("invalid_arguments", "invalid_arguments", "dependency_unavailable"),
            strict=True,
        ):
            assert result.structured_content is None, name
            assert result.meta["a2t-bridge/result"]["error"]["error_class"] == expected
            assert expected in text_of(result)
        # a tool listed without an output schema keeps the record in structuredContent
        plain = await client.call("svc__slow", {"text": 5})
        assert plain.structured_content["error"]["error_class"] == "invalid_arguments"


@pytest.mark.parametrize("era", ERAS)
async def test_search_refuses_an_empty_or_overlong_query_as_rest_does(era):
    from bridge.search.analysis import MAX_QUERY_CHARS

    async with served_bridge(SURFACE, [upstream()]) as srv, http_client(srv.url, era) as client:
        for arguments in (
            {"query": ""},
            {"query": "  ", "limit": 3},
            {"query": "w" * (MAX_QUERY_CHARS + 1)},
        ):
            refused = await client.call("search_tools", arguments)
            assert error_class(refused) == "invalid_arguments", arguments
            assert len(text_of(refused)) < 2000  # the query is not echoed back
        # a filter lists tools by itself; an empty namespace or kind filters nothing, as over REST
        listed = await client.search("", namespace="svc")
        assert "svc__weather" in [m["name"] for m in listed["matches"]]
        assert [
            m["name"]
            for m in (await client.search("weather forecast", namespace="", kind=""))["matches"]
        ][:1] == ["svc__weather"]
        # the longest query taken is searched (by its first 128 distinct words)
        longest = ("weather forecast " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS]
        assert (await client.search(longest))["matches"][0]["name"] == "svc__weather"


async def test_search_names_the_alternatives_other_upstreams_list():
    alt = FakeUpstream(
        name="alt",
        tools=[
            tool(
                "weather",
                description="Get the weather forecast of a city.",
                props={"city": {"type": "string"}},
            )
        ],
    )
    async with (
        served_bridge({"search": {"semantic": "static"}, **SURFACE}, [upstream(), alt]) as srv,
        http_client(srv.url, MODERN) as client,
    ):
        await srv.bridge.search.wait_indexed()
        found = await client.search("weather forecast for a city", limit=2)
        weather = [m for m in found["matches"] if m["name"].endswith("__weather")]
        assert len(weather) == 1
        (other,) = weather[0]["alternatives"]
        assert {weather[0]["name"], other} == {"svc__weather", "alt__weather"}
        result = await client.call("call_tool", {"name": other, "arguments": {"city": "Oslo"}})
        assert not result.is_error
    apart = {"search": {"semantic": "static", "fold_alternatives": False}, **SURFACE}
    async with (
        served_bridge(apart, [upstream(), FakeUpstream(name="alt", tools=list(alt.tools))]) as srv,
        http_client(srv.url, MODERN) as client,
    ):
        await srv.bridge.search.wait_indexed()
        found = await client.search("weather forecast for a city", limit=2)
        assert sorted(m["name"] for m in found["matches"]) == ["alt__weather", "svc__weather"]
        assert not any("alternatives" in m for m in found["matches"])


@pytest.mark.parametrize("era", ERAS)
async def test_a_search_nothing_matched_suggests_tools_callable_through_call_tool(era):
    async with (
        served_bridge({"search": {"semantic": "static"}, **SURFACE}, [upstream()]) as srv,
        http_client(srv.url, era) as client,
    ):
        await srv.bridge.search.wait_indexed()
        found = await client.search(
            "will it rain in Paris tomorrow"
        )  # the SDK checks it against the output schema
        assert found["matches"] == [] and "suggestions" in found["hint"]
        suggested = [s["name"] for s in found["suggestions"]]
        assert (
            suggested[0] == "svc__weather" and "svc__wipe" not in suggested
        )  # a blocked tool is never suggested
        first = found["suggestions"][0]
        assert first["input_schema"]["required"] == ["city"] and first["native_name"] == "weather"
        assert "call_tool" in found["how_to_call"] and "suggestion" in found["how_to_call"]
        if era == HANDSHAKE:  # a suggestion is not added to the tool list
            assert "svc__weather" not in await client.names()
        result = await client.call(
            "call_tool", {"name": "svc__weather", "arguments": {"city": "Paris"}}
        )
        assert not result.is_error


async def test_handshake_search_loads_matches_and_sends_list_changed():
    up = upstream()
    async with served_bridge(SURFACE, [up]) as srv, http_client(srv.url, HANDSHAKE) as client:
        assert "svc__weather" not in await client.names()
        await client.search("weather")
        await client.notices.next()
        assert "svc__weather" in await client.names()
        result = await client.call("svc__weather", {"city": "Oslo"})
        assert not result.is_error
        assert up.calls == [("weather", {"city": "Oslo"})]
        # a second session has its own listing, and its state goes when the session ends
        async with http_client(srv.url, HANDSHAKE) as other:
            assert "svc__weather" not in await other.names()
            assert srv.frontend.notifier.session_count == 2
        await until(lambda: srv.frontend.notifier.session_count == 1)


@pytest.mark.parametrize("era", ERAS)
async def test_direct_call_of_unloaded_deferred_tool_is_schema_not_loaded(era):
    up = upstream()
    async with served_bridge(SURFACE, [up]) as srv, http_client(srv.url, era) as client:
        result = await client.call("svc__weather", {"city": "Oslo"})
        assert error_class(result) == "schema_not_loaded"
        assert 'search_tools with query "select:svc__weather"' in text_of(result)
        assert up.calls == []  # never an execution


@pytest.mark.parametrize("era", ERAS)
async def test_call_tool_validates_then_runs_a_deferred_tool(era):
    up = upstream()
    async with served_bridge(SURFACE, [up]) as srv, http_client(srv.url, era) as client:
        bad = await client.call(
            "call_tool", {"name": "svc__weather", "arguments": {"town": "Oslo"}}
        )
        assert error_class(bad) == "invalid_arguments"
        assert "city" in text_of(bad)
        assert up.calls == []
        missing = await client.call("call_tool", {"arguments": {}})
        assert error_class(missing) == "invalid_arguments"
        unknown = await client.call("call_tool", {"name": "svc__nope"})
        assert error_class(unknown) == "unknown_tool"
        assert "search_tools" in text_of(unknown)
        good = await client.call(
            "call_tool", {"name": "svc__weather", "arguments": {"city": "Oslo"}}
        )
        assert not good.is_error
        assert good.structured_content == {"echo": {"city": "Oslo"}}
        assert up.calls == [("weather", {"city": "Oslo"})]


@pytest.mark.parametrize("era", ERAS)
async def test_blocked_tool_is_invisible_and_uncallable(era):
    up = upstream()
    async with served_bridge(SURFACE, [up]) as srv, http_client(srv.url, era) as client:
        assert "svc__wipe" not in await client.names()
        found = await client.search("delete weather records")
        assert "svc__wipe" not in [m["name"] for m in found["matches"]]
        assert (await client.search("select:svc__wipe"))["missing_names"] == ["svc__wipe"]
        # the surface's rule hides it: a call reads as one of a tool that does not exist
        direct = await client.call("svc__wipe", {})
        missing = await client.call("svc__nope", {})
        assert error_class(direct) == "unknown_tool"
        assert text_of(direct) == text_of(missing).replace("svc__nope", "svc__wipe")
        through = await client.call("call_tool", {"name": "svc__wipe", "arguments": {}})
        assert error_class(through) == "unknown_tool"
        assert up.calls == []


@pytest.mark.parametrize("era", ERAS)
async def test_progress_and_cancellation_pass_through(era):
    up = upstream()
    up.gate = asyncio.Event()
    async with served_bridge(SURFACE, [up]) as srv, http_client(srv.url, era) as client:
        progress: list[tuple[float, float | None, str | None]] = []
        started = asyncio.Event()

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))
            started.set()

        call = asyncio.create_task(client.call("svc__slow", {"text": "x"}, progress=on_progress))
        async with asyncio.timeout(5):
            await started.wait()
        assert progress == [(50.0, 100.0, "working")]
        call.cancel()
        async with asyncio.timeout(5):
            await up.canceled.wait()  # the upstream call itself was canceled
        with pytest.raises(asyncio.CancelledError):
            await call
        # the session is still usable
        up.gate.set()
        assert not (await client.call("svc__echo", {"text": "again"})).is_error


@pytest.mark.parametrize("era", ERAS)
async def test_upstream_errors_become_is_error_results_with_guidance(era):
    up = upstream()
    async with served_bridge(SURFACE, [up]) as srv, http_client(srv.url, era) as client:
        up.raise_error = BridgeError("slow down", error_class="rate_limited", retry_after=2)
        limited = await client.call("svc__echo", {"text": "x"})
        assert error_class(limited) == "rate_limited"
        assert "retry after 2 seconds" in text_of(limited)
        up.raise_error = None
        up.result = UpstreamResult(
            content=[{"type": "text", "text": "no such city"}], is_error=True
        )
        failed = await client.call("svc__echo", {"text": "x"})
        assert error_class(failed) == "execution_failed"
        assert text_of(failed).startswith("no such city")


async def test_handshake_session_hears_catalog_changes():
    up = upstream()
    without_slow = [t for t in svc_tools() if t.name != "slow"]
    async with (
        served_bridge(SURFACE, [up], debounce=0.02) as srv,
        http_client(srv.url, HANDSHAKE) as client,
    ):
        assert "svc__slow" in await client.names()
        # The notice rides the session's GET stream, which the client opens on its own schedule:
        # flip the loaded set until a notice arrives.
        async with asyncio.timeout(10):
            for round_ in range(100):
                up.change_tools(without_slow if round_ % 2 == 0 else svc_tools())
                try:
                    await client.notices.next(timeout=0.2)
                    break
                except TimeoutError:
                    continue
        assert client.notices.count >= 1
        up.change_tools(without_slow)
        await until(lambda: srv.bridge.catalog.resolve("svc__slow") is None)
        assert "svc__slow" not in await client.names()


async def test_modern_listen_stream_hears_catalog_changes():
    up = upstream()
    async with (
        served_bridge(SURFACE, [up], debounce=0.02) as srv,
        http_client(srv.url, MODERN) as client,
    ):
        async with client.client.listen(tools_list_changed=True) as events:
            up.change_tools([t for t in svc_tools() if t.name != "slow"])
            async with asyncio.timeout(5):
                async for _ in events:
                    break
            assert "svc__slow" not in await client.names()
            up.change_tools(svc_tools())
            async with asyncio.timeout(5):
                async for _ in events:
                    break
            assert "svc__slow" in await client.names()


async def test_end_streams_closes_listen_streams_so_a_stopping_server_need_not_wait_for_them():
    up = upstream()
    async with served_bridge(SURFACE, [up]) as srv, http_client(srv.url, MODERN) as client:
        async with client.client.listen(tools_list_changed=True) as events:
            srv.frontend.end_streams()
            async with asyncio.timeout(5):
                async for _ in events:
                    pass  # the stream ends: the loop ends


async def test_upstream_outage_takes_its_tools_off_the_list_and_back():
    up = upstream()
    other = FakeUpstream(name="other", tools=[tool("ping")])
    config = {"surfaces": [{"name": "default", "load": ["*__echo", "other__*"], "defer": ["*"]}]}
    async with (
        served_bridge(config, [up, other], debounce=0.02) as srv,
        http_client(srv.url, MODERN) as client,
    ):
        assert {"svc__echo", "other__ping"} <= await client.names()
        async with client.client.listen(tools_list_changed=True) as events:
            up.config = FakeConfig(name="svc", fail_start="refused", retry_initial=30)
            up.drop("connection reset")
            async with asyncio.timeout(5):
                async for _ in events:
                    break
            names = await client.names()
            assert "svc__echo" not in names and "other__ping" in names
            down = await client.call("call_tool", {"name": "svc__echo", "arguments": {"text": "x"}})
            assert error_class(down) == "dependency_unavailable"


async def test_notices_go_only_to_surfaces_whose_listing_changed():
    up = upstream()
    config = {
        "surfaces": [
            {"name": "default", "load": ["svc__echo"], "defer": ["*"]},
            {"name": "wide", "load": ["svc__*"]},
        ]
    }
    async with served_bridge(config, [up]) as srv:
        heard = {"default": 0, "wide": 0}
        for name in heard:
            srv.frontend.notifier.bus(name).subscribe(
                lambda event, name=name: heard.__setitem__(name, heard[name] + 1)
            )
        up.change_tools([*svc_tools(), tool("extra")])
        await until(lambda: srv.bridge.catalog.resolve("svc__extra") is not None)
        await srv.frontend.notifier.flush()
        assert heard == {"default": 0, "wide": 1}
        await srv.frontend.notifier.flush()  # nothing changed since
        assert heard == {"default": 0, "wide": 1}


@pytest.mark.parametrize("era", ERAS)
async def test_an_mcp_upstreams_result_meta_comes_through_without_the_keys_mcp_reserves(era):
    """An MCP upstream's `_meta` is passed on, except keys MCP reserves: a 2026-07-28 upstream
    stamps its `serverInfo` on each result, which named it, not the bridge, as the server."""
    up = FakeUpstream(name="svc", tools=[tool("echo")])
    up.result = UpstreamResult(
        content=[{"type": "text", "text": "hi"}],
        native_ref={"source": "mcp"},
        meta={
            "io.modelcontextprotocol/serverInfo": {"name": "upstream-server", "version": "1"},
            "tools.mcp.com/x": 1,
            "example.com/trace": "t-1",
            "plain": True,
        },
    )
    async with served_bridge({}, [up]) as srv, http_client(srv.url, era) as client:
        result = await client.call("svc__echo", {"text": "hi"})
        assert result.meta["example.com/trace"] == "t-1" and result.meta["plain"] is True
        assert "tools.mcp.com/x" not in result.meta
        assert (
            result.meta.get("io.modelcontextprotocol/serverInfo", {}).get("name")
            != "upstream-server"
        )
        if era == MODERN:  # the SDK stamps the bridge's own
            assert result.meta["io.modelcontextprotocol/serverInfo"]["name"] == "a2t-bridge"


@pytest.mark.parametrize("era", ERAS)
async def test_resources_and_resource_templates_are_listed_empty(era):
    # `resources` is advertised (stored results are read through it): clients then list templates
    # too, which answered "method not found"
    async with served_bridge(SURFACE, [upstream()]) as srv, http_client(srv.url, era) as client:
        session = client.session if era == HANDSHAKE else client.client.session
        assert (await session.list_resource_templates()).resource_templates == []
        assert (await session.list_resources()).resources == []


async def test_listing_rendering_per_era_for_non_object_output_schema():
    up = FakeUpstream(name="svc", tools=[tool("count", output_schema={"type": "integer"})])
    up.result = UpstreamResult(content=[{"type": "text", "text": "3"}], structured_content=3)
    async with served_bridge({}, [up]) as srv:
        async with http_client(srv.url, HANDSHAKE) as old:
            (count,) = await old.tools()
            assert count.output_schema is None  # object roots only before 2026-07-28
            result = await old.call("svc__count", {})
            assert result.structured_content is None and text_of(result) == "3"
        async with http_client(srv.url, MODERN) as new:
            (count,) = await new.tools()
            assert count.output_schema == {"type": "integer"}
            result = await new.call("svc__count", {})
            assert result.structured_content == 3


def test_meta_tool_definitions_are_valid_mcp():
    from bridge.serve.mcp_meta import meta_tools

    for item in meta_tools():
        assert types.Tool.model_validate(item.model_dump(by_alias=True, mode="json")).name in (
            "search_tools",
            "call_tool",
        )


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_whose_input_is_no_object_is_blocked_and_the_list_stays_valid(era):
    # `{"type": "string"}` is no valid MCP inputSchema: one such tool must not break tools/list
    odd = tool("shout")
    odd.input_schema = {"type": "string"}
    # nor are `properties` other than an object of schemas, or `required` other than a list of
    # names: before 2026-07-28 the SDK refused the whole page for one of them
    shapes = [tool(f"shape{i}") for i in range(4)]
    for shape, schema in zip(
        shapes,
        (
            {"type": "object", "properties": [1, 2]},
            {"type": "object", "required": "a"},
            {"type": "object", "required": [1]},
            {"type": "object", "properties": {"a": 5}},
        ),
        strict=True,
    ):
        shape.input_schema = schema
    # an output schema of that shape is left out of the listing before 2026-07-28
    answers = tool("answers", output_schema={"type": "object", "properties": [1]})
    up = FakeUpstream(FakeConfig(name="svc"), tools=[tool("echo"), odd, *shapes, answers])
    async with served_bridge({}, [up]) as srv, http_client(srv.url, era) as client:
        tools = {t.name: t for t in await client.tools()}
        assert set(tools) == {"svc__echo", "svc__answers"}
        assert tools["svc__answers"].output_schema == (
            None if era == HANDSHAKE else {"type": "object", "properties": [1]}
        )
        for name in ("svc__shout", "svc__shape0", "svc__shape1", "svc__shape2", "svc__shape3"):
            result = await client.call(name, {})
            assert error_class(
                result
            ) == "policy_blocked" and "unsupported_input_schema" in text_of(result), name
    shown = {
        "surfaces": [{"name": "default", "allow": [{"name": "svc__shout"}]}]
    }  # an allow rule lifts the block
    async with (
        served_bridge(
            shown, [FakeUpstream(FakeConfig(name="svc"), tools=[tool("echo"), odd])]
        ) as srv,
        http_client(srv.url, era) as client,
    ):
        tools = {t.name: t for t in await client.tools()}
        assert tools["svc__shout"].input_schema == {"type": "object", "properties": {}}


async def test_nan_and_infinity_in_arguments_are_invalid_arguments():
    # the SDK's JSON reader takes NaN and 1e400 (inf), which JSON cannot carry on to an upstream;
    # a client that writes them (the SDK's own client writes null) sends raw JSON
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "svc__echo",
    }
    up = upstream()
    async with served_bridge(SURFACE, [up]) as srv, httpx2.AsyncClient(timeout=10) as http:
        for odd in (b"NaN", b"-Infinity", b"1e400"):
            body = (
                b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "svc__echo", '
                b'"arguments": {"text": "x", "n": '
                + odd
                + b'}, "_meta": '
                + json.dumps(meta).encode()
                + b"}}"
            )
            response = await http.post(f"{srv.url}/mcp", content=body, headers=headers)
            result = response.json()["result"]
            assert (
                result["isError"] is True and "NaN or Infinity" in result["content"][0]["text"]
            ), (odd, result)
        # nesting past MAX_ARGUMENT_DEPTH (within what the SDK's reader takes), and a search's
        # limit of 1e400, are refused too
        body = (
            b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "svc__echo", '
            b'"arguments": {"text": "x", "d": '
            + b"[" * 80
            + b"]" * 80
            + b'}, "_meta": '
            + json.dumps(meta).encode()
            + b"}}"
        )
        result = (await http.post(f"{srv.url}/mcp", content=body, headers=headers)).json()["result"]
        assert (
            result["isError"] is True and "deeper than 64 levels" in result["content"][0]["text"]
        ), result
        body = (
            b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "search_tools", '
            b'"arguments": {"query": "echo", "limit": 1e400}, "_meta": '
            + json.dumps(meta).encode()
            + b"}}"
        )
        result = (
            await http.post(
                f"{srv.url}/mcp", content=body, headers={**headers, "Mcp-Name": "search_tools"}
            )
        ).json()["result"]
        assert result["isError"] is True and "limit" in result["content"][0]["text"], result
        assert up.calls == []


@pytest.mark.parametrize("era", ERAS)
async def test_a_stored_result_of_a_tool_with_an_output_schema_answers_its_structured_content(era):
    # the SDK's client refuses a result without structured content from a tool listed with an
    # outputSchema ("has an output schema but did not return structured content")
    config = {**SURFACE, "invoke": {"inline_result_limit": 256, "preview_chars": 20}}
    async with served_bridge(config, [upstream()]) as srv, http_client(srv.url, era) as client:
        result = await client.call("svc__echo", {"text": "E" * 5000})
        assert not result.is_error and result.structured_content == {"echo": {"text": "E" * 5000}}
        assert "the full result is stored at bridge://results/" in text_of(result)
        # its link is read over MCP too: resources/read
        link = next(b for b in result.content if isinstance(b, types.ResourceLink))
        stored = await client.read(str(link.uri))
        assert json.loads(stored.contents[0].text)["content"][0]["text"] == "E" * 5000
        with pytest.raises(MCPError, match="no stored result"):
            await client.read("bridge://results/blob_nothing")


async def test_a_setup_failure_is_not_answered_with_retry_later(tmp_path):
    """A server certificate the bridge cannot verify fails every attempt alike: the guidance says
    an operator must fix the configuration, not to retry."""
    pytest.importorskip("cryptography.x509")
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from tests.adapters.test_openapi_tls import _issue, _key_pem, _pem

    cert, key = _issue("127.0.0.1", None, ip="127.0.0.1")  # self-signed: no CA the bridge knows
    (tmp_path / "server.pem").write_bytes(_pem(cert) + _key_pem(key))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(tmp_path / "server.pem"))

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/open", answer)
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/open": {"get": {"operationId": "open", "responses": {"200": {"description": "ok"}}}}
        },
    }
    (tmp_path / "api.json").write_text(json.dumps(doc))
    server = TestServer(app, host="127.0.0.1", scheme="https")
    await server.start_server(ssl=context)
    config = {
        "upstreams": [
            {
                "name": "svc",
                "kind": "openapi",
                "spec": str(tmp_path / "api.json"),
                "base_url": f"https://127.0.0.1:{server.port}",
            }
        ]
    }
    try:
        async with served_bridge(config, []) as srv, http_client(srv.url, MODERN) as client:
            failed = await client.call("svc__open", {})
    finally:
        await server.close()
    assert error_class(failed) == "dependency_unavailable"
    text = text_of(failed)
    assert "cannot be verified" in text and "do not retry" in text and "retry later" not in text, (
        text
    )
