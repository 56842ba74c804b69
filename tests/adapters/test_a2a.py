"""A2A upstream, end to end: real a2a-sdk agents on loopback (protocol 1.0 and 0.3, JSON-RPC and
HTTP+JSON, streaming and not) called through the bridge's pipeline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from a2a.types import AgentSkill
from aiohttp import web
from aiohttp.test_utils import TestServer

from adapters.a2a import transport as a2a_transport
from adapters.a2a.mapping import TOOL_KIND
from adapters.a2a.upstream import A2AUpstream
from bridge.config import ConfigError, parse_config
from bridge.model import BridgeError, ToolProgress
from bridge.runtime import Bridge
from bridge.telemetry import CallOrigin
from bridge.upstream import CallContext
from tests.adapters.a2a_fixtures.agent import AgentControl, build_agent
from tests.adapters.a2a_fixtures.old_sdk import REQUESTS, old_agent_app, text_message
from tests.servers import (
    clear_proxy_environment,
    forward_proxy,
    free_port,
    proxy_loopback_too,
    serve_asgi,
)


async def until(predicate: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def agent(**options: Any) -> AsyncIterator[tuple[str, AgentControl]]:
    port = options.pop("port", None) or free_port()
    host = options.pop("host", "127.0.0.1")
    base = f"http://{host}:{port}"
    app, control = build_agent(base, **options)
    async with serve_asgi(app, port=port, host=host):
        yield base, control


@contextlib.asynccontextmanager
async def bridge(**upstream: Any) -> AsyncIterator[Bridge]:
    config = parse_config(
        {"store": {"path": ":memory:"}, "upstreams": [{"name": "peer", "kind": "a2a", **upstream}]}
    )
    instance = Bridge(config)
    await instance.start()
    try:
        yield instance
    finally:
        await instance.close()


class Progress:
    def __init__(self) -> None:
        self.records: list[ToolProgress] = []

    async def __call__(self, record: ToolProgress) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.message or "" for r in self.records]


# ---------------------------------------------------------------------------- discovery


async def test_each_skill_becomes_a_peer_agent_tool():
    async with agent() as (base, _), bridge(base_url=base) as b:
        assert b.catalog.slot("peer").health.state == "ready"
        names = sorted(d.name for d in b.catalog.declarations())
        assert names == [
            "peer__ask",
            "peer__echo",
            "peer__fail",
            "peer__files",
            "peer__reask",
            "peer__reject",
            "peer__reply",
            "peer__slow",
            "peer__wait",
        ]
        echo = b.catalog.resolve("peer__echo")
        assert echo.tool_kind == TOOL_KIND
        assert echo.title == "Echo"
        assert (
            echo.description.startswith("Repeat the input back.") and "- say hi" in echo.description
        )
        assert echo.search_hint == "util echo" and echo.tags == ["util", "echo"]
        schema = echo.input_schema
        assert set(schema["properties"]) == {"message", "data", "context_id", "task_id"}
        assert schema["required"] == ["message"]
        assert schema["x-a2a-input-modes"] == ["text/plain", "application/json"]
        mapping = echo.external_mappings[0]
        assert mapping["source"] == "a2a" and mapping["agent_skill_id"] == "echo"
        assert mapping["agent_card_url"] == f"{base}/.well-known/agent-card.json"
        # a skill that takes only JSON requires `data` instead of `message`
        assert b.catalog.resolve("peer__files").input_schema["required"] == ["data"]
        details = await b.catalog.slot("peer").upstream.health()
        assert (
            details["transport"] == "JSONRPC"
            and details["protocol_version"] == "1.0"
            and details["streaming"] is True
        )


async def test_agent_without_skills_is_one_tool():
    async with (
        agent(skills=[], name="Solo Helper") as (base, _control),
        bridge(card_url=f"{base}/.well-known/agent-card.json") as b,
    ):
        [decl] = list(b.catalog.declarations())
        assert (
            decl.name == "peer__solo_helper" and decl.external_mappings[0]["agent_skill_id"] is None
        )
        result = await b.invoker.invoke("peer__solo_helper", {"message": "hi"})
        assert result.status == "succeeded" and result.content[0]["text"] == "echo: hi"


async def test_skills_without_an_id_are_left_out_with_a_warning(caplog):
    nameless = [AgentSkill(name="Mystery", description="No id given", tags=[])]
    async with (
        agent(skills=nameless, name="Solo Helper") as (base, _),
        bridge(card_url=f"{base}/.well-known/agent-card.json") as b,
    ):
        [decl] = list(
            b.catalog.declarations()
        )  # not zero tools: the agent as a whole, as without skills
        assert decl.name == "peer__solo_helper"
        assert "skill 'Mystery' has no id and is left out" in caplog.text
        result = await b.invoker.invoke("peer__solo_helper", {"message": "hi"})  # and it answers
        assert result.status == "succeeded" and result.content[0]["text"] == "echo: hi"


async def test_an_agents_root_given_as_card_url_fails_with_the_fix():
    # the agent answered 405 at its root, and nothing said that card_url is the card itself
    async with (
        agent(skills=[], name="Solo Helper") as (base, _),
        bridge(card_url=base, start_timeout=2, retry_initial=30) as b,
    ):
        reason = b.catalog.slot("peer").health.reason
        assert "answered HTTP" in reason and f"set base_url: {base} instead" in reason
        assert f"{base}/.well-known/agent-card.json" in reason
    async with (
        agent(skills=[], name="Solo Helper") as (base, _),
        bridge(base_url=base) as b,
    ):  # the fix works
        assert [d.name for d in b.catalog.declarations()] == ["peer__solo_helper"]


def test_config_needs_exactly_one_location():
    with pytest.raises(ConfigError, match="exactly one of card_url"):
        parse_config({"upstreams": [{"name": "p", "kind": "a2a"}]})
    with pytest.raises(ConfigError, match="unknown key `card_ur`"):
        parse_config({"upstreams": [{"name": "p", "kind": "a2a", "card_ur": "http://x"}]})


# ---------------------------------------------------------------------------- calls


@pytest.mark.parametrize("streaming", [False, True])
async def test_an_answer_past_max_response_bytes_is_refused_as_it_arrives(streaming):
    async with (
        agent() as (base, _control),
        bridge(base_url=base, streaming=streaming, max_response_bytes=64 << 10) as b,
    ):
        small = await b.invoker.invoke("peer__echo", {"message": "hi"})
        assert small.status == "succeeded"
        large = await b.invoker.invoke(
            "peer__echo", {"message": "x" * (200 << 10)}
        )  # echoed back: past 64 KiB
        assert large.is_error and large.error.error_class == "result_too_large", large.error
        assert "max_response_bytes=65536" in large.error.message
        assert b.catalog.slot("peer").health.state == "ready"  # a large answer is no lost agent
        assert (await b.invoker.invoke("peer__echo", {"message": "again"})).status == "succeeded"


async def test_an_agent_on_another_loopback_address_is_reached_directly_whatever_the_proxies(
    monkeypatch,
):
    """httpx's mounts name hosts, not 127.0.0.0/8: the agent's own loopback host is named too."""
    clear_proxy_environment(monkeypatch)
    async with agent(host="127.0.0.2") as (base, _control), forward_proxy() as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        async with bridge(base_url=base) as b:
            assert (
                await b.invoker.invoke("peer__echo", {"message": "direct"})
            ).status == "succeeded"
        assert seen == []


async def test_interfaces_a_card_names_on_other_loopback_addresses_are_reached_directly_whatever_the_proxies(
    monkeypatch,
):
    """The card on 127.0.0.1 names the agent's interfaces on 127.0.0.3, a host no mount names:
    every loopback address is reached directly, not only the card's."""
    clear_proxy_environment(monkeypatch)
    async with agent(host="127.0.0.3") as (elsewhere, control), forward_proxy() as (proxy, seen):
        async with card_host(_card_json(control), []) as home:
            monkeypatch.setenv("HTTP_PROXY", proxy)
            async with bridge(base_url=home) as b:
                assert (
                    await b.invoker.invoke("peer__echo", {"message": "direct"})
                ).status == "succeeded"
            assert [
                r for r in control.requests if not r["path"].startswith("/.well-known")
            ]  # the calls went there
            assert seen == []
            proxy_loopback_too(monkeypatch)
            async with bridge(base_url=home) as b:
                assert (
                    await b.invoker.invoke("peer__echo", {"message": "proxied"})
                ).status == "succeeded"
            assert any(line.startswith(f"POST {elsewhere}") for line in seen), seen


@pytest.mark.parametrize("streaming", [False, True])
async def test_agents_are_reached_through_the_environment_proxy_unless_no_proxy_names_them(
    streaming, monkeypatch
):
    """HTTP_PROXY/ALL_PROXY/NO_PROXY count as for any httpx client, and max_response_bytes still
    bounds an answer that comes through the proxy."""
    clear_proxy_environment(monkeypatch)
    async with agent() as (base, _control), forward_proxy() as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        async with bridge(base_url=base, streaming=streaming) as b:
            assert (
                await b.invoker.invoke("peer__echo", {"message": "loopback"})
            ).status == "succeeded"
        assert seen == []  # a loopback host is reached directly, whatever the proxies
        proxy_loopback_too(monkeypatch)
        for variable in ("HTTP_PROXY", "ALL_PROXY"):
            clear_proxy_environment(monkeypatch)
            monkeypatch.setenv(variable, proxy)
            seen.clear()
            async with bridge(base_url=base, streaming=streaming, max_response_bytes=64 << 10) as b:
                assert (
                    await b.invoker.invoke("peer__echo", {"message": "via proxy"})
                ).status == "succeeded"
                large = await b.invoker.invoke("peer__echo", {"message": "x" * (200 << 10)})
                assert (
                    large.error.error_class == "result_too_large"
                    and "max_response_bytes=65536" in large.error.message
                )
            assert f"GET {base}/.well-known/agent-card.json" in seen, seen
            assert sum(line.startswith("POST " + base) for line in seen) >= 2, (
                seen
            )  # both calls went through it
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        seen.clear()
        async with bridge(base_url=base, streaming=streaming) as b:
            assert (
                await b.invoker.invoke("peer__echo", {"message": "direct"})
            ).status == "succeeded"
        assert seen == []


