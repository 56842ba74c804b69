"""Round trip: bridge A (a real MCP server over stdio, a real OpenAPI service, and an in-test
upstream for the failure classes) serves REST; bridge B federates A through each A2T dialect.
B's declarations keep A's native mappings, descriptions and safety facts, and calls through B
reach A's upstreams and come back with the same results and the same error classes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from adapters.a2t.upstream import OFF_LOOP_TOOLS, A2TUpstream
from bridge.catalog import exposed_name
from bridge.config import parse_config
from bridge.demo.openapi_service import build_app as notes_app
from bridge.model import BridgeError, ToolError, UpstreamResult
from bridge.runtime import Bridge
from bridge.search.tooltext import function_name
from bridge.serve.app import build_app, close_app
from tests.fakes import FakeConfig, FakeUpstream, tool
from tests.serve.rest_env import indexed
from tests.servers import serve_asgi

ROOT = Path(__file__).resolve().parents[2]


def normalized(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if not (k == "required" and v == [])}


def comparable(result: Any) -> tuple[Any, ...]:
    error = result.error.error_class if result.error else None
    return result.is_error, error, result.content, result.structured_content


async def start_a(notes_url: str) -> tuple[Bridge, FakeUpstream]:
    fake = FakeUpstream(
        FakeConfig(name="fake", timeout=0.5),
        tools=[
            tool("echo"),
            tool("wipe", destructive=True),
            tool("greet", props={"text": {"type": "string"}}, required=["text"]),
        ],
    )
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [
                {
                    "name": "tools",
                    "kind": "mcp",
                    "command": "python",
                    "args": ["-m", "bridge.demo.mcp_server"],
                    "cwd": str(ROOT),
                },
                {
                    "name": "notes",
                    "kind": "openapi",
                    "spec": str(ROOT / "bridge" / "demo" / "openapi_demo.yaml"),
                    "base_url": notes_url,
                    "auth": {"type": "apiKey", "value": "round-trip-key"},
                },
            ],
        }
    )
    bridge = Bridge(config, extra_upstreams=[fake])
    await bridge.start()
    assert {h.name: h.state for h in bridge.catalog.health()} == {
        "tools": "ready",
        "notes": "ready",
        "fake": "ready",
    }
    # a breaking change of fake__greet: version 1 took `text`, version 2 requires `name`
    fake.tools = [
        *fake.tools[:2],
        tool("greet", props={"name": {"type": "string"}}, required=["name"]),
    ]
    bridge.catalog.apply_tools("fake", fake.tools)
    await indexed(bridge)
    return bridge, fake


async def test_bridge_b_federates_bridge_a_through_each_dialect():
    async with TestServer(notes_app(api_key="round-trip-key"), host="127.0.0.1") as notes:
        a, fake = await start_a(str(notes.make_url("")).rstrip("/"))
        app = build_app(a)
        federating: dict[str, Bridge] = {}
        try:
            async with serve_asgi(app) as base:
                for dialect in ("ietf", "a2t"):
                    b = federating[dialect] = Bridge(
                        parse_config(
                            {
                                "store": {"path": ":memory:"},
                                "upstreams": [
                                    {
                                        "name": "a",
                                        "kind": "a2t",
                                        "url": base,
                                        "dialect": dialect,
                                        "retries": {"count": 0},
                                        "pins": {"fake__greet": 1} if dialect == "ietf" else {},
                                    }
                                ],
                                "surfaces": [{"name": "default", "allow_destructive": True}],
                            }
                        )
                    )
                    await b.start()
                    assert b.catalog.slot("a").health.state == "ready", b.catalog.slot(
                        "a"
                    ).health.reason
                for dialect, b in federating.items():
                    await check_declarations(a, b, dialect)
                    await check_calls(a, b, fake, dialect)
                # a tool A dropped after B listed it
                fake.tools = [t for t in fake.tools if t.name != "echo"]
                a.catalog.apply_tools("fake", fake.tools)
                for b in federating.values():
                    gone = await b.invoker.invoke("a__fake__echo", {"text": "x"})
                    assert gone.error.error_class == "unknown_tool"
        finally:
            for b in federating.values():
                await b.close()
            await close_app(app)
            await a.close()


async def check_declarations(a: Bridge, b: Bridge, dialect: str) -> None:
    a_decls = {d.name: d for d in a.catalog.declarations()}
    assert {"tools__echo", "tools__add", "notes__createNote", "notes__getNote"} <= set(a_decls)
    for name, a_decl in a_decls.items():
        b_decl = b.catalog.resolve(exposed_name("a", name))
        assert b_decl is not None, name
        assert b_decl.description == a_decl.description, name
        assert b_decl.title == a_decl.title and b_decl.tool_kind == a_decl.tool_kind, name
        assert b_decl.safety == a_decl.safety, name
        mapping = b_decl.external_mappings[0]
        assert mapping["upstream_mappings"] == a_decl.external_mappings, (
            name
        )  # A's native mappings, kept
        assert function_name(b_decl) == a_decl.native_name, (
            name
        )  # B's tool search knows the function by A's name
        assert mapping["source"] == ("ietf-a2t" if dialect == "ietf" else "a2t")
        if name != "fake__greet":
            assert normalized(b_decl.input_schema) == normalized(a_decl.input_schema), name
            assert b_decl.output_schema == a_decl.output_schema, name
    echo = b.catalog.resolve("a__tools__echo").external_mappings[0]["upstream_mappings"][0]
    assert (echo["source"], echo["tool_name"]) == ("mcp", "echo")
    create = b.catalog.resolve("a__notes__createNote").external_mappings[0]["upstream_mappings"][0]
    assert (create["source"], create["operation_id"], create["method"]) == (
        "openapi",
        "createNote",
        "POST",
    )
    if dialect == "ietf":
        greet = b.catalog.resolve("a__fake__greet")
        assert (
            greet.external_mappings[0]["version"] == 1
            and greet.external_mappings[0]["current_version"] == 2
        )
        assert "text" in greet.input_schema["properties"]  # the pinned version's schema


async def same(a: Bridge, b: Bridge, name: str, arguments: dict[str, Any], **a_kwargs: Any) -> Any:
    via_b = await b.invoker.invoke(exposed_name("a", name), arguments)
    direct = await a.invoker.invoke(name, arguments, **a_kwargs)
    assert comparable(via_b) == comparable(direct), (name, via_b.to_json(), direct.to_json())
    return via_b


async def check_calls(a: Bridge, b: Bridge, fake: FakeUpstream, dialect: str) -> None:
    assert (await same(a, b, "tools__echo", {"text": "round trip"})).content == [
        {"type": "text", "text": "round trip"}
    ]
    assert (await same(a, b, "tools__add", {"a": 2, "b": 3.5})).structured_content == {"sum": 5.5}
    await same(a, b, "tools__text_stats", {"text": "two words\nand lines"})
    # B validates with A's schema before anything runs: same class (the message names B's tool)
    refused = await b.invoker.invoke("a__tools__echo", {})
    assert (
        refused.error.error_class
        == (await a.invoker.invoke("tools__echo", {})).error.error_class
        == "invalid_arguments"
    )

    created = await b.invoker.invoke(
        "a__notes__createNote", {"title": "from B", "body": "hello", "tags": ["rt"]}
    )
    assert not created.is_error, created.to_json()
    note_id = created.structured_content["id"]
    await same(a, b, "notes__getNote", {"id": note_id})
    await same(a, b, "notes__listNotes", {"tag": "rt"})
    missing = await same(a, b, "notes__getNote", {"id": 424242})
    assert missing.is_error

    # A's failure classes arrive unchanged
    fake.raise_error = BridgeError("slow down", error_class="rate_limited", retry_after=0.1)
    assert (await same(a, b, "fake__echo", {"text": "x"})).error.error_class == "rate_limited"
    fake.raise_error = BridgeError(
        "vendor down", error_class="dependency_unavailable", retry_after=0.1
    )
    assert (
        await same(a, b, "fake__echo", {"text": "x"})
    ).error.error_class == "dependency_unavailable"
    fake.raise_error = None
    fake.result = UpstreamResult(
        is_error=True,
        error=ToolError(error_class="execution_failed", message="disk on fire"),
        content=[{"type": "text", "text": "disk on fire"}],
    )
    assert (await same(a, b, "fake__echo", {"text": "x"})).error.message == "disk on fire"
    fake.result = None
    fake.gate = asyncio.Event()
    assert (await same(a, b, "fake__echo", {"text": "x"})).error.error_class == "timeout"
    fake.gate = None
    denied = await b.invoker.invoke(
        "a__fake__wipe", {}
    )  # B allows destructive tools; A's surface does not
    assert denied.error.error_class == "permission_denied" and "destructive" in denied.error.message

    if (
        dialect == "ietf"
    ):  # B pinned greet to version 1: A refuses it clearly, as A's own pinned call does
        pinned = await b.invoker.invoke("a__fake__greet", {"text": "hi"})
        direct = await a.invoker.invoke("fake__greet", {"text": "hi"}, version=1)
        assert pinned.error.error_class == direct.error.error_class == "capability_gap"
        assert "can no longer be served" in pinned.error.message


@pytest.mark.parametrize("dialect", ["ietf", "a2t"])
async def test_a_large_a2t_listing_is_read_into_tools_off_the_event_loop(monkeypatch, dialect):
    """Bridge B reads a listing of OFF_LOOP_TOOLS records or more on a worker thread (calls keep
    being served meanwhile), and every tool arrives as from a small one."""
    ran_on: list[bool] = []
    method = {"ietf": "_parse_signatures", "a2t": "_parse_tools"}[dialect]
    original = getattr(A2TUpstream, method)

    def record(self: A2TUpstream, raw: list[Any]) -> Any:
        ran_on.append(threading.current_thread() is threading.main_thread())
        return original(self, raw)

    monkeypatch.setattr(A2TUpstream, method, record)
    many = FakeUpstream(
        FakeConfig(name="many"), tools=[tool(f"op_{i:04d}") for i in range(OFF_LOOP_TOOLS + 5)]
    )
    a = Bridge(
        parse_config({"store": {"path": ":memory:"}, "search": {"semantic": "off"}}),
        extra_upstreams=[many],
    )
    await a.start()
    app = build_app(a)
    try:
        async with serve_asgi(app) as base:
            b = Bridge(
                parse_config(
                    {
                        "store": {"path": ":memory:"},
                        "search": {"semantic": "off"},
                        "upstreams": [
                            {"name": "a", "kind": "a2t", "url": base, "dialect": dialect}
                        ],
                    }
                )
            )
            await b.start()
            try:
                assert b.catalog.slot("a").health.state == "ready", b.catalog.slot(
                    "a"
                ).health.reason
                names = {function_name(d) for d in b.catalog.declarations()}
                assert names == {f"op_{i:04d}" for i in range(OFF_LOOP_TOOLS + 5)}
                assert ran_on == [False]
                assert (
                    await b.invoker.invoke(exposed_name("a", "many__op_0007"), {"text": "x"})
                ).status == "succeeded"
            finally:
                await b.close()
    finally:
        await close_app(app)
        await a.close()
