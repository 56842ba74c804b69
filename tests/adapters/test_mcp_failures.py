"""MCP upstreams when things go wrong: a server that exits or is killed, one that cannot come
back for a while, one that hangs, an HTTP server that goes away; reconnects, the reasons
reported, calls during the outage, and no process left behind. And servers that answer badly:
tools the SDK rejects, answers that cannot be read or are too long, a storm of change notices.
And more servers than the process may open descriptors for."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adapters.mcp.listing import OFF_LOOP_TOOLS
from adapters.mcp.upstream import MCPUpstream
from bridge.catalog import CatalogChange
from bridge.config import parse_config
from bridge.runtime import Bridge
from tests.adapters.mcp_fixtures.server import BAD_TOOLS, base_tools, build_server
from tests.servers import (
    free_port,
    left_by_a_killed_parent,
    process_ended,
    read_body,
    replaying,
    serve_asgi,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(Path(__file__).parent / "mcp_fixtures" / "server.py")
TINY = str(Path(__file__).parent / "mcp_fixtures" / "tiny_server.py")
FAST_RETRY = {"retry_initial": 0.05, "retry_max": 0.2, "shutdown_timeout": 0.2}


async def until(predicate: Callable[[], Any], timeout: float = 30.0, step: float = 0.02) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(step)


def make_bridge(*upstreams: dict[str, Any]) -> Bridge:
    config = parse_config(
        {"store": {"path": ":memory:"}, "upstreams": list(upstreams)},
        source="test",
        base_dir=str(ROOT),
    )
    return Bridge(config)


def stdio(name: str, *args: str, **settings: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "mcp",
        "command": "python",
        "args": [FIXTURE, *args],
        **FAST_RETRY,
        **settings,
    }


class Outages:
    """What the catalog announced about one upstream, captured when it happened."""

    def __init__(self, bridge: Bridge, upstream: str) -> None:
        self.seen: list[tuple[str, str | None, list[str]]] = []
        slot = bridge.catalog.slot(upstream)

        def record(change: CatalogChange) -> None:
            if change.upstream == upstream and change.state_changed:
                states = sorted({d.loading_state for d in slot.tools.values()})
                self.seen.append((slot.health.state, slot.health.reason, states))

        bridge.catalog.subscribe(record)

    def down(self) -> list[tuple[str, str | None, list[str]]]:
        return [s for s in self.seen if s[0] != "ready"]


def reaped(pid: int) -> bool:
    """Gone from the process table: exited and waited for (a zombie still has /proc/<pid>)."""
    return not os.path.exists(f"/proc/{pid}")


async def pid_of(bridge: Bridge, upstream: str) -> int:
    return (await bridge.catalog.slot(upstream).upstream.health())["pid"]


async def test_exited_and_killed_servers_are_reported_then_reconnected_without_zombies() -> None:
    bridge = make_bridge(
        stdio("srv", protocol="2026-07-28", env={"SERVICE_TOKEN": "hunter2-token"})
    )
    outages = Outages(bridge, "srv")
    pids: list[int] = []
    async with bridge:
        slot = bridge.catalog.slot("srv")
        pids.append(await pid_of(bridge, "srv"))

        # 1. the server exits on its own, saying why on stderr
        crashed = await bridge.invoker.invoke(
            "srv__crash", {"code": 7, "message": "fatal: disk on fire (token hunter2-token)"}
        )
        assert crashed.error.error_class == "dependency_unavailable"
        assert (
            "exited with code 7" in crashed.error.message
            and "fatal: disk on fire" in crashed.error.message
        )
        assert (
            "hunter2-token" not in crashed.error.message and "(token ***)" in crashed.error.message
        )
        await until(lambda: slot.health.state == "ready" and outages.down())
        state, reason, tool_states = outages.down()[0]
        assert state == "unavailable" and tool_states == ["unavailable"]  # its tools stay listed
        assert "exited with code 7" in reason and "stderr: fatal: disk on fire" in reason
        pids.append(await pid_of(bridge, "srv"))
        assert (await bridge.invoker.invoke("srv__echo", {"text": "back"})).content[0][
            "text"
        ] == "back"

        # 2. the server is killed from outside
        os.kill(pids[-1], signal.SIGKILL)
        await until(lambda: len(outages.down()) >= 2 and slot.health.state == "ready")
        assert "killed by signal SIGKILL" in outages.down()[1][1]
        pids.append(await pid_of(bridge, "srv"))
        assert len(set(pids)) == 3
        assert bridge.catalog.resolve("srv__echo").loading_state == "loaded"
        assert (await bridge.invoker.invoke("srv__echo", {"text": "again"})).status == "succeeded"
        await until(lambda: all(reaped(pid) for pid in pids[:-1]))
    await until(lambda: all(reaped(pid) for pid in pids), timeout=5)


async def test_calls_during_an_outage_get_dependency_unavailable_with_retry_after(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "down"
    bridge = make_bridge(
        stdio(
            "srv", "--refuse-if", str(marker), protocol="legacy", retry_initial=0.3, retry_max=0.6
        )
    )
    async with bridge:
        slot = bridge.catalog.slot("srv")
        marker.touch()  # restarts fail until it is removed
        await bridge.invoker.invoke("srv__crash", {"code": 1})
        await until(
            lambda: slot.health.reason is not None and "refusing to start" in slot.health.reason
        )
        assert slot.health.state == "unavailable"
        assert bridge.catalog.resolve("srv__echo").loading_state == "unavailable"

        result = await bridge.invoker.invoke("srv__echo", {"text": "x"})
        assert result.status == "failed" and result.error.error_class == "dependency_unavailable"
        assert result.error.recoverability == "retry_later"
        assert result.error.retry_after is not None and 0 < result.error.retry_after <= 0.6
        assert "exited with code 2" in result.error.message

        marker.unlink()
        await until(lambda: slot.health.state == "ready")
        assert (await bridge.invoker.invoke("srv__echo", {"text": "up"})).content[0]["text"] == "up"


async def test_hung_servers_time_out_without_blocking_other_upstreams() -> None:
    server, _ = build_server()
    async with serve_asgi(server.streamable_http_app()) as base:
        bridge = make_bridge(
            stdio("frozen", protocol="legacy", timeout=2),
            stdio("mute", "--freeze-on-start", start_timeout=0.5, retry_initial=30, retry_max=30),
            {"name": "fine", "kind": "mcp", "url": f"{base}/mcp"},
        )
        loop = asyncio.get_running_loop()
        async with bridge:
            # the mute server failed its own start; the others came up regardless
            states = {h.name: (h.state, h.reason) for h in bridge.catalog.health()}
            assert states["frozen"][0] == "ready" and states["fine"][0] == "ready"
            assert states["mute"][0] == "failed" and "start_timeout=0.5" in states["mute"][1]

            # `freeze` blocks the whole frozen server; the other upstream answers meanwhile
            hung = asyncio.create_task(bridge.invoker.invoke("frozen__freeze", {"seconds": 30}))
            begun = loop.time()
            for _ in range(5):
                assert (
                    await bridge.invoker.invoke("fine__echo", {"text": "ok"})
                ).status == "succeeded"
            assert not hung.done()  # the other upstream answered while this one hangs
            result = await hung
            assert result.status == "timed_out" and result.error.error_class == "timeout"
            assert 2 <= loop.time() - begun < 10


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_http_server_going_away_is_reported_and_reconnected(
    protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    server, _ = build_server()
    port = free_port()
    upstream = {
        "name": "remote",
        "kind": "mcp",
        "url": f"http://127.0.0.1:{port}/mcp",
        "protocol": protocol,
        "ping_interval": 0.1,
        "ping_timeout": 1,
        **FAST_RETRY,
    }
    bridge = make_bridge(upstream)
    outages = Outages(bridge, "remote")
    async with serve_asgi(server.streamable_http_app(), port=port):
        await bridge.start()
    try:
        slot = bridge.catalog.slot("remote")
        # a liveness probe under way as the server went may be the first to fail (unanswered);
        # the connections tried after it are refused, and the reason says so
        await until(
            lambda: (
                slot.health.state != "ready"
                and "HTTP connection to http://127.0.0.1" in (slot.health.reason or "")
            )
        )
        assert outages.down()[0][2] == ["unavailable"]
        result = await bridge.invoker.invoke("remote__echo", {"text": "x"})
        assert result.error.error_class == "dependency_unavailable" and result.error.retry_after

        async with serve_asgi(server.streamable_http_app(), port=port):  # back on the same port
            await until(lambda: slot.health.state == "ready")
            assert (await bridge.invoker.invoke("remote__echo", {"text": "back"})).content[0][
                "text"
            ] == "back"
            assert bridge.catalog.resolve("remote__echo").loading_state == "loaded"
    finally:
        await bridge.close()
    # the lost session's DELETE could not reach the server either: said once, as the loss's reason
    assert not [
        r
        for r in caplog.records
        if "ending the HTTP session" in r.message and r.levelno >= logging.WARNING
    ]


async def test_a_session_end_the_server_refuses_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, _ = build_server()
    app = server.streamable_http_app()

    async def refusing_delete(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE":
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    async with serve_asgi(refusing_delete) as base:
        async with make_bridge(
            {"name": "remote", "kind": "mcp", "url": f"{base}/mcp", "protocol": "legacy"}
        ) as bridge:
            assert bridge.catalog.slot("remote").health.state == "ready"
    [record] = [r for r in caplog.records if "ending the HTTP session" in r.message]
    assert (
        record.levelno == logging.WARNING
        and record.message == "mcp upstream remote: ending the HTTP session failed: HTTP 500"
    )


def forgets_sessions_with_400(app: Any) -> Any:
    """`app` behind the check servers built on the TypeScript SDK's example make: a request for a
    session this instance did not open gets 400 and a JSON-RPC error without an id (MCP's answer
    is 404)."""
    opened: set[str] = set()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        session = (
            dict(scope.get("headers") or []).get(b"mcp-session-id")
            if scope["type"] == "http"
            else None
        )
        if session is not None and session.decode() not in opened:
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "error": {
                        "code": -32000,
                        "message": "Bad Request: No valid session ID provided",
                    },
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return

        async def remember(message: Any) -> None:
            if message["type"] == "http.response.start":
                opened.update(
                    v.decode()
                    for k, v in message.get("headers", [])
                    if k.lower() == b"mcp-session-id"
                )
            await send(message)

        await app(scope, receive, remember)

    return guarded


def recording(app: Any, seen: list[tuple[str, str | None, int]]) -> Any:
    """`app` noting each HTTP request's method, session id and answer status in `seen`."""

    async def noted(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        session = dict(scope.get("headers") or []).get(b"mcp-session-id")

        async def note(message: Any) -> None:
            if message["type"] == "http.response.start":
                seen.append(
                    (scope["method"], session.decode() if session else None, message["status"])
                )
            await send(message)

        await app(scope, receive, note)

    return noted


@pytest.mark.parametrize("answer", [404, 400])
async def test_an_http_server_restarted_under_the_session_is_connected_again_at_once(
    answer: int, caplog: pytest.LogCaptureFixture
) -> None:
    # a restarted server knows none of the old sessions: MCP has it answer 404, and the client
    # MUST open a new session; servers built on the TypeScript SDK's example answer 400. Every
    # call failed with execution_failed until the next liveness probe, ping_interval (30 s) later
    port = free_port()
    upstream = {
        "name": "remote",
        "kind": "mcp",
        "url": f"http://127.0.0.1:{port}/mcp",
        "protocol": "legacy",
        **FAST_RETRY,
    }
    bridge: Bridge | None = make_bridge(upstream)
    first, _ = build_server()
    async with serve_asgi(first.streamable_http_app(), port=port):
        await bridge.start()
        assert (
            await bridge.invoker.invoke("remote__echo", {"text": "before"})
        ).status == "succeeded"
    seen: list[tuple[str, str | None, int]] = []
    try:
        second, _ = build_server()
        app = second.streamable_http_app()
        async with serve_asgi(
            recording(app if answer == 404 else forgets_sessions_with_400(app), seen), port=port
        ):
            results = []
            async with asyncio.timeout(10):
                while not results or results[-1].status != "succeeded":
                    results.append(await bridge.invoker.invoke("remote__echo", {"text": "after"}))
                    await asyncio.sleep(0.05)
            assert results[-1].content[0]["text"] == "after"
            failed = [r.error for r in results if r.error is not None]
            # the old session's requests were not run: retry, as for a server gone (after a 400,
            # once the liveness probe it asks for has failed too)
            assert {e.error_class for e in failed} <= {"dependency_unavailable"}, failed
            assert any(f"HTTP {answer}" in e.message for e in failed) or not failed
            if answer == 400:
                assert failed and all(e.recoverability == "retry_later" for e in failed)
            # the session the server forgot is not ended with a DELETE (the SDK's was answered
            # 404 or 400 and logged `Session termination failed` at every such reconnect) ...
            forgotten = {session for _, session, status in seen if status == answer}
            assert forgotten and not [r for r in seen if r[0] == "DELETE"], seen
            closing, bridge = bridge, None
            await closing.close()
            # ... and the session it knows is, when the bridge closes
            assert [r for r in seen if r[0] == "DELETE"] == [("DELETE", seen[-1][1], 200)] and seen[
                -1
            ][1] not in forgotten, seen
    finally:
        if bridge is not None:
            await bridge.close()
    assert (
        "Session termination failed" not in caplog.text
        and "ending the HTTP session" not in caplog.text
    )


async def test_an_http_server_that_stops_answering_is_unavailable_within_ping_timeout() -> None:
    # the SDK's DELETE ending the session waited for the HTTP read timeout (300 s), and the
    # upstream was reported unavailable only after it; it is now bounded by ping_timeout
    server, _ = build_server()
    app, hang, release = server.streamable_http_app(), asyncio.Event(), asyncio.Event()

    async def stalling(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and hang.is_set():
            await release.wait()  # accepted, never answered
            return
        await app(scope, receive, send)

    async with serve_asgi(stalling) as base:
        bridge = make_bridge(
            {
                "name": "remote",
                "kind": "mcp",
                "url": f"{base}/mcp",
                "protocol": "legacy",
                "ping_interval": 0.2,
                "ping_timeout": 0.5,
                "retry_initial": 30,
                "retry_max": 30,
            }
        )
        try:
            await bridge.start()
            slot = bridge.catalog.slot("remote")
            hang.set()
            begun = asyncio.get_running_loop().time()
            await until(lambda: slot.health.state != "ready", timeout=10)
            assert asyncio.get_running_loop().time() - begun < 3, slot.health
            assert "no answer to a liveness probe within 0.5s" in slot.health.reason
        finally:
            release.set()
            await bridge.close()


def refuses_a_call_with_400(app: Any, text: str) -> Any:
    """`app` answering a tools/call whose arguments hold `text` with 400 and a JSON-RPC error of
    its own (a request the server finds wrong), the session still alive."""

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = await read_body(receive)
        request = json.loads(body)
        if request.get("method") == "tools/call" and text in json.dumps(request.get("params")):
            error = {
                "jsonrpc": "2.0",
                "id": request["id"],
                "error": {"code": -32602, "message": f"{text} is not accepted here"},
            }
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": json.dumps(error).encode()})
            return
        await app(scope, replaying(body, receive), send)

    return guarded


async def test_a_request_the_server_answers_with_400_keeps_its_error_and_the_session() -> None:
    # a 400 asks for a liveness probe: the session is alive, so the call's own error stands
    server, _ = build_server()
    async with serve_asgi(
        refuses_a_call_with_400(server.streamable_http_app(), "forbidden-word")
    ) as base:
        bridge = make_bridge(
            {
                "name": "remote",
                "kind": "mcp",
                "url": f"{base}/mcp",
                "protocol": "legacy",
                **FAST_RETRY,
            }
        )
        async with bridge:
            refused = await bridge.invoker.invoke("remote__echo", {"text": "forbidden-word"})
            assert refused.error is not None and refused.error.error_class == "invalid_arguments", (
                refused.error
            )
            assert "forbidden-word is not accepted here" in refused.error.message
            assert bridge.catalog.slot("remote").health.state == "ready"
            assert (await bridge.invoker.invoke("remote__echo", {"text": "fine"})).content[0][
                "text"
            ] == "fine"


def failing_after_initialize(failure: str, seen: list[tuple[str, str | None]]) -> Any:
    """A streamable HTTP server that opens a session at `initialize` (id `s1`) and fails the start
    right after it: `version`, an initialize answer of a protocol version the client does not
    speak; `invalid`, one the SDK's types reject; `listing`, a tools/list answered with an error;
    `listing_hangs`, one never answered. Notes each request's method and session id in `seen`."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        session = dict(scope["headers"]).get(b"mcp-session-id")
        body = await read_body(receive)
        request = json.loads(body) if body else {}
        seen.append((scope["method"], session.decode() if session else None))
        answer: dict[str, Any] | None = None
        if request.get("method") == "initialize":
            version = {"version": "1999-01-01"}.get(failure, "2025-06-18")
            result: dict[str, Any] = {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "s", "version": "1"},
            }
            if failure == "invalid":
                result["capabilities"] = "none"
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        elif request.get("method") == "tools/list":
            if failure == "listing_hangs":
                await asyncio.Event().wait()
            answer = {
                "jsonrpc": "2.0",
                "id": request["id"],
                "error": {"code": -32603, "message": "the listing broke"},
            }
        elif "id" in request:
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
        status = (
            200
            if answer is not None or scope["method"] == "DELETE"
            else 202
            if scope["method"] == "POST"
            else 405
        )
        headers = [(b"mcp-session-id", b"s1")] + (
            [(b"content-type", b"application/json")] if answer is not None else []
        )
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send(
            {
                "type": "http.response.body",
                "body": json.dumps(answer).encode() if answer is not None else b"",
            }
        )

    return app


@pytest.mark.parametrize("failure", ["version", "invalid", "listing", "listing_hangs"])
async def test_a_start_that_fails_after_initialize_ends_the_session_it_opened(failure: str) -> None:
    # the server opened a session when it answered initialize; a start that fails after it
    # ends that session with a DELETE, as a session the bridge leaves is ended. One whose
    # initialize answer was refused sent no other request naming the session, and was left open
    seen: list[tuple[str, str | None]] = []
    async with serve_asgi(failing_after_initialize(failure, seen), lifespan="off") as base:
        upstream = {
            "name": "remote",
            "kind": "mcp",
            "url": f"{base}/mcp",
            "protocol": "legacy",
            "start_timeout": 1,
            "ping_timeout": 1,
            "retry_initial": 30,
            "retry_max": 30,
        }
        async with make_bridge(upstream) as bridge:
            assert bridge.catalog.slot("remote").health.state == "failed"
            await until(lambda: ("DELETE", "s1") in seen, timeout=5)
    assert seen.count(("DELETE", "s1")) == 1 and seen[0] == ("POST", None), seen


async def test_unstartable_command_fails_with_a_clear_reason() -> None:
    bridge = make_bridge(
        {
            "name": "ghost",
            "kind": "mcp",
            "command": "no-such-mcp-server-binary",
            "retry_initial": 30,
        }
    )
    async with bridge:
        health = bridge.catalog.slot("ghost").health
        assert health.state == "failed"
        assert "cannot start `no-such-mcp-server-binary`" in health.reason


async def test_a_listing_whose_cursor_repeats_fails_with_the_reason_and_an_endless_one_stops_at_max_pages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bridge = make_bridge(
        {
            "name": "same",
            "kind": "mcp",
            "command": "python",
            "args": [TINY, "--cursors", "same"],
            "retry_initial": 30,
            "retry_max": 30,
        },
        {
            "name": "endless",
            "kind": "mcp",
            "command": "python",
            "args": [TINY, "--cursors", "endless"],
            "max_pages": 5,
        },
    )
    async with asyncio.timeout(10), bridge:
        same = bridge.catalog.slot("same").health
        assert (
            same.state == "failed"
            and same.reason == "MCP upstream 'same' repeated the tools/list cursor '1'"
        ), same
        assert bridge.catalog.slot("endless").health.state == "ready"
        assert sorted(d.name for d in bridge.catalog.declarations()) == [
            f"endless__echo_{page}" for page in range(5)
        ]
    assert "mcp upstream endless: tools/list still had pages after max_pages=5" in caplog.text


# ------------------------------------------------------------------------------ answers the SDK rejects


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_invalid_tools_are_skipped_with_a_warning_and_a_large_listing_is_checked_off_the_loop(
    protocol: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tools the SDK's types reject are skipped, each with a warning, the others kept, over stdio
    and HTTP alike. A page of OFF_LOOP_TOOLS tools or more is checked, and the listing converted,
    on a worker thread (the event loop serves calls meanwhile); a small one on the loop. Nothing
    else differs."""
    caplog.set_level(logging.WARNING, logger="bridge.adapters.mcp")
    ran_on: dict[tuple[str, str], set[bool]] = {}

    def spy(method: str) -> None:
        original = getattr(MCPUpstream, method)

        def record(self: MCPUpstream, *args: Any) -> Any:
            ran_on.setdefault((self.name, method), set()).add(
                threading.current_thread() is threading.main_thread()
            )
            return original(self, *args)

        monkeypatch.setattr(MCPUpstream, method, record)

    spy("_tools_page")
    spy("_converted")
    filler = OFF_LOOP_TOOLS + 20
    server, state = build_server(page_size=4)
    state.bad_tools = list(BAD_TOOLS)  # on the first of several pages
    async with serve_asgi(server.streamable_http_app()) as base:
        bridge = make_bridge(
            stdio("local", "--bad-tools", "--page-size", "4", protocol=protocol),
            {
                "name": "remote",
                "kind": "mcp",
                "url": f"{base}/mcp",
                "protocol": protocol,
                **FAST_RETRY,
            },
            stdio(
                "large",
                "--bad-tools",
                "--filler",
                str(filler),
                "--page-size",
                "10000",
                protocol=protocol,
            ),
        )
        async with bridge:
            # the SDK's 2026-07-28 types accept a `required` that is not a list of names
            kept = {t.name for t in base_tools()} | (
                {"bad_required"} if protocol != "legacy" else set()
            )
            for up in ("local", "remote"):
                slot = bridge.catalog.slot(up)
                assert slot.health.state == "ready"
                assert {
                    d.native_name for d in bridge.catalog.declarations() if d.upstream == up
                } == kept
                skipped = (await slot.upstream.health())["skipped_tools"]
                assert skipped["not_an_object"] == "inputSchema.type: Input should be 'object'"
                assert skipped["schema_is_text"].startswith(
                    "inputSchema: Input should be a valid dictionary"
                )
                assert skipped["#8 of page 1"] == "name: Field required"
                assert ("bad_required" in skipped) == (protocol == "legacy")
                # a nameless tool cannot be called, nor a second of a name: the first echo is kept
                assert [
                    why for label, why in skipped.items() if label.endswith("of the listing")
                ] == ["a tool needs a name"]
                assert (
                    skipped["echo"]
                    == "another tool of the listing has this name (the first is kept)"
                )
                assert (
                    next(
                        d
                        for d in bridge.catalog.declarations()
                        if d.upstream == up and d.native_name == "echo"
                    ).description
                    == "Echo the given text."
                )
                warning = f"mcp upstream {up}: skipped tool 'not_an_object': inputSchema.type: Input should be 'object'"
                assert warning in caplog.messages
                assert (await bridge.invoker.invoke(f"{up}__echo", {"text": "still here"})).content[
                    0
                ]["text"] == "still here"

            # the large listing, read in one page, keeps and skips what the small one does
            listed = {
                up: {d.native_name for d in bridge.catalog.declarations() if d.upstream == up}
                for up in ("large", "local")
            }
            assert listed["large"] == listed["local"] | {f"filler_{i:03d}" for i in range(filler)}
            skipped_by = {
                up: (await bridge.catalog.slot(up).upstream.health())["skipped_tools"]
                for up in ("large", "local")
            }
            for found in (
                skipped_by.values()
            ):  # a tool without a name is labelled by its place in the page, or the listing
                assert sorted(
                    found.pop(label) for label in [k for k in found if k.startswith("#")]
                ) == ["a tool needs a name", "name: Field required"]
            assert skipped_by["large"] == skipped_by["local"] and skipped_by["large"][
                "not_an_object"
            ].startswith("inputSchema.type")
            assert (await bridge.invoker.invoke("large__echo", {"text": "hi"})).content[0][
                "text"
            ] == "hi"

            # a re-list keeps the upstream ready and does not repeat the warnings
            await bridge.invoker.invoke("local__set_extra", {"names": ["late"], "notify": True})
            await until(lambda: bridge.catalog.resolve("local__late") is not None)
            assert bridge.catalog.slot("local").health.state == "ready"
            assert (
                sum(
                    "mcp upstream local: skipped tool 'not_an_object'" in m for m in caplog.messages
                )
                == 1
            )
    assert ran_on[("large", "_tools_page")] == ran_on[("large", "_converted")] == {False}
    assert ran_on[("local", "_tools_page")] == ran_on[("local", "_converted")] == {True}


# ------------------------------------------------------------------------------ one server per era

SHARED_LINE_LIMIT = 1 << 20
# the upstream of the shared bridge speaking each era
SHARED = {"legacy": "legacy", "2026-07-28": "modern"}
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared() -> AsyncIterator[Bridge]:
    """One bridge for the tests below, which call tools of a server that stays up and check that
    its session (its process) is the same throughout: the fixture server over stdio in each era,
    `legacy` reading lines of at most SHARED_LINE_LIMIT bytes."""
    settings: dict[str, Any] = {"timeout": 20, "ping_interval": None}
    bridge = make_bridge(
        stdio(
            "legacy",
            "--page-size",
            "8",
            protocol="legacy",
            max_line_bytes=SHARED_LINE_LIMIT,
            **settings,
        ),
        stdio("modern", "--page-size", "8", protocol="2026-07-28", **settings),
    )
    async with bridge:
        yield bridge


async def echoes(bridge: Bridge) -> int:
    """How many calls of `echo` the shared bridge's `modern` server has seen."""
    events = (await bridge.invoker.invoke("modern__events", {})).content[0]["text"]
    return sum(e.startswith("call echo") for e in json.loads(events))


@module_loop
@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_unreadable_answers_fail_their_call_at_once_and_repairable_ones_are_kept(
    protocol: str, shared: Bridge
) -> None:
    bridge, srv = shared, SHARED[protocol]
    loop = asyncio.get_running_loop()
    pid = await pid_of(bridge, srv)
    # a lone surrogate escape: replaced by U+FFFD, the answer kept
    kept = await bridge.invoker.invoke(f"{srv}__raw_answer", {"kind": "surrogate"})
    assert kept.status == "succeeded" and kept.content == [{"type": "text", "text": "x\ufffdy"}]

    # deeper than the parser allows, or not a JSON-RPC answer: the call fails now, clearly,
    # and not as a timeout that invites a retry (the call may have run)
    for kind, problem in (
        ("deep", "Invalid JSON: recursion limit exceeded"),
        ("very_deep", "Invalid JSON: recursion limit exceeded"),
        ("shape", "result: Input should be a valid dictionary"),
        ("no_result", "an answer needs a `result` or an `error`, and this one has neither"),
    ):
        begun = loop.time()
        failed = await bridge.invoker.invoke(f"{srv}__raw_answer", {"kind": kind})
        assert loop.time() - begun < 5
        assert failed.status == "failed" and failed.error.error_class == "execution_failed"
        assert failed.error.recoverability != "retry"
        assert (
            "the server's answer could not be read" in failed.error.message
            and problem in failed.error.message
        )

    assert (await bridge.invoker.invoke(f"{srv}__echo", {"text": "fine"})).content[0][
        "text"
    ] == "fine"
    assert await pid_of(bridge, srv) == pid  # the same session throughout


@module_loop
async def test_a_line_over_max_line_bytes_fails_its_call_and_the_session_goes_on(
    shared: Bridge,
) -> None:
    bridge, limit = shared, SHARED_LINE_LIMIT
    loop = asyncio.get_running_loop()
    pid = await pid_of(bridge, "legacy")
    # the request id at the head of the line (answered as soon as the line is too long) or at its end
    for kind in ("big", "big_id_last"):
        begun = loop.time()
        result = await bridge.invoker.invoke(
            "legacy__raw_answer", {"kind": kind, "size": 6 * limit}
        )
        assert loop.time() - begun < 5
        assert result.status == "too_large" and result.error.error_class == "result_too_large"
        assert f"longer than max_line_bytes={limit} bytes" in result.error.message

    # a line just within the limit is read whole, and the session is the same one
    within = await bridge.invoker.invoke("legacy__raw_answer", {"kind": "big", "size": limit - 200})
    assert within.status == "succeeded"
    assert (await bridge.invoker.invoke("legacy__echo", {"text": "fine"})).content[0][
        "text"
    ] == "fine"
    assert await pid_of(bridge, "legacy") == pid


@module_loop
@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_a_storm_of_change_notices_costs_a_few_listings(
    protocol: str, shared: Bridge
) -> None:
    bridge, srv = shared, SHARED[protocol]

    async def listings() -> int:
        events = (await bridge.invoker.invoke(f"{srv}__events", {})).content[0]["text"]
        return json.loads(events).count("list 0")

    before = await listings()
    # a storm outlasting the least time between two listings (a second)
    sent = await bridge.invoker.invoke(f"{srv}__storm", {"seconds": 1.2, "every": 0.002})
    assert int(sent.content[0]["text"]) > 100
    await bridge.invoker.invoke(f"{srv}__set_extra", {"names": ["after_storm"], "notify": True})
    await until(lambda: bridge.catalog.resolve(f"{srv}__after_storm") is not None, timeout=10)
    # one listing per second at most (not one per notice), and the last change is listed
    assert 1 <= await listings() - before <= 6


def nested(levels: int) -> dict[str, Any]:
    """Arguments nesting `levels` objects and arrays deep, the arguments object the first."""
    value: Any = "bottom"
    for _ in range(levels - 1):
        value = [value]
    return {"text": "deep", "extra": value}


@module_loop
async def test_arguments_json_cannot_carry_are_refused_before_the_upstream_and_its_session_goes_on(
    shared: Bridge,
) -> None:
    """A lone surrogate escape (`"\\ud800"` reads into a string no UTF-8 writer takes) once failed
    the SDK's writer inside the shared stdio session: the session closed, and every call in it
    with it. NaN and nesting past MAX_ARGUMENT_DEPTH are refused the same way."""
    from bridge.arguments import MAX_ARGUMENT_DEPTH

    bridge = shared
    echoed = await echoes(bridge)
    pid = await pid_of(bridge, "modern")
    slow = asyncio.ensure_future(bridge.invoker.invoke("modern__slow", {"steps": 4, "delay": 0.2}))
    cases = [
        ({"text": "a\ud800b"}, "/text", "not valid Unicode"),
        ({"text": "x", "odd/\udfffkey": 1}, "/odd~1\ufffdkey", "not valid Unicode"),
        ({"text": "x", "list": ["ok", "\ud83d"]}, "/list/1", "not valid Unicode"),
        ({"text": "x", "n": [1.5, float("-inf")]}, "/n/1", "NaN or Infinity"),
        # the arguments object, then "extra" and 63 arrays: the 65th level
        (
            nested(MAX_ARGUMENT_DEPTH + 1),
            "/extra" + "/0" * (MAX_ARGUMENT_DEPTH - 1),
            f"deeper than {MAX_ARGUMENT_DEPTH} levels",
        ),
    ]
    for arguments, pointer, said in cases:
        result = await bridge.invoker.invoke("modern__echo", arguments)
        assert result.status == "rejected" and result.error.error_class == "invalid_arguments", (
            arguments
        )
        assert said in result.error.message and result.error.recoverability == "change_arguments"
        assert result.error.details["errors"][0][
            "path"
        ] == pointer and result.error.message.endswith(f"at {pointer}")
        json.dumps(
            result.model_dump(mode="json"), ensure_ascii=False
        ).encode()  # the answer itself is sendable
    # the call under way and the session are untouched; a pair (an emoji) and 64 levels pass
    assert (await slow).status == "succeeded"
    paired = json.loads('{"text": "\\ud83d\\ude00"}')  # as a JSON reader reads an escaped pair
    assert (await bridge.invoker.invoke("modern__echo", paired)).content[0]["text"] == "\U0001f600"
    assert (await bridge.invoker.invoke("modern__echo", nested(MAX_ARGUMENT_DEPTH))).content[0][
        "text"
    ] == "deep"
    assert await pid_of(bridge, "modern") == pid
    assert await echoes(bridge) == echoed + 2  # the two calls that passed, and no other


def check_with_open_files_limit(
    tmp_path: Path, servers: int, soft: int, hard: int
) -> subprocess.CompletedProcess[str]:
    """`bridge check --json` on `servers` stdio servers, run under the given limits of open files."""
    config = {
        "store": {"path": ":memory:"},
        "search": {"semantic": "off"},
        "upstreams": [
            {
                "name": f"s{i}",
                "kind": "mcp",
                "command": "python",
                "args": [TINY],
                "retry_initial": 30,
            }
            for i in range(servers)
        ],
    }
    (tmp_path / "bridge.json").write_text(json.dumps(config))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge.cli",
            "check",
            "--json",
            "-c",
            str(tmp_path / "bridge.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
    )


SERVERS = 25  # stdio servers of the two tests below


def test_many_stdio_servers_start_under_a_low_soft_limit_of_open_files(tmp_path):
    # each server holds three descriptors: 25 of them pass a soft limit of 64 (the next test
    # shows it), which failed them, though the hard limit let the bridge raise it
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard limit of open files is {hard}")
    done = check_with_open_files_limit(tmp_path, SERVERS, 64, hard)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [u["state"] for u in json.loads(done.stdout)] == ["ready"] * SERVERS


def test_stdio_servers_past_the_hard_limit_of_open_files_fail_naming_the_limit_and_its_fix(
    tmp_path,
):
    done = check_with_open_files_limit(tmp_path, SERVERS, 64, 64)
    assert done.returncode == 1
    failed = [u for u in json.loads(done.stdout) if u["state"] == "failed"]
    assert failed and all(
        "out of file descriptors" in u["reason"] and "ulimit -n) is 64" in u["reason"]
        for u in failed
    ), failed


async def test_an_http_server_that_cannot_be_reached_costs_little_cpu_to_try_again():
    # each connection made a TLS context, reading the CA bundle: 30 ms of CPU on the event loop
    # at every retry of each server that could not be reached
    config = parse_config(
        {
            "upstreams": [
                {"name": "gone", "kind": "mcp", "url": f"http://127.0.0.1:{free_port()}/mcp"}
            ]
        },
        source="test",
    )
    up = MCPUpstream(config.upstreams[0])
    begun = time.process_time()
    for _ in range(30):
        with pytest.raises(
            ConnectionError, match=r"HTTP connection to http://127\.0\.0\.1:.* failed"
        ):
            await up.start()
    await up.close()
    assert time.process_time() - begun < 0.6


# a bridge in miniature: starts a stdio server that never reads its stdin (so never sees it
# end), says its pid, then waits to be killed
ORPHAN_PARENT = """
import asyncio, sys
from adapters.mcp.stdio import StdioChild

async def main():
    child = StdioChild("deaf", [sys.executable, "-c", "import time; time.sleep(60)"], env=None, cwd=".", shutdown_timeout=1)
    async with child.connect():
        print(child.pid, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("setpriv") is None,
    reason="setpriv --pdeathsig is Linux's",
)
async def test_a_stdio_server_that_ignores_its_stdin_ends_when_the_bridge_is_killed():
    assert await process_ended(await left_by_a_killed_parent(ORPHAN_PARENT, ROOT))