async def test_a_proxy_the_client_cannot_speak_fails_the_start_saying_so(monkeypatch):
    clear_proxy_environment(monkeypatch)
    monkeypatch.setenv("ALL_PROXY", "socks5://user:pw-1234@127.0.0.1:1080")
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [
                {"name": "peer", "kind": "a2a", "base_url": f"http://127.0.0.1:{free_port()}"}
            ],
        }
    )
    up = A2AUpstream(config.upstreams[0])
    with pytest.raises(BridgeError, match="is a socks5:// proxy") as raised:
        await up.start()
    assert raised.value.recoverability == "setup" and "pw-1234" not in raised.value.message
    await up.close()


@pytest.mark.parametrize("streaming", [False, True])
async def test_calls_reuse_their_connections(streaming):
    # the SDK stops reading an event stream at the task's last event, and the connection, its
    # answer not read to the end, was closed: a new connection (and TLS handshake) every call
    async with agent() as (base, control), bridge(base_url=base, streaming=streaming) as b:
        for i in range(20):
            assert (
                await b.invoker.invoke("peer__echo", {"message": f"hi {i}"})
            ).status == "succeeded"
        calls = [
            entry for entry in control.requests if not entry["path"].startswith("/.well-known")
        ]
        connections = len({entry["client"] for entry in calls})
        assert len(calls) >= 20 and connections <= 5, connections


async def test_non_streaming_reply_with_ids_in_native_ref():
    async with agent() as (base, control), bridge(base_url=base, streaming=False) as b:
        result = await b.invoker.invoke("peer__echo", {"message": "hi", "data": {"n": 4}})
        assert result.status == "succeeded" and not result.is_error
        assert result.content[0] == {"type": "text", "text": "echo: hi"}
        assert result.structured_content == {"received": {"n": 4}}
        ref = result.native_ref
        assert (
            ref["source"] == "a2a"
            and ref["agent_skill_id"] == "echo"
            and ref["state"] == "completed"
        )
        assert ref["task_id"] and ref["context_id"] and ref["message_id"] and ref["artifact_id"]
        assert control.methods()[0] == "SendMessage"
        [sent] = [
            json.loads(r["body"])
            for r in control.requests
            if r["body"] and json.loads(r["body"])["method"] == "SendMessage"
        ]
        assert sent["params"]["message"]["metadata"] == {"skill_id": "echo"}
        assert (
            sent["params"]["configuration"]["returnImmediately"] is True
        )  # then followed by polling
        assert all(
            r["headers"].get("a2a-version") == "1.0" for r in control.requests if r["path"] == "/"
        )


async def test_streaming_long_task_reports_progress():
    async with agent() as (base, control), bridge(base_url=base) as b:
        progress = Progress()
        result = await b.invoker.invoke(
            "peer__slow", {"message": "go", "data": {"steps": 3}}, progress=progress
        )
        assert result.status == "succeeded" and result.content == [
            {"type": "text", "text": "done after 3 steps"}
        ]
        assert control.methods() == ["SendStreamingMessage"]
        steps = [m for m in progress.messages if m.startswith("working")]
        assert steps == ["working: step 1 of 3", "working: step 2 of 3", "working: step 3 of 3"]
        assert progress.messages[-1] == "completed"
        assert all(r.task_id == result.native_ref["task_id"] for r in progress.records)
        assert [r.sequence for r in progress.records] == list(range(1, len(progress.records) + 1))


async def test_agent_without_streaming_is_polled_to_completion():
    async with (
        agent(streaming=False) as (base, control),
        bridge(base_url=base, poll_interval=0.01) as b,
    ):
        progress = Progress()
        result = await b.invoker.invoke(
            "peer__slow", {"message": "go", "data": {"steps": 4}}, progress=progress
        )
        assert result.status == "succeeded" and result.content[0]["text"] == "done after 4 steps"
        methods = control.methods()
        assert methods[0] == "SendMessage" and set(methods[1:]) == {"GetTask"} and len(methods) > 2
        assert (
            any(m.startswith("working: step") for m in progress.messages)
            and progress.messages[-1] == "completed"
        )


@pytest.mark.parametrize("streaming", [True, False])
async def test_input_required_is_continued_with_task_and_context_ids(streaming):
    async with (
        agent() as (base, _),
        bridge(base_url=base, streaming=streaming, poll_interval=0.01) as b,
    ):
        first = await b.invoker.invoke("peer__ask", {"message": "book me a trip"})
        assert first.status == "needs_input" and first.is_error is False
        ids = {k: first.structured_content[k] for k in ("task_id", "context_id")}
        assert first.structured_content["state"] == "input_required"
        assert first.structured_content["question"] == "Which city?"
        assert (
            first.native_ref["task_id"] == ids["task_id"]
            and first.native_ref["context_id"] == ids["context_id"]
        )
        assert (
            first.content[0]["text"] == "Which city?"
            and ids["task_id"] in first.content[-1]["text"]
        )
        second = await b.invoker.invoke("peer__ask", {"message": "Lisbon", **ids})
        assert (
            second.status == "succeeded" and second.content[0]["text"] == "booked a trip to Lisbon"
        )
        assert second.native_ref["task_id"] == ids["task_id"]
        unknown = await b.invoker.invoke(
            "peer__ask", {"message": "Oslo", "task_id": "no-such-task"}
        )
        assert unknown.is_error and unknown.error.error_class == "invalid_arguments"


async def test_failed_and_rejected_tasks_are_error_envelopes():
    async with agent() as (base, _), bridge(base_url=base) as b:
        failed = await b.invoker.invoke("peer__fail", {"message": "bake"})
        assert failed.is_error and failed.status == "failed"
        assert (
            failed.error.error_class == "execution_failed"
            and "the oven is on fire" in failed.error.message
        )
        assert failed.error.native_error_ref["state"] == "failed" and failed.native_ref["task_id"]
        rejected = await b.invoker.invoke("peer__reject", {"message": "mow the lawn"})
        assert rejected.is_error and rejected.status == "rejected"
        assert (
            rejected.error.error_code == "task_rejected"
            and rejected.error.recoverability == "change_arguments"
        )


@pytest.mark.parametrize("streaming", [True, False])
async def test_message_reply_and_part_kinds(streaming):
    async with agent() as (base, _), bridge(base_url=base, streaming=streaming) as b:
        reply = await b.invoker.invoke("peer__reply", {"message": "Ada"})
        assert reply.status == "succeeded" and reply.content == [
            {"type": "text", "text": "hello Ada"}
        ]
        assert reply.native_ref["reply_message_id"] and "task_id" not in reply.native_ref
        files = await b.invoker.invoke("peer__files", {"data": {}})
        kinds = [block["type"] for block in files.content]
        assert kinds == ["resource_link", "image", "text"]
        assert (
            files.content[0]["uri"] == "https://example.org/report.pdf"
            and files.content[0]["name"] == "report.pdf"
        )
        assert files.content[1]["mimeType"] == "image/png"
        assert files.structured_content == {"rows": 2, "ok": True}


async def test_data_nested_past_what_a2a_carries_is_refused_as_invalid_arguments(caplog):
    # protobuf holds an A2A data part 32 objects deep; the bridge takes arguments 64 levels deep
    def nested(levels: int) -> Any:
        value: Any = "x"
        for _ in range(levels):
            value = {"a": value}
        return value

    async with agent() as (base, _), bridge(base_url=base) as b:
        assert (await b.invoker.invoke("peer__files", {"data": nested(32)})).status == "succeeded"
        with caplog.at_level(logging.WARNING):
            deep = await b.invoker.invoke("peer__files", {"data": nested(33)})
        assert deep.status == "rejected" and deep.error.error_class == "invalid_arguments", (
            deep.error
        )
        assert (
            deep.error.details["errors"][0]["path"] == "/data" and "too deep" in deep.error.message
        )
        assert not [
            r for r in caplog.records if r.levelno >= logging.WARNING
        ]  # an answer, not a logged traceback


async def test_protocol_0_3_agent_found_at_the_older_card_path():
    async with agent(version="0.3") as (base, control):
        for streaming, method in ((False, "message/send"), (True, "message/stream")):
            async with bridge(base_url=base, streaming=streaming, poll_interval=0.01) as b:
                assert b.catalog.slot("peer").health.state == "ready"
                details = await b.catalog.slot("peer").upstream.health()
                assert (
                    details["card_url"].endswith("/.well-known/agent.json")
                    and details["protocol_version"] == "0.3.0"
                )
                result = await b.invoker.invoke("peer__echo", {"message": "old"})
                assert result.status == "succeeded" and result.content[0]["text"] == "echo: old"
                asked = await b.invoker.invoke("peer__ask", {"message": "trip"})
                ids = {k: asked.structured_content[k] for k in ("task_id", "context_id")}
                done = await b.invoker.invoke("peer__ask", {"message": "Rome", **ids})
                assert done.content[0]["text"] == "booked a trip to Rome"
                assert method in control.methods()
        card_paths = [r["path"] for r in control.requests if r["path"].startswith("/.well-known")]
        assert (
            "/.well-known/agent-card.json" in card_paths and "/.well-known/agent.json" in card_paths
        )


async def test_http_json_transport_when_preferred():
    async with agent() as (base, control), bridge(base_url=base, transport="HTTP+JSON") as b:
        result = await b.invoker.invoke("peer__echo", {"message": "rest"})
        assert result.content[0]["text"] == "echo: rest"
        assert control.methods() == ["POST /rest/message:stream"]
        assert (await b.catalog.slot("peer").upstream.health())["transport"] == "HTTP+JSON"


# ---------------------------------------------------------------------------- cancellation


async def test_cancelled_call_cancels_the_agent_task():
    async with agent() as (base, control), bridge(base_url=base) as b:
        progress = Progress()
        call = asyncio.create_task(
            b.invoker.invoke("peer__wait", {"message": "hold"}, progress=progress)
        )
        await until(lambda: "working: waiting" in progress.messages)  # the bridge knows the task id
        assert control.started.is_set()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        async with asyncio.timeout(5):
            await control.cancel_seen.wait()
        assert "CancelTask" in control.methods()


