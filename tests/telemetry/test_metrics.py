"""GET /metrics after known calls, parsed with prometheus_client's own parser: counts and
outcomes match the calls, histograms grow, gauges follow the upstreams, sessions and the store,
the tool label obeys its policy, and the route is behind the tokens unless made public."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bridge.telemetry.metrics import OTHER_TOOLS, ToolLabels
from tests.fakes import FakeConfig, FakeUpstream, tool
from tests.serve.mcp_support import HANDSHAKE, http_client
from tests.serve.rest_env import TOKEN_ALL, Served, config_with, narrow_surfaces, serving
from tests.servers import until


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(
    served: Served, token: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body, response = await served.get("/metrics", token=token)
    assert status == 200, body
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(body)


async def invoke(
    served: Served, name: str, arguments: dict[str, Any], token: str | None = None
) -> int:
    status, _, _ = await served.post("/invoke", {"tool": name, "arguments": arguments}, token=token)
    return status


def upstreams() -> list[FakeUpstream]:
    return [
        FakeUpstream(name="docs", tools=[tool("echo"), tool("copy"), tool("move")]),
        FakeUpstream(FakeConfig(name="down", fail_start="connection refused", retry_initial=30)),
    ]


async def test_calls_outcomes_latency_and_search_are_counted_as_they_happened():
    async with serving(*upstreams()) as served:
        before = await scrape(served)
        assert (
            value(
                before,
                "bridge_tool_calls_total",
                upstream="docs",
                tool="docs__echo",
                surface="default",
                outcome="ok",
            )
            == 0
        )
        for _ in range(3):
            assert await invoke(served, "docs__echo", {"text": "hi"}) == 200
        assert await invoke(served, "docs__echo", {"text": 5}) == 400
        assert (await served.get("/search", q="echo"))[0] == 200
        assert (await served.get("/search", q="zebra quantum"))[0] == 200
        found = await scrape(served)
    labels = {"upstream": "docs", "tool": "docs__echo", "surface": "default"}
    assert value(found, "bridge_tool_calls_total", **labels, outcome="ok") == 3
    assert value(found, "bridge_tool_calls_total", **labels, outcome="invalid_arguments") == 1
    assert value(found, "bridge_tool_call_duration_seconds_count", **labels) == 4
    assert value(found, "bridge_tool_call_duration_seconds_bucket", **labels, le="+Inf") == 4
    assert value(found, "bridge_tool_call_duration_seconds_sum", **labels) > 0
    # the upstream's part: only the three calls that reached it, and each within its call
    assert value(found, "bridge_upstream_call_duration_seconds_count", **labels) == 3
    assert value(found, "bridge_upstream_call_duration_seconds_sum", **labels) < value(
        found, "bridge_tool_call_duration_seconds_sum", **labels
    )
    assert value(found, "bridge_tool_calls_in_flight") == 0
    assert value(found, "bridge_search_queries_total", surface="default") == 2
    assert value(found, "bridge_search_no_match_total", surface="default") == 1
    assert value(found, "bridge_search_duration_seconds_count", surface="default") == 2
    # the upstreams' state, tools and reconnects; the process's own metrics
    assert value(found, "bridge_upstream_state", upstream="docs", kind="fake", state="ready") == 1
    assert value(found, "bridge_upstream_state", upstream="down", kind="fake", state="failed") == 1
    assert value(found, "bridge_upstream_state", upstream="down", kind="fake", state="ready") == 0
    assert value(found, "bridge_catalog_tools", upstream="docs") == 3
    assert value(found, "bridge_upstream_reconnects_total", upstream="docs") == 0
    assert value(found, "bridge_upstream_calls_in_flight", upstream="docs") == 0
    assert value(found, "bridge_store_writes_waiting") >= 0
    assert value(found, "process_resident_memory_bytes") > 0


async def test_a_call_in_flight_and_an_mcp_session_open_show_while_they_last():
    echo = FakeUpstream(name="docs", tools=[tool("echo")])
    async with serving(echo) as served:
        echo.gate = asyncio.Event()
        call = asyncio.ensure_future(invoke(served, "docs__echo", {"text": "slow"}))
        await until(lambda: echo.calls)
        found = await scrape(served)
        assert value(found, "bridge_tool_calls_in_flight") == 1
        assert value(found, "bridge_upstream_calls_in_flight", upstream="docs") == 1
        echo.gate.set()
        assert await call == 200
        assert value(await scrape(served), "bridge_mcp_sessions_open") == 0
        async with http_client(served.base, HANDSHAKE) as client:
            assert (await client.call("docs__echo", {"text": "over mcp"})).is_error is False
            found = await scrape(served)
            assert value(found, "bridge_mcp_sessions_open") == 1
            assert (
                value(
                    found,
                    "bridge_tool_calls_total",
                    upstream="docs",
                    tool="docs__echo",
                    surface="default",
                    outcome="ok",
                )
                == 2
            )


async def test_the_tool_label_names_every_tool_none_or_the_busiest():
    async def counts(policy: str) -> dict[str, float]:
        async with serving(
            *upstreams(), config=config_with(telemetry={"tool_label": policy})
        ) as served:
            for name, times in (("docs__echo", 1), ("docs__copy", 2), ("docs__move", 3)):
                for _ in range(times):
                    assert await invoke(served, name, {"text": "x"}) == 200
            await scrape(served)  # ranks the busiest
            assert await invoke(served, "docs__move", {"text": "x"}) == 200
            found = await scrape(served)
        return {
            dict(labels)["tool"]: v
            for (name, labels), v in found.items()
            if name == "bridge_tool_calls_total"
        }

    assert await counts("all") == {"docs__echo": 1, "docs__copy": 2, "docs__move": 4}
    assert await counts("none") == {"": 7}
    # top_2: echo and copy were named first; the first scrape names copy and move, the busiest;
    # move's earlier calls stay under _other, so every series only grows
    assert await counts("top_2") == {"docs__copy": 2, "docs__move": 1, OTHER_TOOLS: 3}


def test_a_tool_that_leaves_the_busiest_keeps_its_count_for_when_it_comes_back():
    labels = ToolLabels("top_1")
    assert labels.label("a") == "a"
    assert labels.label("b") == OTHER_TOOLS
    assert labels.label("b") == OTHER_TOOLS
    labels.rerank()
    assert (
        labels.named == {"b"}
        and not labels.shown("a")
        and labels.shown("b")
        and labels.shown(OTHER_TOOLS)
    )
    assert labels.label("b") == "b"
    for _ in range(3):
        labels.label("a")
    labels.rerank()
    assert labels.named == {"a"}
    tie = ToolLabels("top_1")
    tie.label("b")
    tie.label("a")
    tie.rerank()
    assert tie.named == {"b"}  # on a tie, the tool already named stays


async def test_metrics_need_a_token_unless_made_public():
    async with serving(*upstreams(), config=config_with(**narrow_surfaces())) as served:
        status, body, _ = await served.get("/metrics")
        assert status == 401 and body["error"]["error_class"] == "credential_missing"
        assert (
            value(await scrape(served, token=TOKEN_ALL), "bridge_catalog_tools", upstream="docs")
            == 3
        )
    public = {**narrow_surfaces(), "telemetry": {"metrics_public": True}}
    async with serving(*upstreams(), config=config_with(**public)) as served:
        assert value(await scrape(served), "bridge_catalog_tools", upstream="docs") == 3
    async with serving(*upstreams(), config=config_with(telemetry={"metrics": False})) as served:
        assert (await served.get("/metrics"))[0] == 404


async def test_a_scraper_asking_for_openmetrics_gets_it():
    async with (
        serving(*upstreams()) as served,
        served.http.get(
            "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        ) as response,
    ):
        assert response.status == 200
        assert response.headers["content-type"].startswith("application/openmetrics-text")
        assert (await response.text()).rstrip().endswith("# EOF")
