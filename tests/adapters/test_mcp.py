"""MCP upstreams against real MCP servers (the mcp SDK's low-level Server): as child processes
over stdio and on uvicorn over streamable HTTP, in both protocol eras, through the bridge's
catalog and invoke pipeline."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pydantic import ValidationError

from adapters.mcp.config import MCPConfig
from adapters.mcp.upstream import MCPUpstream
from bridge.catalog import Catalog
from bridge.config import ConfigError, parse_config
from bridge.model import BridgeError, ToolProgress
from bridge.processes import SPAWNS_AT_ONCE
from bridge.runtime import Bridge
from bridge.store import Store
from bridge.telemetry import CallOrigin
from bridge.translate.mcp import progress_from_mcp, safety_from_mcp
from bridge.upstream import CallContext
from tests.adapters.mcp_fixtures.server import FixtureState, build_server
from tests.servers import serve_asgi

# async tests share one event loop, so the module's servers start once
module_loop = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(Path(__file__).parent / "mcp_fixtures" / "server.py")
FILLER, PAGE = 9, 4
TOOL_COUNT = 19 + FILLER  # base tools + fillers: seven pages of four
MODERN, LEGACY = "2026-07-28", "2025-11-25"
# upstream name -> negotiated protocol version expected
UPSTREAMS = {
    "stdio_legacy": LEGACY,
    "stdio_modern": MODERN,
    "http_legacy": LEGACY,
    "http_modern": MODERN,
}


async def until(predicate: Callable[[], Any], timeout: float = 10.0, step: float = 0.02) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(step)


def stdio_entry(name: str, protocol: str, *extra: str, **settings: Any) -> dict[str, Any]:
    args = [FIXTURE, "--filler", str(FILLER), "--page-size", str(PAGE), *extra]
    return {
        "name": name,
        "kind": "mcp",
        "command": "python",
        "args": args,
        "protocol": protocol,
        **settings,
    }


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def http_server() -> AsyncIterator[tuple[str, FixtureState]]:
    server, state = build_server(filler=FILLER, page_size=PAGE)
    async with serve_asgi(server.streamable_http_app()) as base:
        yield f"{base}/mcp", state


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bridge(http_server: tuple[str, FixtureState]) -> AsyncIterator[Bridge]:
    url, _ = http_server
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [
                stdio_entry("stdio_legacy", "legacy"),
                stdio_entry("stdio_modern", MODERN),
                {"name": "http_legacy", "kind": "mcp", "url": url, "protocol": "legacy"},
                {"name": "http_modern", "kind": "mcp", "url": url},  # auto: negotiates 2026-07-28
            ],
        },
        source="test",
        base_dir=str(ROOT),
    )
    bridge = Bridge(config)
    await bridge.start()
    try:
        yield bridge
    finally:
        await bridge.close()


async def call(bridge: Bridge, name: str, args: dict[str, Any] | None = None, **kw: Any) -> Any:
    return await bridge.invoker.invoke(name, args or {}, **kw)


async def server_events(bridge: Bridge, upstream: str) -> list[str]:
    result = await call(bridge, f"{upstream}__events")
    return json.loads(result.content[0]["text"])


each_upstream = pytest.mark.parametrize("up", list(UPSTREAMS))


# ------------------------------------------------------------------------------ configuration


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({}, "exactly one of `command`"),
        ({"command": "srv", "url": "http://127.0.0.1:1/mcp"}, "exactly one of `command`"),
        ({"url": "http://127.0.0.1:1/mcp", "args": ["x"]}, "apply to stdio servers"),
        ({"command": "srv", "headers": {"A": "b"}}, "apply to HTTP servers"),
        ({"url": "ftp://host/mcp"}, "http:// or https://"),
        ({"command": "srv", "protocol": "2024"}, "protocol"),
        ({"command": "srv", "max_line_bytes": 10}, "max_line_bytes"),
    ],
)
def test_config_needs_exactly_one_transport(entry: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        MCPConfig(name="x", kind="mcp", **entry)
    with pytest.raises(ConfigError) as err:
        parse_config({"upstreams": [{"name": "x", "kind": "mcp", **entry}]}, source="bridge.yaml")
    assert "upstreams[0]" in str(err.value)


def test_python_runs_in_the_bridge_interpreter_and_cwd_defaults_to_config_folder(
    tmp_path: Path,
) -> None:
    import sys

    cfg = MCPConfig(
        name="x",
        kind="mcp",
        command="python3",
        args=["-m", "bridge.demo.mcp_server"],
        base_dir=str(tmp_path),
    )
    assert cfg.argv() == [sys.executable, "-m", "bridge.demo.mcp_server"]
    assert Path(cfg.working_dir()) == tmp_path
    assert (
        Path(
            MCPConfig(
                name="x", kind="mcp", command="srv", cwd="..", base_dir=str(tmp_path)
            ).working_dir()
        ).resolve()
        == tmp_path.parent
    )


# ------------------------------------------------------------------------------ mapping


def test_safety_hints_record_declared_inferred_and_default() -> None:
    bare = safety_from_mcp(None)
    assert (bare.read_only, bare.destructive, bare.idempotent, bare.open_world) == (
        False,
        False,
        False,
        True,
    )
    assert set(bare.sources.values()) == {"default"}

    destructive = safety_from_mcp({"destructiveHint": True})
    assert destructive.destructive and destructive.source_of("destructive") == "declared"

    read_only = safety_from_mcp(
        {"readOnlyHint": True, "destructiveHint": True, "openWorldHint": False}
    )
    assert (
        read_only.read_only
        and not read_only.destructive
        and read_only.idempotent
        and not read_only.open_world
    )
    assert read_only.sources == {
        "read_only": "declared",
        "destructive": "inferred",
        "idempotent": "inferred",
        "open_world": "declared",
    }


def test_progress_projection() -> None:
    assert progress_from_mcp(1, 4, "a") == {
        "message": "a",
        "percent": 25.0,
        "current_step": 1,
        "total_steps": 4,
    }
    assert progress_from_mcp(0.5, None, None) == {"message": None}


@each_upstream
@module_loop
async def test_tools_are_declared_with_their_mcp_identity(bridge: Bridge, up: str) -> None:
    assert bridge.catalog.slot(up).health.state == "ready"
    echo = bridge.catalog.resolve(f"{up}__echo")
    assert echo is not None
    assert (echo.title, echo.description, echo.tool_kind) == (
        "Echo",
        "Echo the given text.",
        "mcp_tool",
    )
    assert echo.input_schema["required"] == ["text"]
    assert echo.external_mappings == [
        {
            "source": "mcp",
            "server_id": up,
            "tool_name": "echo",
            "mcp_protocol_version": UPSTREAMS[up],
            "method": "tools/call",
        }
    ]
    kept = echo.annotations["mcp"]
    assert kept["icons"][0]["src"] == "https://example.invalid/echo.png"
    assert kept["_meta"] == {"example.invalid/owner": "tests"}
    assert echo.safety.read_only and echo.safety.source_of("read_only") == "declared"

    add = bridge.catalog.resolve(f"{up}__add")
    assert add.output_schema["properties"] == {"sum": {"type": "number"}}
    assert add.safety.idempotent and add.safety.source_of("idempotent") == "declared"
    plain = bridge.catalog.resolve(f"{up}__plain")
    assert not plain.safety.destructive and plain.safety.source_of("destructive") == "default"
    # a task-only tool cannot be called directly; 2026-07-28 has no tasks, so no such tools
    task_only = bridge.catalog.resolve(f"{up}__task_only")
    assert task_only.blocked_reason == ("mcp_task_required" if UPSTREAMS[up] == LEGACY else None)


@each_upstream
@module_loop
async def test_listing_reads_every_page(bridge: Bridge, up: str) -> None:
    tools = {d.native_name for d in bridge.catalog.declarations() if d.upstream == up}
    assert len(tools) == TOOL_COUNT
    assert {f"filler_{i:03d}" for i in range(FILLER)} <= tools
    seen = await server_events(bridge, up)
    assert {f"list {n}" for n in range(PAGE, TOOL_COUNT, PAGE)} <= set(seen)


# ------------------------------------------------------------------------------ calls


@each_upstream
@module_loop
async def test_every_content_type_and_meta_are_kept(bridge: Bridge, up: str) -> None:
    result = await call(bridge, f"{up}__every_content")
    assert result.status == "succeeded" and not result.is_error
    assert [b["type"] for b in result.content] == [
        "text",
        "image",
        "audio",
        "resource_link",
        "resource",
        "resource",
    ]
    text, image, audio, link, embedded_text, embedded_blob = result.content
    assert text == {"type": "text", "text": "hello", "_meta": {"example.invalid/block": 1}}
    assert image["mimeType"] == "image/png" and image["data"].startswith("iVBOR")
    assert audio["mimeType"] == "audio/wav"
    assert link == {
        "type": "resource_link",
        "uri": "file:///tmp/report.txt",
        "name": "report",
        "mimeType": "text/plain",
    }
    assert embedded_text["resource"] == {
        "uri": "memo://one",
        "mimeType": "text/plain",
        "text": "embedded text",
    }
    assert embedded_blob["resource"]["blob"] == "AAEC"
    assert result.structured_content == {"blocks": 6}
    assert result.meta["example.invalid/trace"] == "abc"
    assert result.native_ref["mcp_protocol_version"] == UPSTREAMS[up]


@each_upstream
@module_loop
async def test_a_call_carries_its_trace_context_in_meta_and_over_http_as_a_header(
    bridge: Bridge, up: str
) -> None:
    traceparent = f"00-4bf92f3577b34da6a3ce929d0e0e47{len(up):02d}-00f067aa0ba902b7-01"
    origin = CallOrigin("rest", traceparent=traceparent)
    result = await call(bridge, f"{up}__plain", {"text": "traced"}, origin=origin)
    assert result.status == "succeeded"
    header = traceparent if up.startswith("http") else None
    assert f"traceparent {traceparent} {header}" in await server_events(bridge, up)


@each_upstream
@module_loop
async def test_resources_a_result_linked_are_read_from_the_server_on_its_session(
    bridge: Bridge, up: str
) -> None:
    result = await call(bridge, f"{up}__linked", surface="default")
    assert [b["type"] for b in result.content] == ["resource_link", "resource", "resource_link"]
    links, surface = bridge.invoker.resource_links, bridge.surfaces.require("default")
    assert await links.read("fixture://notes/1", surface) == [
        {"uri": "fixture://notes/1", "mimeType": "text/plain", "text": "note one"}
    ]
    assert await links.read("fixture://notes/2", surface) == [
        {"uri": "fixture://notes/2", "mimeType": "application/octet-stream", "blob": "AAEC"}
    ]
    with pytest.raises(
        BridgeError
    ) as gone:  # linked, unknown to the server: its -32002, as not found
        await links.read("fixture://notes/gone", surface)
    assert (
        gone.value.error_code == "resource_not_found"
        and gone.value.native_error_ref["code"] == -32002
    )


@each_upstream
@module_loop
async def test_unknown_and_malformed_content_blocks_are_kept_as_they_came(
    bridge: Bridge, up: str
) -> None:
    # the SDK rejects the whole result for one such block; the call ran, so nothing is thrown away
    result = await call(bridge, f"{up}__odd_blocks")
    assert result.status == "succeeded" and not result.is_error
    assert result.content == [
        {"type": "text", "text": "order 42 created"},
        {"type": "hologram", "uri": "x://1", "_meta": {"k": 1}},
        {"type": "text", "text": 5},
    ]
    assert result.structured_content == {"order": 42}


@each_upstream
@module_loop
async def test_structured_output_and_is_error(bridge: Bridge, up: str) -> None:
    added = await call(bridge, f"{up}__add", {"a": 2, "b": 3})
    assert added.structured_content == {"sum": 5}
    failed = await call(bridge, f"{up}__fail")
    assert failed.is_error and failed.status == "failed"
    assert (
        failed.error.error_class == "execution_failed"
        and failed.error.error_code == "mcp_tool_error"
    )
    assert failed.content == [{"type": "text", "text": "the input was not acceptable"}]


@each_upstream
@module_loop
@pytest.mark.parametrize(
    ("what", "method", "refusal"),
    [
        # what the MCP spec asks of a client without the capability (the SDK's default: -32600 for
        # all): roots -32601, an elicitation of a mode not declared -32602; for sampling it names no
        # code, so JSON-RPC's -32601 for a method not offered
        ("sampling", "sampling/createMessage", "-32601 Sampling not supported"),
        ("elicitation", "elicitation/create", "-32602 Elicitation not supported"),
        ("url_elicitation", "elicitation/create", "-32602 Elicitation not supported"),
        ("roots", "roots/list", "-32601 List roots not supported"),
    ],
)
async def test_requests_for_sampling_elicitation_and_roots_are_refused_at_once(
    bridge: Bridge, up: str, what: str, method: str, refusal: str
) -> None:
    # the bridge declares sampling and elicitation (put to the caller of a call that can answer),
    # not roots; a call with no such caller is told no at once (handshake era), and a 2026-07-28
    # result asking for input fails the call
    async with asyncio.timeout(5):
        result = await call(bridge, f"{up}__ask", {"what": what})
    if UPSTREAMS[up] == MODERN:
        assert result.status == "failed" and result.error.error_class == "execution_failed"
        assert (
            result.error.message
            == f"ask: the server asked for input the bridge cannot give ({method})"
        )
    else:
        assert result.status == "succeeded"
        assert result.content[0]["text"] == f"refused: {refusal}"
    declared = "['elicitation', 'sampling']"
    assert f"ask {what}: client declares {declared}" in await server_events(bridge, up)


@module_loop
async def test_a_refused_request_of_the_server_is_logged_once_per_method(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a server that asks for what the bridge does not declare, or no caller can answer, is told no
    # at every ask, and the warning naming the method is said once per upstream
    caplog.set_level(logging.WARNING, logger="bridge.adapters.mcp")
    upstream = MCPUpstream(MCPConfig.model_validate(stdio_entry("asker", "legacy")))
    await upstream.start()
    try:
        for what in ("sampling", "sampling", "elicitation", "url_elicitation", "roots"):
            result = await upstream.invoke(
                "ask", {"what": what}, CallContext(invocation_id=f"ask-{what}", timeout=10.0)
            )
            assert result.content[0]["text"].startswith("refused: -3260"), result.content
    finally:
        await upstream.close()
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "bridge.adapters.mcp" and "does not declare or" in r.getMessage()
    ]
    assert said == [
        f"mcp upstream asker: the server sent {method}, which the bridge does not declare or the "
        "call's caller cannot answer; refused"
        for method in ("sampling/createMessage", "elicitation/create", "roots/list")
    ]


@each_upstream
@module_loop
async def test_server_log_messages_are_logged(
    bridge: Bridge, up: str, caplog: pytest.LogCaptureFixture
) -> None:
    # notifications/message were dropped unseen; on 2026-07-28 a server sends them only to a
    # request that opts in, which the bridge's do not
    caplog.set_level(logging.DEBUG, logger="bridge.adapters.mcp")
    text = f"disk almost full {up}"

    def logged() -> list[logging.LogRecord]:
        return [
            r for r in caplog.records if r.name == "bridge.adapters.mcp" and text in r.getMessage()
        ]

    result = await call(bridge, f"{up}__log", {"levels": ["debug", "warning"], "text": text})
    assert result.status == "succeeded"
    if UPSTREAMS[up] == MODERN:
        assert logged() == []
        return
    await until(lambda: len(logged()) == 2)
    assert [r.levelno for r in logged()] == [logging.DEBUG, logging.INFO]
    assert (
        logged()[1].getMessage()
        == f'mcp upstream {up}: log warning fixture: {{"text": "{text}", "level": "warning"}}'
    )


@each_upstream
@module_loop
async def test_destructive_only_when_declared(bridge: Bridge, up: str) -> None:
    assert (await call(bridge, f"{up}__plain")).status == "succeeded"  # no annotations: callable
    denied = await call(bridge, f"{up}__wipe")
    assert denied.status == "denied" and denied.error.error_class == "permission_denied"


@each_upstream
@module_loop
async def test_progress_is_forwarded(bridge: Bridge, up: str) -> None:
    records: list[ToolProgress] = []

    async def sink(record: ToolProgress) -> None:
        records.append(record)

    result = await call(
        bridge, f"{up}__slow", {"steps": 3}, progress=sink, invocation_id=f"inv-{up}"
    )
    assert result.content[0]["text"] == "done 3"
    assert [(r.sequence, r.percent, r.current_step, r.total_steps) for r in records] == [
        (1, 33.33, 1, 3),
        (2, 66.67, 2, 3),
        (3, 100.0, 3, 3),
    ]
    assert {r.invocation_id for r in records} == {f"inv-{up}"} and records[
        0
    ].message == "step 1 of 3"


@each_upstream
@module_loop
async def test_cancelling_a_call_cancels_it_upstream(bridge: Bridge, up: str) -> None:
    era = UPSTREAMS[up]
    before = (await server_events(bridge, up)).count(f"cancelled hang {era}")
    task = asyncio.create_task(call(bridge, f"{up}__hang"))
    async with asyncio.timeout(10):
        while f"call hang {era}" not in (await server_events(bridge, up))[-5:]:
            await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):
        while (await server_events(bridge, up)).count(f"cancelled hang {era}") == before:
            await asyncio.sleep(0.02)


@each_upstream
@module_loop
async def test_pipeline_timeout_cancels_upstream_too(bridge: Bridge, up: str) -> None:
    era = UPSTREAMS[up]
    config = bridge.catalog.slot(up).upstream.config
    before = (await server_events(bridge, up)).count(f"cancelled hang {era}")
    config.timeout = 0.3
    try:
        result = await call(bridge, f"{up}__hang")
    finally:
        config.timeout = 30.0
    assert result.status == "timed_out" and result.error.error_class == "timeout"
    async with asyncio.timeout(10):
        while (await server_events(bridge, up)).count(f"cancelled hang {era}") == before:
            await asyncio.sleep(0.02)


# ------------------------------------------------------------------------------ list changes


@each_upstream
@module_loop
async def test_list_change_notice_updates_the_catalog(bridge: Bridge, up: str) -> None:
    name = f"{up}__extra_{up}"
    await call(bridge, f"{up}__set_extra", {"names": [f"extra_{up}"], "notify": True})
    await until(lambda: bridge.catalog.resolve(name) is not None)
    assert (await call(bridge, name)).status == "succeeded"
    await call(bridge, f"{up}__set_extra", {"names": [], "notify": True})
    await until(lambda: bridge.catalog.resolve(name) is None)


@pytest.mark.parametrize("protocol", ["legacy", MODERN])
@module_loop
async def test_refresh_interval_finds_unannounced_changes(protocol: str) -> None:
    server, state = build_server()
    async with serve_asgi(server.streamable_http_app()) as base:
        catalog = Catalog(Store())
        catalog.add_upstream(
            MCPUpstream(
                MCPConfig(
                    name="quiet",
                    kind="mcp",
                    url=f"{base}/mcp",
                    protocol=protocol,
                    refresh_interval=0.1,
                )
            )
        )
        await catalog.start()
        try:
            assert catalog.resolve("quiet__late") is None
            state.extra = ["late"]  # no notification: only the periodic re-list can see it
            await until(lambda: catalog.resolve("quiet__late") is not None)
        finally:
            await catalog.close()


@module_loop
async def test_a_header_mismatch_relists_and_sends_the_call_again() -> None:
    """2026-07-28 HTTP: a server that moved an argument into an Mcp-Param header without a
    notice answers the stale client HEADER_MISMATCH; the adapter re-lists and sends once more."""
    server, state = build_server()
    state.header_on = "region"
    async with serve_asgi(server.streamable_http_app()) as base:
        catalog = Catalog(Store())
        catalog.add_upstream(
            MCPUpstream(MCPConfig(name="moved", kind="mcp", url=f"{base}/mcp", protocol=MODERN))
        )
        await catalog.start()
        try:
            upstream = catalog.slot("moved").upstream
            ctx = CallContext(invocation_id="route-1", timeout=10.0)
            assert (await upstream.invoke("route", {"region": "eu", "zone": "a"}, ctx)).content[0][
                "text"
            ] == "eu/a"
            state.header_on = "zone"  # redeployed in place: no notice
            result = await upstream.invoke("route", {"region": "us", "zone": "b"}, ctx)
            assert result.content[0]["text"] == "us/b"
            assert state.events.count(f"call route {MODERN}") == 2  # the stale attempt never ran
            await until(
                lambda: (
                    "x-mcp-header"
                    in catalog.resolve("moved__route").input_schema["properties"]["zone"]
                )
            )
        finally:
            await catalog.close()


# ------------------------------------------------------------------------------ spawning


TINY = str(Path(__file__).parent / "mcp_fixtures" / "tiny_server.py")
_spawn_ticks: list[int] | None = (
    None  # while a test records: the ticker's count at each spawn of TINY
)
_ticks = [0]


def _on_audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen" and _spawn_ticks is not None and TINY in map(str, args[1]):
        _spawn_ticks.append(_ticks[0])


async def test_stdio_servers_starting_together_are_spawned_a_few_at_a_time_with_the_loop_free_between() -> (
    None
):
    """A spawn holds the event loop (under uvloop a fork of the bridge's memory, 5 to 30 ms), and
    the stdio servers of a start all spawn at once: at most SPAWNS_AT_ONCE in one iteration of the
    loop, which runs other work between (a request to the server), rather than all in one."""
    global _spawn_ticks

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0)
            _ticks[0] += 1

    sys.addaudithook(
        _on_audit
    )  # for good: an audit hook cannot be removed; it records only while asked
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [
                {"name": f"tiny{i}", "kind": "mcp", "command": "python", "args": [TINY]}
                for i in range(12)
            ],
        }
    )
    counting = asyncio.create_task(ticker())
    _spawn_ticks = []
    try:
        async with Bridge(config) as bridge:
            assert [s.health.state for s in bridge.catalog.slots.values()] == ["ready"] * 12
        spawned = list(_spawn_ticks)
    finally:
        _spawn_ticks = None
        counting.cancel()
    assert len(spawned) == 12, spawned
    per_iteration = Counter(spawned)
    assert (
        max(per_iteration.values()) <= SPAWNS_AT_ONCE and len(per_iteration) >= 12 // SPAWNS_AT_ONCE
    ), spawned


# ------------------------------------------------------------------------------ mcpServers


@module_loop
async def test_mcp_servers_block_loads_and_works(http_server: tuple[str, FixtureState]) -> None:
    url, _ = http_server
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "mcpServers": {
                "local": {
                    "command": "python",
                    "args": [FIXTURE],
                    "env": {"FIXTURE_TOKEN": "s3cret-value"},
                },
                "remote": {"type": "http", "url": url, "headers": {"X-Client": "bridge-tests"}},
                "off": {"command": "does-not-exist", "disabled": True},
            },
        },
        source="claude_desktop_config.json",
        base_dir=str(ROOT),
    )
    assert [(u.name, u.enabled) for u in config.upstreams] == [
        ("local", True),
        ("remote", True),
        ("off", False),
    ]
    async with Bridge(config) as bridge:
        states = {h.name: h.state for h in bridge.catalog.health()}
        assert states == {"local": "ready", "remote": "ready", "off": "disabled"}
        for name in ("local__echo", "remote__echo"):
            result = await call(bridge, name, {"text": "via mcpServers"})
            assert result.content == [{"type": "text", "text": "via mcpServers"}]
        health = await bridge.catalog.slot("local").upstream.health()
        assert health["transport"] == "stdio" and health["server"] == {
            "name": "fixture",
            "version": "1.0",
        }


# ------------------------------------------------------------------------------ demo server


@module_loop
async def test_demo_server_over_stdio_and_http() -> None:
    from bridge.demo.mcp_server import build_server as build_demo

    async with serve_asgi(build_demo().streamable_http_app()) as base:
        config = parse_config(
            {
                "store": {"path": ":memory:"},
                "upstreams": [
                    # the configs/demo.yaml entry, with cwd resolved from the configs folder
                    {
                        "name": "demo_mcp",
                        "kind": "mcp",
                        "command": "python",
                        "args": ["-m", "bridge.demo.mcp_server"],
                        "cwd": "..",
                    },
                    {"name": "demo_http", "kind": "mcp", "url": f"{base}/mcp"},
                ],
            },
            source="configs/demo.yaml",
            base_dir=str(ROOT / "configs"),
        )
        async with Bridge(config) as bridge:
            for up in ("demo_mcp", "demo_http"):
                assert bridge.catalog.slot(up).health.state == "ready"
                stats = await call(bridge, f"{up}__text_stats", {"text": "two words\nand more"})
                assert stats.structured_content == {"characters": 18, "words": 4, "lines": 2}
                assert (
                    await call(bridge, f"{up}__add", {"a": 1.5, "b": 2})
                ).structured_content == {"sum": 3.5}