async def test_timed_out_call_cancels_the_agent_task():
    async with (
        agent(streaming=False) as (base, control),
        bridge(base_url=base, timeout=0.5, poll_interval=0.02) as b,
    ):
        result = await b.invoker.invoke("peer__wait", {"message": "hold"})
        assert result.is_error and result.error.error_class == "timeout"
        async with asyncio.timeout(5):
            await control.cancel_seen.wait()


# ---------------------------------------------------------------------------- availability and refresh


async def test_unreachable_agent_is_unavailable_then_recovers():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with bridge(base_url=base, retry_initial=0.05, retry_max=0.2, start_timeout=2) as b:
        slot = b.catalog.slot("peer")
        assert slot.health.state == "failed" and "cannot reach the agent card" in slot.health.reason
        down = await b.invoker.invoke("peer__echo", {"message": "x"})
        assert down.is_error and down.error.error_class == "unknown_tool"  # never listed yet
        async with agent(port=port):
            await until(lambda: slot.health.state == "ready")
            result = await b.invoker.invoke("peer__echo", {"message": "back"})
            assert result.content[0]["text"] == "echo: back"
        # the agent goes away while the bridge holds its tools
        lost = await b.invoker.invoke("peer__echo", {"message": "anyone?"})
        assert lost.is_error and lost.error.error_class == "dependency_unavailable"
        await until(lambda: slot.health.state == "unavailable")
        assert "stopped answering" in slot.health.reason or "cannot reach" in slot.health.reason
        assert b.catalog.resolve("peer__echo").loading_state == "unavailable"
        async with agent(port=port):
            await until(lambda: slot.health.state == "ready")
            again = await b.invoker.invoke("peer__echo", {"message": "again"})
            assert again.content[0]["text"] == "echo: again"


async def test_an_unreachable_agent_costs_little_cpu_to_try_again():
    # each start made a TLS context, reading the CA bundle: 30 ms of CPU on the event loop at every
    # retry of each agent that could not be reached
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [
                {"name": "peer", "kind": "a2a", "base_url": f"http://127.0.0.1:{free_port()}"}
            ],
        }
    )
    up = A2AUpstream(config.upstreams[0])
    begun = time.process_time()
    for _ in range(30):
        with pytest.raises(BridgeError, match="cannot reach the agent card"):
            await up.start()
    await up.close()
    assert time.process_time() - begun < 0.4


async def test_card_refresh_adds_a_skill():
    async with agent(
        skills=[AgentSkill(id="echo", name="Echo", description="Repeat.", tags=["util"])]
    ) as (base, control):
        async with bridge(base_url=base, card_refresh_interval=0.05) as b:
            assert [d.name for d in b.catalog.declarations()] == ["peer__echo"]
            control.add_skill(
                AgentSkill(
                    id="summarize", name="Summarize", description="Summarize text.", tags=["text"]
                )
            )
            await until(lambda: b.catalog.resolve("peer__summarize") is not None)
            result = await b.invoker.invoke("peer__summarize", {"message": "long text"})
            assert result.content[0]["text"] == "summarize: long text"
            card_fetches = [
                r for r in control.requests if r["path"] == "/.well-known/agent-card.json"
            ]
            assert any(
                "if-none-match" in r["headers"] for r in card_fetches
            )  # revalidated with the ETag


class SlowCard:
    """ASGI middleware: the card answers `delay` seconds late (0: at once)."""

    def __init__(self, app: Any) -> None:
        self.app, self.delay = app, 0.0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/.well-known") and self.delay:
            await asyncio.sleep(self.delay)
        await self.app(scope, receive, send)


async def test_a_card_refresh_answered_late_keeps_the_agent_ready_and_says_so_once(caplog):
    # a refresh took any failure to fetch the card, a read timeout too, for the agent gone: a card
    # answering slower than start_timeout marked the agent unavailable at once
    caplog.set_level(logging.INFO, logger="adapters.a2a")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    app, control = build_agent(base)
    slow = SlowCard(app)
    server = serve_asgi(slow, port=port)
    await server.__aenter__()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_exit(server)  # stopped in the test; at the end if it fails first
        b = await stack.enter_async_context(
            bridge(base_url=base, start_timeout=0.2, card_refresh_interval=0.05, retry_initial=30)
        )
        slot = b.catalog.slot("peer")
        changes: list[str] = []
        b.catalog.subscribe(
            lambda change: changes.append(slot.health.state) if change.state_changed else None
        )
        slow.delay = 0.5
        seen = len(control.requests)
        await until(
            lambda: (
                sum(r["path"] == "/.well-known/agent-card.json" for r in control.requests[seen:])
                >= 3
            )
        )
        assert changes == [] and slot.health.state == "ready", (slot.health, changes)
        assert (await b.invoker.invoke("peer__echo", {"message": "still"})).content[0][
            "text"
        ] == "echo: still"
        late = [r for r in caplog.records if "did not answer within 0.2s" in r.getMessage()]
        assert [r.levelno for r in late][:1] == [logging.WARNING] and all(
            r.levelno == logging.INFO for r in late[1:]
        ), late
        assert len(late) >= 2 and "refreshed again in 0.05s" in late[0].getMessage(), late[
            0
        ].getMessage()
        slow.delay = 0
        control.add_skill(
            AgentSkill(
                id="summarize", name="Summarize", description="Summarize text.", tags=["text"]
            )
        )
        await until(
            lambda: b.catalog.resolve("peer__summarize") is not None
        )  # the next refresh that answers reads the card
        # a refused connection still marks it unavailable
        await server.__aexit__(None, None, None)
        await until(lambda: slot.health.state == "unavailable")
        assert "cannot reach the agent card" in (slot.health.reason or ""), slot.health


# ---------------------------------------------------------------------------- auth


async def test_bearer_token_bound_to_the_card_scheme_and_never_leaked(caplog):
    token = "s3cret-bearer-value"
    caplog.set_level(logging.DEBUG)
    async with agent(bearer=token) as (base, control):
        async with bridge(base_url=base, auth={"bearer_token": token}) as b:
            result = await b.invoker.invoke("peer__echo", {"message": "with auth"})
            assert result.status == "succeeded"
            calls = [r for r in control.requests if not r["path"].startswith("/.well-known")]
            assert calls and all(r["headers"]["authorization"] == f"Bearer {token}" for r in calls)
            cards = [r for r in control.requests if r["path"].startswith("/.well-known")]
            assert cards and all(
                "authorization" not in r["headers"] for r in cards
            )  # the card is public
            assert (await b.catalog.slot("peer").upstream.health())["auth_schemes"] == ["bearer"]
        async with bridge(base_url=base, auth={"bearer_token": "wrong-token-value"}) as b:
            refused = await b.invoker.invoke("peer__echo", {"message": "x"})
            assert refused.error.error_class == "credential_missing" and refused.status == "denied"
            assert "wrong-token-value" not in json.dumps(refused.to_json())
        async with bridge(base_url=base) as b:
            assert b.catalog.resolve("peer__echo").blocked_reason == "credential_missing"
            missing = await b.invoker.invoke("peer__echo", {"message": "x"})
            assert missing.error.error_class == "credential_missing" and missing.status == "denied"
            assert (
                "set auth.bearer_token or auth.schemes." in missing.error.message
            )  # the keys to set
            details = await b.catalog.slot("peer").upstream.health()
            assert "auth.bearer_token" in details["credentials_missing"]
    # the bridge's side (adapter, a2a client, HTTP client) never logs the values; the test
    # agent's server in this same process is excluded, it logs its request headers at debug
    bridge_side = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith("a2a.server")
    )
    assert "Bearer" in bridge_side or "bearer" in bridge_side
    assert token not in bridge_side and "wrong-token-value" not in bridge_side


async def test_the_callers_w3c_trace_context_reaches_the_agent_with_every_request_of_the_call():
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with agent(streaming=False) as (base, control), bridge(base_url=base) as b:
        origin = CallOrigin("rest", traceparent=traceparent)
        result = await b.invoker.invoke("peer__echo", {"message": "traced"}, origin=origin)
        assert result.status == "succeeded"
        calls = [r for r in control.requests if not r["path"].startswith("/.well-known")]
        assert calls and all(r["headers"].get("traceparent") == traceparent for r in calls)


async def test_api_key_goes_where_the_card_says():
    async with agent(api_key=("X-Agent-Key", "k-12345678")) as (base, control):
        async with bridge(base_url=base, auth={"api_key": "k-12345678"}) as b:
            result = await b.invoker.invoke("peer__echo", {"message": "keyed"})
            assert result.status == "succeeded"
            assert control.requests[-1]["headers"]["x-agent-key"] == "k-12345678"
            cfg = b.catalog.slot("peer").upstream.config
            assert "k-12345678" not in repr(cfg) and "k-12345678" not in str(cfg.model_dump())


@contextlib.asynccontextmanager
async def card_host(card_doc: dict[str, Any], seen: list[dict[str, str]]) -> AsyncIterator[str]:
    """Another origin serving `card_doc` at both well-known paths and recording every request's
    headers (and query, as `?`)."""

    async def card_app(scope: Any, receive: Any, send: Any) -> None:
        from starlette.responses import JSONResponse

        seen.append(
            {k.decode(): v.decode() for k, v in scope["headers"]}
            | {"?": scope["query_string"].decode()}
        )
        await JSONResponse(card_doc)(scope, receive, send)

    async with serve_asgi(card_app, lifespan="off") as base:
        yield base


async def test_a_card_served_from_another_host_gets_no_credentials():
    """The card is public: its fetch never carries credentials, wherever it is."""
    async with agent(bearer="t-abcdefgh") as (agent_base, control):
        seen: list[dict[str, str]] = []
        async with card_host(_card_json(control), seen) as home:
            card_url = home.replace("127.0.0.1", "localhost") + "/card.json"
            async with bridge(
                card_url=card_url,
                auth={"bearer_token": "t-abcdefgh"},
                credential_origins=[agent_base],
            ) as b:
                result = await b.invoker.invoke("peer__echo", {"message": "x"})
                assert result.status == "succeeded"
        assert seen and all("authorization" not in h for h in seen)


@pytest.mark.parametrize("scheme", ["bearer", "api_key_header", "api_key_query"])
async def test_credentials_go_only_to_the_configured_origin_and_credential_origins(scheme):
    """A card on the configured origin naming its interfaces on another origin: that origin gets
    no credentials, whatever the card says (the tools are blocked, saying which origin and the
    key that lets them go there), until credential_origins lists it."""
    secret = "s3cret-value-1234"
    if scheme == "bearer":
        options: dict[str, Any] = {"bearer": secret}
        auth = {"bearer_token": secret}
    else:
        options = {"api_key": ("X-Agent-Key", secret)}
        auth = {"api_key": secret}
    async with agent(**options) as (elsewhere, control):
        card_doc = _card_json(control)
        if (
            scheme == "api_key_query"
        ):  # the agent does not check a query key; what is sent is what counts
            card_doc["securitySchemes"]["key"]["apiKeySecurityScheme"].update(
                {"location": "query", "name": "key"}
            )
            control.required_api_key = None
        seen: list[dict[str, str]] = []
        async with card_host(card_doc, seen) as home:
            async with bridge(base_url=home, auth=auth) as b:
                assert b.catalog.resolve("peer__echo").blocked_reason == "credential_missing"
                refused = await b.invoker.invoke("peer__echo", {"message": "x"})
                assert (
                    refused.error.error_class == "credential_missing" and refused.status == "denied"
                )
                assert (
                    f'credential_origins: ["{elsewhere}"]' in refused.error.message
                    and secret not in json.dumps(refused.to_json())
                )
                upstream = b.catalog.slot("peer").upstream
                with pytest.raises(BridgeError) as raised:
                    await upstream.invoke(
                        "echo", {"message": "x"}, CallContext(invocation_id="inv_test", timeout=5)
                    )
                said = raised.value.message
                assert (
                    raised.value.error_class == "credential_missing"
                    and f'credential_origins: ["{elsewhere}"]' in said
                )
                assert f"interface on {elsewhere}" in said and f"go only to {home}" in said
                details = await upstream.health()
                assert details["credentials_withheld"] == said and details[
                    "credential_origins"
                ] == [home]
            assert not [
                r for r in control.requests if not r["path"].startswith("/.well-known")
            ]  # nothing sent there
            assert all(
                secret not in json.dumps(h) for h in seen
            )  # nor to the card's origin: only cards were asked for

            async with bridge(base_url=home, auth=auth, credential_origins=[elsewhere + "/"]) as b:
                result = await b.invoker.invoke("peer__echo", {"message": "x"})
                assert result.status == "succeeded", result.error
                assert (await b.catalog.slot("peer").upstream.health())[
                    "credential_origins"
                ] == sorted([home, elsewhere])
            calls = [r for r in control.requests if not r["path"].startswith("/.well-known")]
            assert calls
            if scheme == "bearer":
                assert all(r["headers"]["authorization"] == f"Bearer {secret}" for r in calls)
            elif scheme == "api_key_header":
                assert all(r["headers"]["x-agent-key"] == secret for r in calls)
        assert all(secret not in json.dumps(h) for h in seen)


async def test_a_card_on_the_configured_origin_with_its_interfaces_there_is_unchanged():
    async with agent(bearer="t-abcdefgh") as (base, _control):
        async with bridge(base_url=base, auth={"bearer_token": "t-abcdefgh"}) as b:
            assert (await b.invoker.invoke("peer__echo", {"message": "x"})).status == "succeeded"
            details = await b.catalog.slot("peer").upstream.health()
            assert (
                details["credential_origins"] == [base] and details["credentials_withheld"] is None
            )
        async with bridge(base_url=base) as b:  # nothing to send: no origin receives anything
            assert (await b.catalog.slot("peer").upstream.health())["credential_origins"] == []


KEYED_SCHEMES = {
    "key": {"type": "apiKey", "in": "header", "name": "authorization"},
    "bearer": {"type": "http", "scheme": "bearer"},
}


def keyed_card(host: str, schemes: list[str], security: list[list[str]] | None) -> dict[str, Any]:
    """A 0.3 card declaring `schemes` of KEYED_SCHEMES in that order, and `security` (requirements
    naming schemes) when given."""
    body: dict[str, Any] = {
        "protocolVersion": "0.3.0",
        "name": "Keyed Agent",
        "description": "d",
        "url": f"http://{host}/",
        "version": "1",
        "preferredTransport": "JSONRPC",
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "e", "tags": []}],
        "securitySchemes": {name: KEYED_SCHEMES[name] for name in schemes},
    }
    if security is not None:
        body["security"] = [{name: [] for name in names} for names in security]
    return body


def keyed_agent(
    card: Callable[[web.Request], Awaitable[web.Response]],
) -> tuple[web.Application, list[str | None]]:
    """An echoing 0.3 agent serving `card`, and the Authorization headers its POSTs carry."""
    received: list[str | None] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "POST":
            received.extend(request.headers.getall("Authorization", [None]))
        return await handler(request)

    async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return text_message("echo", "agent", "t1", "c1")

    app = old_agent_app("0.3.0", rpc)
    app.router.add_get("/.well-known/agent-card.json", card)
    app.middlewares.append(record)
    return app, received


@pytest.mark.parametrize(
    ("schemes", "security", "sent", "why"),
    [
        (
            ["key", "bearer"],
            [["key", "bearer"]],
            "k-secret-1",
            "security requirement key + bearer puts key and bearer in one place",
        ),
        (
            ["key", "bearer"],
            [["bearer", "key"]],
            "Bearer t-secret-1",
            "security requirement bearer + key puts bearer and key in one place",
        ),
        (
            ["key", "bearer"],
            None,
            "k-secret-1",
            "schemes key and bearer put their credentials in one place",
        ),
        (
            ["bearer", "key"],
            None,
            "Bearer t-secret-1",
            "schemes bearer and key put their credentials in one place",
        ),
    ],
)
async def test_two_schemes_in_one_header_send_the_first_the_card_writes_and_say_so(
    schemes, security, sent, why, caplog
):
    # an apiKey named authorization beside a bearer scheme: the credential applied last was
    # sent, in an order (protobuf's map order) that changed from one process to the next
    caplog.set_level(logging.WARNING)

    async def card(request: web.Request) -> web.Response:
        return web.json_response(keyed_card(request.host, schemes, security))

    app, received = keyed_agent(card)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(
            base_url=str(http.make_url("")).rstrip("/"),
            auth={"bearer_token": "t-secret-1", "api_key": "k-secret-1"},
        ) as b,
    ):
        assert (await b.invoker.invoke("peer__echo", {"message": "x"})).status == "succeeded"
        details = await b.catalog.slot("peer").upstream.health()
    assert received == [sent]
    winner, loser = ("key", "bearer") if sent.startswith("k-") else ("bearer", "key")
    place = "authorization" if winner == "key" else "Authorization"
    [override] = details["credential_overrides"]
    assert override == (
        f"{why}, the {place} header, which a request carries once: {winner}'s credential is sent, not {loser}'s "
        f"(the first the {'requirement names' if security else 'card declares'})"
    ), override
    assert details["auth_schemes"] == [winner]
    assert override in caplog.text and "secret" not in override


async def test_a_card_refresh_reordering_its_security_schemes_changes_the_credential_sent():
    # the change check hashed the card with its keys sorted: a card whose only change was the
    # order of its schemes, which decides the credential sent, counted as unchanged
    served: dict[str, Any] = {"schemes": ["key", "bearer"], "security": None, "reversed": False}
    fetches: list[int] = []

    async def card(request: web.Request) -> web.Response:
        fetches.append(1)
        body = keyed_card(request.host, served["schemes"], served["security"])
        if served["reversed"]:  # the same card, its other keys written in another order
            body = dict(reversed(body.items()))
            body["securitySchemes"] = {
                name: dict(reversed(scheme.items()))
                for name, scheme in body["securitySchemes"].items()
            }
        return web.json_response(body)

    async def refreshed() -> None:
        seen = len(fetches)
        await until(lambda: len(fetches) >= seen + 2)  # one refresh whole, after the change

    app, received = keyed_agent(card)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(
            base_url=str(http.make_url("")).rstrip("/"),
            card_refresh_interval=0.05,
            auth={"bearer_token": "t-secret-1", "api_key": "k-secret-1"},
        ) as b,
    ):
        upstream: Any = b.catalog.slot("peer").upstream

        async def sent() -> str | None:
            assert (await b.invoker.invoke("peer__echo", {"message": "x"})).status == "succeeded"
            return received[-1]

        assert await sent() == "k-secret-1"
        served["schemes"] = ["bearer", "key"]
        await refreshed()
        assert await sent() == "Bearer t-secret-1"
        assert (await upstream.health())["auth_schemes"] == ["bearer"]
        served["security"] = [["key", "bearer"]]
        await refreshed()
        assert await sent() == "k-secret-1"
        served["security"] = [["bearer", "key"]]
        await refreshed()
        assert await sent() == "Bearer t-secret-1"
        installed = upstream._agent
        served["reversed"] = True  # keys whose order means nothing: the card is unchanged
        await refreshed()
        assert upstream._agent is installed and await sent() == "Bearer t-secret-1"


@pytest.mark.parametrize(
    "origin",
    [
        "agent.example.com",
        "https://agent.example.com/v1",
        "ftp://agent.example.com",
        "https://agent.example.com?x=1",
        "https://user@agent.example.com",
        "http://h:port",
    ],
)
def test_credential_origins_are_http_origins(origin):
    with pytest.raises(ConfigError) as raised:
        parse_config(
            {
                "upstreams": [
                    {
                        "name": "p",
                        "kind": "a2a",
                        "base_url": "http://127.0.0.1:9",
                        "credential_origins": [origin],
                    }
                ]
            }
        )
    text = str(raised.value)
    assert (
        "upstreams[0].credential_origins" in text
        and "is not an http(s) origin" in text
        and "scheme, host and port only" in text
    )


def _card_json(control: AgentControl) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(control.card)


def test_upstream_kind_is_registered():
    from bridge.upstream import upstream_class

    assert upstream_class("a2a") is A2AUpstream


# ---------------------------------------------------------------------------- the demo agent


async def test_demo_travel_desk_in_process():
    from bridge.demo.a2a_agent import build_app

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with (
        serve_asgi(build_app(base, step_seconds=0.01), port=port),
        bridge(base_url=base) as b,
    ):
        assert sorted(d.native_name for d in b.catalog.declarations()) == [
            "convert_currency",
            "packing_list",
            "plan_trip",
        ]
        asked = await b.invoker.invoke("peer__plan_trip", {"message": "plan a trip"})
        assert (
            asked.status == "needs_input"
            and "Where would you like to go?" in asked.structured_content["question"]
        )
        ids = {k: asked.structured_content[k] for k in ("task_id", "context_id")}
        planned = await b.invoker.invoke(
            "peer__plan_trip", {"message": "Lisbon, 2 days", **ids, "data": {"days": 2}}
        )
        assert (
            planned.status == "succeeded" and planned.structured_content["destination"] == "Lisbon"
        )
        progress = Progress()
        packed = await b.invoker.invoke(
            "peer__packing_list", {"message": "Oslo"}, progress=progress
        )
        assert "passport" in packed.structured_content["items"]
        assert [m for m in progress.messages if m.startswith("working")][
            -1
        ] == "working: step 4 of 4: adding gadgets"
        money = await b.invoker.invoke("peer__convert_currency", {"message": "100 EUR to JPY"})
        assert money.structured_content["result"] == 16200


async def test_demo_agent_started_by_launch():
    port = free_port()
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [
                {
                    "name": "travel",
                    "kind": "a2a",
                    "base_url": f"http://127.0.0.1:{port}",
                    "launch": {
                        "command": "python",
                        "args": ["-m", "bridge.demo.a2a_agent", "--port", str(port)],
                    },
                }
            ],
        },
        base_dir=str(Path(__file__).resolve().parents[2] / "configs"),
    )
    async with Bridge(config) as b:
        slot = b.catalog.slot("travel")
        assert slot.health.state == "ready", slot.health.reason
        result = await b.invoker.invoke("travel__convert_currency", {"message": "10 EUR to USD"})
        assert result.content[0]["text"] == "10 EUR = 10.8 USD (demo rate)"
        process = slot.sidecar.process
    assert process is not None and process.returncode is not None  # stopped with the bridge


async def test_a_launch_that_cannot_start_fails_its_upstream_with_the_reason_and_is_retried():
    # a command not found, or a cwd that is no folder, once ended the upstream's supervision
    # without a word: "connecting" for ever, with no reason and no retry
    def upstream(name: str, **launch: Any) -> dict[str, Any]:
        return {
            "name": name,
            "kind": "a2a",
            "base_url": f"http://127.0.0.1:{free_port()}",
            "retry_initial": 0.05,
            "retry_max": 0.1,
            "launch": launch,
        }

    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [
                upstream("nocommand", command="no-such-command-here"),
                upstream("nofolder", command="python", args=["-c", "pass"], cwd="no/such/folder"),
            ],
        },
        base_dir=str(Path(__file__).resolve().parents[2] / "configs"),
    )
    async with Bridge(config) as b:
        for name, said in (
            ("nocommand", "cannot start 'no-such-command-here'"),
            ("nofolder", "no/such/folder, which is not a folder"),
        ):
            slot = b.catalog.slot(name)
            await until(lambda slot=slot: slot.health.attempts >= 3)
            assert (
                slot.health.state == "failed"
                and said in slot.health.reason
                and "launch" in slot.health.reason
            ), slot.health.reason


async def test_an_answer_in_no_a2a_shape_is_an_execution_failure_saying_what_is_wrong(caplog):
    # a hand-written 0.3 agent whose task has a number for its id and a string for its status
    async def card(request: web.Request) -> web.Response:
        base = f"http://{request.host}/"
        return web.json_response(
            {
                "protocolVersion": "0.3.0",
                "name": "Odd",
                "description": "odd",
                "url": base,
                "version": "1",
                "preferredTransport": "JSONRPC",
                "capabilities": {"streaming": False},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "work", "name": "Work", "description": "Do work", "tags": []}],
            }
        )

    async def rpc(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(
            {
                "jsonrpc": "2.0",
                "id": body.get("id"),
                "result": {"kind": "task", "id": 12, "status": "weird"},
            }
        )

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    app.router.add_post("/", rpc)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/")) as b,
    ):
        result = await b.invoker.invoke("peer__work", {"message": "hi"})
    assert result.error.error_class == "execution_failed", result.error
    assert (
        "answered in a shape A2A does not have: " in result.error.message
        and "errors.pydantic.dev" not in result.error.message
    )
    assert "Traceback" not in caplog.text


async def test_a_card_naming_no_address_says_so():
    async def card(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "protocolVersion": "0.3.0",
                "name": "Nowhere",
                "description": "no url",
                "version": "1",
                "capabilities": {},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "work", "name": "Work", "description": "Do work", "tags": []}],
            }
        )

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/")) as b,
    ):
        reason = b.catalog.slot("peer").health.reason or ""
    assert "names no address to call: its card has no `url`" in reason, reason


# ---------------------------------------------------------------------------- mapping details


def test_auth_required_and_agent_side_cancel_map_to_results():
    from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus

    from adapters.a2a.mapping import TaskTracker, result_from_tracker

    ref = {
        "source": "a2a",
        "agent_card_url": "http://x/.well-known/agent-card.json",
        "agent_skill_id": "s",
        "message_id": "m",
    }
    question = Message(message_id="q", role=Role.ROLE_AGENT, parts=[Part(text="sign in first")])
    tracker = TaskTracker()
    tracker.replace(
        Task(
            id="t1",
            context_id="c1",
            status=TaskStatus(state=TaskState.TASK_STATE_AUTH_REQUIRED, message=question),
        )
    )
    waiting = result_from_tracker(tracker, ref)
    assert waiting.status == "needs_input" and not waiting.is_error
    assert waiting.structured_content == {
        "state": "auth_required",
        "task_id": "t1",
        "context_id": "c1",
        "question": "sign in first",
    }
    assert "authorization" in waiting.content[-1]["text"]

    canceled = TaskTracker()
    canceled.replace(
        Task(id="t2", context_id="c2", status=TaskStatus(state=TaskState.TASK_STATE_CANCELED))
    )
    result = result_from_tracker(canceled, ref)
    assert (
        result.is_error and result.status == "canceled" and result.error.error_class == "canceled"
    )


def test_artifact_chunks_are_appended_or_replaced():
    from a2a.types import Artifact, Part, StreamResponse, TaskArtifactUpdateEvent

    from adapters.a2a.mapping import TaskTracker

    tracker = TaskTracker()

    def chunk(text: str, append: bool) -> StreamResponse:
        event = TaskArtifactUpdateEvent(
            task_id="t",
            context_id="c",
            artifact=Artifact(artifact_id="a", parts=[Part(text=text)]),
            append=append,
        )
        return StreamResponse(artifact_update=event)

    assert tracker.apply(chunk("one ", False)) == ["artifact a"]
    tracker.apply(chunk("two", True))
    assert [p.text for p in tracker.task.artifacts[0].parts] == ["one ", "two"]
    tracker.apply(chunk("fresh", False))
    assert [p.text for p in tracker.task.artifacts[0].parts] == ["fresh"] and len(
        tracker.task.artifacts
    ) == 1


def test_an_answered_question_is_told_from_one_asked_again_by_its_status_timestamp():
    from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus
    from google.protobuf.timestamp_pb2 import Timestamp

    from adapters.a2a.mapping import TaskTracker

    sent_at, second = 1_700_000_000 * 10**9, 10**9

    def snapshot(at: int | None) -> Task:
        status = TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED)
        if at is not None:
            status.timestamp.CopyFrom(Timestamp(seconds=at // 10**9))
        history = [
            Message(message_id="q", role=Role.ROLE_AGENT, parts=[Part(text="Which city?")]),
            Message(message_id="sent", role=Role.ROLE_USER, parts=[Part(text="Paris")]),
        ]
        return Task(id="t", context_id="c", status=status, history=history)

    def settled(at: int | None, question_at: int | None) -> bool:
        tracker = TaskTracker(sent_message_id="sent", question_at=question_at, sent_at=sent_at)
        tracker.replace(snapshot(at))
        return tracker.settled

    # the question the bridge gave decides, whatever the agent's clock says of the moment of sending
    assert not settled(sent_at + 5 * second, question_at=sent_at + 5 * second)
    assert settled(sent_at - 5 * second, question_at=sent_at - 9 * second)
    # else the moment the answer was sent
    assert not settled(sent_at - second, question_at=None) and settled(
        sent_at + second, question_at=None
    )
    # and with no timestamp, the task is followed until it moves on
    assert not settled(None, question_at=None)


def test_input_schema_reflects_input_modes():
    from adapters.a2a.mapping import input_schema_for

    assert input_schema_for([])["required"] == [
        "message"
    ] and "x-a2a-input-modes" not in input_schema_for([])
    json_only = input_schema_for(["application/json"])
    assert json_only["required"] == ["data"] and json_only["x-a2a-input-modes"] == [
        "application/json"
    ]
    text_only = input_schema_for(["text/plain"])
    assert (
        text_only["required"] == ["message"]
        and "does not list a JSON input mode" in text_only["properties"]["data"]["description"]
    )


async def test_an_agent_on_a2a_sdk_0_2_is_spoken_to_as_0_3():
    # a2a-sdk 0.2.x cards say protocolVersion 0.2.x; its JSON-RPC has 0.3's method and field names
    async def rpc(method: str, params: dict[str, Any]) -> Any:
        sent = params["message"]
        text = sent["parts"][0]["text"]
        return {
            "kind": "task",
            "id": "t1",
            "contextId": "c1",
            "status": {"state": "completed"},
            "artifacts": [
                {"artifactId": "a1", "parts": [{"kind": "text", "text": f"echo: {text}"}]}
            ],
            "history": [sent],
        }

    app = old_agent_app("0.2.6", rpc)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/")) as b,
    ):
        assert b.catalog.slot("peer").health.state == "ready", b.catalog.slot("peer").health.reason
        result = await b.invoker.invoke("peer__echo", {"message": "hi"})
    assert result.status == "succeeded" and result.content == [
        {"type": "text", "text": "echo: hi"}
    ], result
    assert app[REQUESTS][0]["method"] == "message/send"


async def test_a_0_3_agent_still_showing_the_answered_question_is_followed_until_it_moves_on():
    # a2a-sdk 0.3.x answers a non-blocking message/send after the agent's first event: when that is
    # an artifact, the task comes back still input-required, the question moved into the history
    tasks: dict[str, dict[str, Any]] = {}
    polls: list[str] = []

    async def rpc(method: str, params: dict[str, Any]) -> Any:
        if method == "tasks/get":
            polls.append(params["id"])
            return tasks[params["id"]]
        sent = params["message"]
        if "taskId" not in sent:
            question = text_message("What is your name?", "agent", "t1", "c1")
            tasks["t1"] = {
                "kind": "task",
                "id": "t1",
                "contextId": "c1",
                "history": [sent],
                "status": {
                    "state": "input-required",
                    "message": question,
                    "timestamp": "2025-01-01T00:00:00Z",
                },
            }
            return tasks["t1"]
        task = tasks["t1"]
        asked = task["status"].pop("message")
        task["history"] += [asked, sent]
        task["artifacts"] = [
            {
                "artifactId": "a1",
                "parts": [{"kind": "text", "text": f"hello {sent['parts'][0]['text']}"}],
            }
        ]
        stale = json.loads(json.dumps(task))
        task["status"] = {"state": "completed", "timestamp": "2025-01-01T00:00:01Z"}
        return stale

    app = old_agent_app("0.3.0", rpc, skills=("ask",))
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/"), poll_interval=0.01) as b,
    ):
        asked = await b.invoker.invoke("peer__ask", {"message": "hello"})
        assert (
            asked.status == "needs_input"
            and asked.structured_content["question"] == "What is your name?"
        )
        ids = {k: asked.structured_content[k] for k in ("task_id", "context_id")}
        done = await b.invoker.invoke("peer__ask", {"message": "Ada", **ids})
    assert done.status == "succeeded" and done.content == [{"type": "text", "text": "hello Ada"}], (
        done
    )
    assert polls == ["t1"] and app[REQUESTS][1]["params"]["configuration"]["blocking"] is False


@pytest.mark.parametrize(("version", "streaming"), [("1.0", False), ("0.3", False), ("1.0", True)])
async def test_an_agent_asking_again_without_a_new_question_is_answered_needs_input_at_once(
    version, streaming
):
    # a2a-sdk's requires_input() with no message leaves the task as the stale 0.3 snapshot above
    # but for its status timestamp: a polled call waited for its timeout
    async with (
        agent(version=version) as (base, _control),
        bridge(base_url=base, streaming=streaming, timeout=10) as b,
    ):
        asked = await b.invoker.invoke("peer__reask", {"message": "hello"})
        assert (
            asked.status == "needs_input" and asked.structured_content["question"] == "Which city?"
        )
        ids = {k: asked.structured_content[k] for k in ("task_id", "context_id")}
        async with asyncio.timeout(2):
            again = await b.invoker.invoke("peer__reask", {"message": "Paris", **ids})
        assert (
            again.status == "needs_input" and again.structured_content["task_id"] == ids["task_id"]
        ), again
        # a bridge that did not give the question goes by the moment it sent the answer
        async with (
            bridge(base_url=base, streaming=streaming, timeout=10) as other,
            asyncio.timeout(2),
        ):
            still = await other.invoker.invoke("peer__reask", {"message": "Oslo", **ids})
        assert still.status == "needs_input", still
        done = await b.invoker.invoke("peer__reask", {"message": "Lisbon", **ids})
        assert done.status == "succeeded" and done.content == [
            {"type": "text", "text": "booked Lisbon"}
        ], done


@pytest.mark.parametrize(
    ("status", "error_class", "said"),
    [
        (
            404,
            "invalid_arguments",
            "the agent does not know that task (Task nope was specified but does not exist)",
        ),
        (
            422,
            "invalid_arguments",
            "the agent refused the message: Task nope was specified but does not exist",
        ),
        (
            501,
            "capability_gap",
            "the agent cannot serve this call: Task nope was specified but does not exist",
        ),
    ],
)
async def test_http_json_errors_of_a_0_3_agent_keep_their_meaning(status, error_class, said):
    # a2a-sdk 0.3.x answers an A2A error over HTTP+JSON with its status and {"message": ...} only
    async def send(request: web.Request) -> web.Response:
        return web.json_response(
            {"message": "Task nope was specified but does not exist"}, status=status
        )

    app = old_agent_app("0.3.0", preferred_transport="HTTP+JSON")
    app.router.add_post("/v1/message:send", send)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/")) as b,
    ):
        result = await b.invoker.invoke("peer__echo", {"message": "x", "task_id": "nope"})
        assert b.catalog.slot("peer").health.state == "ready"
    assert result.error.error_class == error_class and result.error.message.startswith(said), (
        result.error
    )


def state_changes(b: Any) -> list[str]:
    """The health states `peer` takes from now on, one at each change of its state."""
    changes: list[str] = []
    b.catalog.subscribe(
        lambda change: (
            changes.append(b.catalog.slot("peer").health.state) if change.state_changed else None
        )
    )
    return changes


def watching_posts(
    answer: Callable[[web.Request, dict[str, Any], Any], Awaitable[web.StreamResponse]],
) -> tuple[list[str], Any]:
    """An aiohttp middleware handing each POST to `answer` (the request, its JSON-RPC body, the
    agent's own handler), and the list of the methods POSTed to it, in order."""
    posts: list[str] = []

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
        body = await request.json()
        posts.append(body["method"])
        return await answer(request, body, handler)

    return posts, middleware


async def stream_then_task_lookup(app: web.Application, answer: Any, task_id: str) -> Any:
    """Calls `peer__echo` with `task_id` on `app`, whose POSTs `answer` takes (`watching_posts`):
    the agent gets the stream, then the lookup of the task, and stays ready; the call's result."""
    posts, middleware = watching_posts(answer)
    app.middlewares.append(middleware)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/"), retry_initial=5) as b,
    ):
        changes = state_changes(b)
        result = await b.invoker.invoke("peer__echo", {"message": "x", "task_id": task_id})
        await asyncio.sleep(0.05)  # an unavailable event would have reached the catalog
        assert posts == ["message/stream", "tasks/get"]
        assert changes == [] and b.catalog.slot("peer").health.state == "ready", (
            b.catalog.slot("peer").health,
            changes,
        )
    return result


async def cut_stream(request: web.Request) -> web.StreamResponse:
    """An event stream begun (200, headers sent) and cut before its first event."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    assert request.transport is not None
    request.transport.close()
    return response


async def test_an_unknown_task_id_on_a_0_3_http_json_stream_is_invalid_arguments_not_the_agent_gone():
    # a2a-sdk 0.3.x begins the event stream, then closes it unfinished when the task is unknown
    async def get_task(request: web.Request) -> web.Response:
        return web.json_response({"message": "Task not found"}, status=404)

    app = old_agent_app("0.3.0", preferred_transport="HTTP+JSON", streaming=True)
    app.router.add_post("/v1/message:stream", cut_stream)
    app.router.add_get("/v1/tasks/{task}", get_task)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/")) as b,
    ):
        result = await b.invoker.invoke("peer__echo", {"message": "x", "task_id": "nope"})
        assert b.catalog.slot("peer").health.state == "ready"
    assert (
        result.error.error_class == "invalid_arguments"
        and "does not know that task (Task not found)" in result.error.message
    ), result.error


async def test_a_stream_broken_before_its_first_event_fails_the_call_and_the_agent_stays_ready():
    # the agent answered 200, then its process died before the first event: the card still
    # answering, the call fails (retry later) and the agent stays ready
    streams: list[str] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        streams.append(request.path)
        return await cut_stream(request)

    dead = False

    @web.middleware
    async def dying(request: web.Request, handler: Any) -> web.StreamResponse:
        if dead:  # the whole agent gone: every connection dropped, the card's too
            assert request.transport is not None
            request.transport.close()
        return await handler(request)

    app = old_agent_app("0.3.0", preferred_transport="HTTP+JSON", streaming=True)
    app.middlewares.append(dying)
    app.router.add_post("/v1/message:stream", stream)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/"), retry_initial=5) as b,
    ):
        changes = state_changes(b)
        results = [await b.invoker.invoke("peer__echo", {"message": "x"}) for _ in range(2)]
        await asyncio.sleep(0.05)  # an unavailable event would have reached the catalog
        assert b.catalog.slot("peer").health.state == "ready" and changes == [], (
            b.catalog.slot("peer").health,
            changes,
        )
        assert len(streams) == 2  # the second call went to the agent too
        dead = True
        gone = await b.invoker.invoke("peer__echo", {"message": "x"})
        await until(lambda: "unavailable" in changes)
    for result in results:
        assert (
            result.error.error_class == "dependency_unavailable"
            and result.error.recoverability == "retry_later"
        ), result.error
        assert result.error.message.startswith("the agent's stream broke before its first event"), (
            result.error
        )
    assert gone.error.error_class == "dependency_unavailable" and gone.error.message.startswith(
        "the agent stopped answering"
    ), gone.error


async def test_a_stream_broken_after_its_first_event_is_followed_by_polling_the_task():
    # a proxy cutting a long event stream, say: the task goes on at the agent, and was lost to
    # the call (and the agent marked unavailable)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    app, control = build_agent(base)

    async def cutting(scope: Any, receive: Any, send: Any) -> None:
        events = 0

        async def cut(message: Any) -> None:
            nonlocal events
            if message["type"] == "http.response.start":
                events = (
                    -1
                    if dict(message["headers"])
                    .get(b"content-type", b"")
                    .startswith(b"text/event-stream")
                    else 0
                )
            elif message["type"] == "http.response.body" and message.get("body") and events < 0:
                events -= 1
                if events < -2:  # one event went through
                    raise ConnectionAbortedError("cut by a proxy")
            await send(message)

        await app(scope, receive, cut)

    async with serve_asgi(cutting, port=port), bridge(base_url=base, poll_interval=0.01) as b:
        changes = state_changes(b)
        result = await b.invoker.invoke("peer__slow", {"message": "go", "data": {"steps": 3}})
        assert result.status == "succeeded" and result.content == [
            {"type": "text", "text": "done after 3 steps"}
        ], result.error
        assert control.methods()[0] == "SendStreamingMessage" and "GetTask" in control.methods()
        assert changes == [] and b.catalog.slot("peer").health.state == "ready"


async def test_a_stream_reset_after_its_first_event_is_followed_by_polling_the_task():
    # a connection reset (RST, a ReadError) rather than closed: the call failed, though the task
    # the agent had named went on
    async def resetting(
        request: web.Request, body: dict[str, Any], handler: Any
    ) -> web.StreamResponse:
        if body["method"] == "message/stream":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            named = {"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "working"}}
            await response.write(
                f"data: {json.dumps({'jsonrpc': '2.0', 'id': body['id'], 'result': named})}\n\n".encode()
            )
            assert request.transport is not None
            request.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            request.transport.abort()  # closed with linger 0: a reset
            return response
        done = {
            "kind": "task",
            "id": "t1",
            "contextId": "c1",
            "status": {"state": "completed"},
            "artifacts": [{"artifactId": "a1", "parts": [{"kind": "text", "text": "done"}]}],
        }
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": done})

    app = old_agent_app("0.3.0", streaming=True)
    posts, middleware = watching_posts(resetting)
    app.middlewares.append(middleware)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/"), poll_interval=0.01) as b,
    ):
        result = await b.invoker.invoke("peer__echo", {"message": "x"})
        assert b.catalog.slot("peer").health.state == "ready"
    assert result.status == "succeeded" and result.content == [{"type": "text", "text": "done"}], (
        result.error
    )
    assert posts[0] == "message/stream" and posts[1:] == ["tasks/get"] * (len(posts) - 1)


# ---------------------------------------------------------------------------- kept-alive connections the agent closes


class KeepAliveClosingProxy:
    """A TCP proxy on loopback in front of an agent that, armed, closes the next connection
    reused for a request as that request arrives, unforwarded: the agent's server closing an
    idle kept-alive connection just as the client sends on it (uvicorn closes one idle for
    5 s). `refuse()` closes every connection as it is reused and takes no new one: the agent
    gone."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.armed = 0
        self.only = b""  # armed, drop only requests whose first line holds this
        self.gone = False
        self.dropped: list[bytes] = []  # the first line of each request dropped
        # each request as it arrives: (its first line, on a kept connection (reused), dropped)
        self.requests: list[tuple[bytes, bool, bool]] = []
        self.server: asyncio.Server | None = None

    async def handle(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.target_port
        )
        answered = (
            False  # the agent sent bytes since the client's last: the next bytes are a new request
        )

        async def back() -> None:
            nonlocal answered
            with contextlib.suppress(ConnectionError):
                while chunk := await upstream_reader.read(65536):
                    answered = True
                    client_writer.write(chunk)
                    await client_writer.drain()
            client_writer.close()

        answers = asyncio.create_task(back())
        first = True  # the next bytes are the connection's first request
        try:
            while chunk := await client_reader.read(65536):
                line = chunk.split(b"\r\n", 1)[0]
                if answered and ((self.armed and self.only in line) or self.gone):
                    self.armed = max(0, self.armed - 1)
                    self.dropped.append(line)
                    self.requests.append((line, True, True))
                    break
                if first or answered:
                    self.requests.append((line, answered, False))
                first = answered = False
                upstream_writer.write(chunk)
                await upstream_writer.drain()
        except ConnectionError:
            pass
        finally:
            client_writer.close()
            upstream_writer.close()
            answers.cancel()

    def refuse(self) -> None:
        assert self.server is not None
        self.gone = True
        self.server.close()


@contextlib.asynccontextmanager
async def agent_behind_proxy(
    **options: Any,
) -> AsyncIterator[tuple[str, AgentControl, KeepAliveClosingProxy]]:
    port = free_port()
    proxy = KeepAliveClosingProxy(port)
    proxy.server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{proxy.server.sockets[0].getsockname()[1]}"
    app, control = build_agent(base, **options)
    try:
        async with serve_asgi(app, port=port):
            yield base, control, proxy
    finally:
        proxy.server.close()


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
async def test_a_poll_on_a_kept_alive_connection_the_agent_closed_is_sent_again(transport):
    # GetTask only reads the task: sent again on a new connection, the call goes on, and the
    # agent stays ready (it was marked unavailable, its every tool failing until it was back)
    async with (
        agent_behind_proxy(streaming=False) as (base, control, proxy),
        bridge(base_url=base, transport=transport, retry_initial=5) as b,
    ):
        changes = state_changes(b)

        async def arm_at_first_progress(record: ToolProgress) -> None:
            if not proxy.dropped and not proxy.armed:
                proxy.armed = 1  # the first poll, on the connection the message went on

        result = await b.invoker.invoke(
            "peer__slow", {"message": "go", "data": {"steps": 2}}, progress=arm_at_first_progress
        )
        assert result.status == "succeeded" and result.content[0]["text"] == "done after 2 steps", (
            result.error
        )
        [dropped] = proxy.dropped
        assert dropped.startswith(b"POST / " if transport == "JSONRPC" else b"GET /rest/tasks/"), (
            dropped
        )
        assert len(control.methods()) >= 2  # the message, then the poll sent again (and any more)
        await asyncio.sleep(0.05)  # an unavailable event would have reached the catalog
        assert changes == [] and b.catalog.slot("peer").health.state == "ready"


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
async def test_a_poll_sent_again_goes_on_a_new_connection_when_every_kept_one_is_closing(transport):
    # a server closes the connections idle since one burst of calls together: the JSON-RPC poll
    # sent again went on another kept one, closing too, and the call failed
    async with (
        agent_behind_proxy(streaming=False) as (base, control, proxy),
        bridge(base_url=base, transport=transport, retry_initial=5) as b,
    ):
        calls = await asyncio.gather(
            *(b.invoker.invoke("peer__echo", {"message": str(i)}) for i in range(3))
        )
        assert all(call.status == "succeeded" for call in calls)
        kept = {entry["client"] for entry in control.requests}
        assert len(kept) >= 2  # the burst left more than one connection kept

        async def arm_at_first_progress(record: ToolProgress) -> None:
            if not proxy.dropped and not proxy.armed:
                proxy.armed = len(
                    kept
                )  # each kept connection closed as it is reused, from the first poll on

        result = await b.invoker.invoke(
            "peer__slow", {"message": "go", "data": {"steps": 2}}, progress=arm_at_first_progress
        )
        proxy.armed = 0
        assert result.status == "succeeded" and result.content[0]["text"] == "done after 2 steps", (
            result.error
        )
        assert proxy.dropped and proxy.dropped[0].startswith(
            b"POST / " if transport == "JSONRPC" else b"GET /rest/tasks/"
        ), proxy.dropped
        assert b.catalog.slot("peer").health.state == "ready"


async def test_a_cancel_on_a_kept_alive_connection_the_agent_closed_is_sent_again():
    # the cancel of a timed-out call's task was lost with the connection, and the task ran on
    async with (
        agent_behind_proxy(streaming=False) as (base, control, proxy),
        bridge(base_url=base, transport="HTTP+JSON", timeout=0.5, poll_interval=0.02) as b,
    ):
        # kept connections to spare: the one the polls use is closed when the timeout cuts a poll short
        assert all(
            r.status == "succeeded"
            for r in await asyncio.gather(
                *(b.invoker.invoke("peer__echo", {"message": "x"}) for _ in range(3))
            )
        )
        proxy.armed, proxy.only = 1, b":cancel"
        result = await b.invoker.invoke("peer__wait", {"message": "hold"})
        assert result.is_error and result.error.error_class == "timeout"
        async with asyncio.timeout(20):  # a guard: the cancel comes at once, later under load
            await control.cancel_seen.wait()
        [dropped] = proxy.dropped
        assert dropped.startswith(b"POST /rest/tasks/") and b":cancel " in dropped, dropped


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
async def test_a_message_on_a_kept_alive_connection_the_agent_closed_fails_only_its_call(
    transport, streaming
):
    # the message may have reached the agent: it is not sent again, the call fails (retry
    # later), and the agent, its card still answering, stays ready; gone, it is unavailable
    async with (
        agent_behind_proxy(streaming=streaming) as (base, control, proxy),
        bridge(base_url=base, transport=transport, retry_initial=5) as b,
    ):
        changes = state_changes(b)
        assert (await b.invoker.invoke("peer__echo", {"message": "warm"})).status == "succeeded"
        proxy.armed = 1
        for _ in range(
            5
        ):  # a call that opened a connection (the one a stream holds is still being read to its end) goes through
            sent = len(control.methods())
            cut = await b.invoker.invoke("peer__echo", {"message": "x"})
            if proxy.dropped:
                break
        assert (
            len(proxy.dropped) == 1 and len(control.methods()) == sent
        )  # dropped unanswered, and not sent again
        assert (
            cut.error.error_class == "dependency_unavailable"
            and cut.error.recoverability == "retry_later"
        ), cut.error
        assert cut.error.message.startswith(
            "the agent closed a kept-alive connection as the message was sent on it"
        ), cut.error
        assert cut.error.message.endswith("is not sent again; its card still answers"), cut.error
        after = await b.invoker.invoke("peer__echo", {"message": "y"})
        assert after.status == "succeeded" and after.content[0]["text"] == "echo: y"
        await asyncio.sleep(0.05)  # an unavailable event would have reached the catalog
        assert changes == [] and b.catalog.slot("peer").health.state == "ready"
        # the agent gone: its kept-alive connections closed, and no new one taken (the card's either)
        proxy.refuse()
        gone = await b.invoker.invoke("peer__echo", {"message": "z"})
        await until(lambda: "unavailable" in changes)
    assert gone.error.error_class == "dependency_unavailable" and gone.error.message.startswith(
        "the agent stopped answering"
    ), gone.error


async def test_a_message_whose_new_connection_the_agent_cut_fails_only_its_call():
    # an agent restarting: the connection opened for the message (it closes every connection
    # after one answer) is closed before the answer; its card answering, only the call fails
    cutting = True

    async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return text_message("echo: " + params["message"]["parts"][0]["text"], "agent", "t1", "c1")

    @web.middleware
    async def one_answer_a_connection(request: web.Request, handler: Any) -> web.StreamResponse:
        if cutting and request.method == "POST":
            assert request.transport is not None
            request.transport.close()
        response = await handler(request)
        response.force_close()
        return response

    app = old_agent_app("0.3.0", rpc)
    app.middlewares.append(one_answer_a_connection)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge(base_url=str(http.make_url("")).rstrip("/"), retry_initial=5) as b,
    ):
        changes = state_changes(b)
        cut = await b.invoker.invoke("peer__echo", {"message": "x"})
        assert (
            cut.error.error_class == "dependency_unavailable"
            and cut.error.recoverability == "retry_later"
        ), cut.error
        assert cut.error.message.startswith("the agent's connection dropped before its answer ("), (
            cut.error
        )
        assert cut.error.message.endswith("; its card still answers"), cut.error
        cutting = False
        after = await b.invoker.invoke("peer__echo", {"message": "y"})
        assert after.status == "succeeded" and after.content[0]["text"] == "echo: y", after.error
        await asyncio.sleep(0.05)  # an unavailable event would have reached the catalog
        assert changes == [] and b.catalog.slot("peer").health.state == "ready"


async def test_a_connection_idle_for_keepalive_seconds_is_not_reused(monkeypatch):
    # kept 5 s by httpx, as long as uvicorn keeps it: reused just as the agent closed it
    assert a2a_transport.KEEPALIVE_SECONDS < 5
    monkeypatch.setattr(a2a_transport, "KEEPALIVE_SECONDS", 0.2)
    async with agent() as (base, control), bridge(base_url=base, streaming=False) as b:
        assert (await b.invoker.invoke("peer__echo", {"message": "one"})).status == "succeeded"
        first = {entry["client"] for entry in control.requests}
        assert (await b.invoker.invoke("peer__echo", {"message": "two"})).status == "succeeded"
        assert {entry["client"] for entry in control.requests} == first  # reused at once
        await asyncio.sleep(0.3)  # idle past KEEPALIVE_SECONDS
        seen = len(control.requests)
        assert (await b.invoker.invoke("peer__echo", {"message": "three"})).status == "succeeded"
        assert not {entry["client"] for entry in control.requests[seen:]} & first


async def test_a_stream_and_its_task_lookup_both_cut_leave_the_agent_ready_while_its_card_answers():
    # a call with task_id whose stream broke before its first event asks for the task; that
    # request dropped too (the agent restarting), the card answering: only the call fails
    async def restarting(
        request: web.Request, body: dict[str, Any], handler: Any
    ) -> web.StreamResponse:
        assert request.transport is not None
        if body["method"] == "message/stream":  # the stream begun, then broken
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            request.transport.close()
            return response
        request.transport.close()  # the GetTask cut before its answer
        return await handler(request)

    async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return text_message("unused", "agent", "t1", "c1")

    result = await stream_then_task_lookup(
        old_agent_app("0.3.0", rpc, streaming=True), restarting, "t1"
    )
    assert result.error.error_class == "dependency_unavailable" and result.error.message.startswith(
        "the agent's stream broke before its first event"
    ), result.error


async def test_a_card_refresh_on_kept_alive_connections_the_agent_closed_is_sent_again_on_a_new_one():
    # a server closes the connections idle since one burst of calls together: the refresh sent
    # again went on another kept one, closing too, and the agent was marked unavailable
    async with (
        agent_behind_proxy(streaming=False) as (base, control, proxy),
        bridge(base_url=base, retry_initial=5, card_refresh_interval=0.3) as b,
    ):
        changes = state_changes(b)
        # every card request on a kept connection is closed as it arrives, from before the burst
        # on: whenever the refresh comes (every 0.3 s, however long the burst takes), the
        # connections the burst left are closing
        proxy.only, proxy.armed = b"/.well-known/agent-card.json", 1_000_000
        calls = await asyncio.gather(
            *(b.invoker.invoke("peer__echo", {"message": str(i)}) for i in range(3))
        )
        assert all(call.status == "succeeded" for call in calls)
        # the burst left more than one connection kept
        assert len({entry["client"] for entry in control.requests}) >= 2
        burst = len(proxy.requests)

        def cards() -> list[tuple[bool, bool]]:
            """(reused, dropped) of each card request since the burst."""
            return [
                (reused, dropped)
                for line, reused, dropped in proxy.requests[burst:]
                if proxy.only in line
            ]

        def refreshed_past_a_drop() -> bool:
            """A refresh dropped, sent again, and the next one came: the refresher goes on."""
            seen = cards()
            return (True, True) in seen and len(seen) >= seen.index((True, True)) + 3

        await until(refreshed_past_a_drop, timeout=20)
        seen = cards()
        dropped = seen.index((True, True))
        # sent again on a connection opened for it, and answered
        assert seen[dropped + 1] == (False, False), seen
        assert changes == [] and b.catalog.slot("peer").health.state == "ready", (
            b.catalog.slot("peer").health,
            changes,
        )


# ---------------------------------------------------------------------------- an error read for what it is


def task_not_found(body: dict[str, Any]) -> web.Response:
    """A JSON-RPC agent's answer for a task it does not know (a2a-sdk's TaskNotFoundError)."""
    return web.json_response(
        {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32001, "message": "Task not found"}}
    )


async def test_an_unknown_task_id_on_a_json_rpc_stream_is_invalid_arguments_not_the_agent_gone():
    # the stream closed unfinished, the task asked for answers TaskNotFound: the GetTask's error,
    # raised while the stream's break was handled, was read with that break and taken for the
    # agent gone (marked unavailable), the call failing as a broken stream
    async def unknown_task(
        request: web.Request, body: dict[str, Any], handler: Any
    ) -> web.StreamResponse:
        if body["method"] == "message/stream":
            return await cut_stream(request)
        return task_not_found(body)

    result = await stream_then_task_lookup(
        old_agent_app("0.3.0", streaming=True), unknown_task, "nope"
    )
    assert (
        result.error.error_class == "invalid_arguments"
        and "does not know that task (Task not found)" in result.error.message
    ), result.error


async def test_a_poll_sent_again_that_the_agent_answers_with_an_error_fails_with_that_error():
    # the poll on a kept-alive connection the agent closed (restarting) is sent again, and the
    # agent, back without its tasks, answers TaskNotFound: read with the dropped poll handled
    # before it, that answer was "the agent stopped answering", and the agent marked unavailable
    async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "working"}}

    async def forgot_its_tasks(
        request: web.Request, body: dict[str, Any], handler: Any
    ) -> web.StreamResponse:
        return task_not_found(body) if body["method"] == "tasks/get" else await handler(request)

    app = old_agent_app("0.3.0", rpc)
    posts, middleware = watching_posts(forgot_its_tasks)
    app.middlewares.append(middleware)
    async with TestServer(app, host="127.0.0.1") as http:
        proxy = KeepAliveClosingProxy(http.port)
        proxy.server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{proxy.server.sockets[0].getsockname()[1]}"
        try:
            async with bridge(base_url=base, retry_initial=5) as b:
                changes = state_changes(b)

                async def arm_at_first_progress(record: ToolProgress) -> None:
                    if not proxy.dropped and not proxy.armed:
                        proxy.armed = 1  # the first poll, on the connection the message went on

                result = await b.invoker.invoke(
                    "peer__echo", {"message": "x"}, progress=arm_at_first_progress
                )
                await asyncio.sleep(0.05)  # an unavailable event would have reached the catalog
                assert proxy.dropped == [b"POST / HTTP/1.1"] and posts == [
                    "message/send",
                    "tasks/get",
                ]
                assert changes == [] and b.catalog.slot("peer").health.state == "ready", (
                    b.catalog.slot("peer").health,
                    changes,
                )
        finally:
            proxy.server.close()
    assert (
        result.error.error_class == "invalid_arguments"
        and "does not know that task (Task not found)" in result.error.message
    ), result.error


async def test_an_interface_refusing_connections_fails_only_its_call_while_the_card_answers():
    # the card on one origin, the interface it names on another that is down: classifying the
    # refused connection marked the agent unavailable, and the reconnect (its card answering)
    # made it ready again, at every call; gone with its card, it is unavailable
    interface = f"http://127.0.0.1:{free_port()}/"  # nothing listens there

    async def card(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "protocolVersion": "0.3.0",
                "name": "Split Agent",
                "description": "d",
                "url": interface,
                "version": "1",
                "preferredTransport": "JSONRPC",
                "capabilities": {},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "echo", "name": "Echo", "description": "e", "tags": []}],
            }
        )

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    http = TestServer(app, host="127.0.0.1")
    await http.start_server()
    try:
        async with bridge(base_url=str(http.make_url("")).rstrip("/"), retry_initial=5) as b:
            changes = state_changes(b)
            refused = await b.invoker.invoke("peer__echo", {"message": "x"})
            await asyncio.sleep(0.05)  # an unavailable event would have reached the catalog
            assert changes == [] and b.catalog.slot("peer").health.state == "ready", (
                b.catalog.slot("peer").health,
                changes,
            )
            await http.close()  # the card gone too
            gone = await b.invoker.invoke("peer__echo", {"message": "y"})
            await until(lambda: "unavailable" in changes)
    finally:
        await http.close()
    assert (
        refused.error.error_class == "dependency_unavailable"
        and refused.error.recoverability == "retry_later"
    ), refused.error
    assert refused.error.message.startswith(
        f"the agent's interface at {interface} took no connection (ConnectError: "
    ), refused.error
    assert refused.error.message.endswith("; its card still answers"), refused.error
    assert gone.error.error_class == "dependency_unavailable" and gone.error.message.startswith(
        "the agent stopped answering: ConnectError"
    ), gone.error
