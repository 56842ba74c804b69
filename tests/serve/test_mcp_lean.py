"""The lean path of `tools/call` (bridge/serve/mcp_lean.py): a plain call is answered without the
SDK's server session, with the message the SDK's path answers (results and errors alike, in both
eras; in JSON, or on an event stream once a call runs long), and anything unusual still goes to
the SDK."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
import pytest_asyncio

import bridge.serve.mcp_lean as mcp_lean
from bridge.model import BridgeError
from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import (
    ACCEPT,
    HANDSHAKE,
    INITIALIZE,
    MODERN,
    MODERN_META,
    Served,
    served_bridge,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = {
    "surfaces": [
        {
            "name": "default",
            "load": ["svc__*", "bad__*"],
            "defer": ["later__*"],
            "block": {"destructive": True},
        }
    ],
    "rate_limits": [
        {"name": "tight", "rate": "1/min", "burst": 1, "per": [], "tool": "svc__limited"}
    ],
}
# what differs from one call to the next: ids, durations, the seconds a rate limit names
_VARYING = re.compile(r'"(inv|res)_[0-9a-f]+"|[0-9]+\.[0-9]+')
# the headers a client sees, but those of the HTTP server itself
_OWN_HEADERS = {"date", "server", "transfer-encoding"}


class Env:
    def __init__(self, srv: Served, http: httpx2.AsyncClient, session: dict[str, str]) -> None:
        self.srv, self.http, self.session = srv, http, session
        self.lean = srv.frontend.lean
        assert self.lean is not None

    def headers(self, era: str, name: str) -> dict[str, str]:
        if era == HANDSHAKE:
            headers = dict(self.session)
        else:
            headers = {**ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"}
            headers["Mcp-Name"] = name
        return headers

    async def call(
        self,
        era: str,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> httpx2.Response:
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        if era == MODERN:
            params["_meta"] = {**MODERN_META, **(meta or {})}
        elif meta:
            params["_meta"] = meta
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
        return await self.http.post(
            f"{self.srv.url}/mcp", json=body, headers=self.headers(era, name)
        )

    async def both(self, era: str, name: str, arguments: dict[str, Any] | None = None) -> None:
        """Call through the lean path, then through the SDK's; the answers are the same."""
        served = self.lean.served
        lean = await self.call(era, name, arguments)
        assert self.lean.served == served + 1, "the lean path was not taken"
        self.lean.enabled = False
        try:
            sdk = await self.call(era, name, arguments)
        finally:
            self.lean.enabled = True
        assert self.lean.served == served + 1
        if era == MODERN:
            assert _seen(lean) == _seen(sdk)
        else:  # the lean answer is JSON, the SDK's an event stream: the same message in each
            assert lean.headers["content-type"] == "application/json"
            assert sdk.headers["content-type"] == "text/event-stream"
            assert lean.status_code == sdk.status_code == 200
            assert lean.headers["mcp-session-id"] == sdk.headers["mcp-session-id"]
            (data,) = [x for x in sdk.text.splitlines() if x.startswith("data: ")]
            assert _VARYING.sub("N", lean.text) == _VARYING.sub("N", data.removeprefix("data: "))


def _seen(response: httpx2.Response) -> tuple[int, list[tuple[str, str]], str]:
    headers = [(k, v) for k, v in response.headers.multi_items() if k not in _OWN_HEADERS]
    if response.headers.get("content-type") == "application/json":
        headers = [(k, v) for k, v in headers if k != "content-length"]  # numbers vary
    return response.status_code, headers, _VARYING.sub("N", response.text)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env() -> AsyncIterator[Env]:
    svc = FakeUpstream(
        name="svc",
        tools=[
            tool("echo", read_only=True),
            tool("wipe", destructive=True),
            tool("limited", read_only=True),
            tool("slow", read_only=True),
        ],
    )
    bad = FakeUpstream(name="bad", tools=[tool("boom", read_only=True)])
    bad.raise_error = BridgeError("the server broke", error_class="execution_failed")
    later = FakeUpstream(name="later", tools=[tool("hidden", read_only=True)])
    async with (
        served_bridge(CONFIG, [svc, bad, later]) as srv,
        httpx2.AsyncClient(timeout=30) as http,
    ):
        opened = await http.post(f"{srv.url}/mcp", json=INITIALIZE, headers=ACCEPT)
        session = {
            **ACCEPT,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": HANDSHAKE,
        }
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post(f"{srv.url}/mcp", json=initialized, headers=session)
        yield Env(srv, http, session)


@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
async def test_a_call_and_its_errors_answer_the_bytes_the_sdk_answers(env: Env, era: str):
    plain = env.lean.plain.written
    await env.both(era, "svc__echo", {"text": "hé ✓"})  # a result, non-ASCII text in it
    assert env.lean.plain.written == plain + 1  # text alone: written without the SDK's models
    await env.both(era, "svc__nope")  # unknown tool
    await env.both(era, "svc__wipe")  # blocked on the caller's surface
    await env.both(era, "bad__boom")  # the upstream's error
    await env.both(era, "svc__echo", {"text": 5})  # arguments that fail the schema
    await env.call(era, "svc__limited")  # spends the one call the limit allows
    await env.both(era, "svc__limited")  # rate-limited


@pytest.mark.parametrize(
    ("name", "meta"),
    [
        ("later__hidden", None),  # deferred: whether its schema is loaded is the session's
        ("search_tools", None),
        ("svc__echo", {"progressToken": 3}),  # progress for the SDK to relay
    ],
)
@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
async def test_what_needs_the_sdk_goes_to_it(
    env: Env, era: str, name: str, meta: dict[str, Any] | None
):
    served = env.lean.served
    response = await env.call(
        era, name, {"query": "x"} if name == "search_tools" else {}, meta=meta
    )
    assert response.status_code == 200, response.text
    assert env.lean.served == served


async def test_a_modern_call_past_the_keepalive_window_answers_on_an_event_stream(
    env: Env, monkeypatch: pytest.MonkeyPatch
):
    """As the SDK does: keep-alive comments, then the answer as one `message` event."""
    import mcp.server._streamable_http_modern as sdk_modern

    monkeypatch.setattr(mcp_lean, "KEEPALIVE", 0.05)
    monkeypatch.setattr(sdk_modern, "_SSE_PING_INTERVAL", 0.05)
    svc = env.srv.bridge.catalog.slot("svc").upstream
    svc.gate = asyncio.Event()
    answers = []
    try:
        for lean in (True, False):
            env.lean.enabled = lean
            pending = asyncio.ensure_future(env.call(MODERN, "svc__slow", {"text": "z"}))
            await asyncio.sleep(0.3)
            svc.gate.set()
            answers.append(await pending)
            svc.gate.clear()
    finally:
        env.lean.enabled = True
        svc.gate = None
    answers_seen = lean_seen, sdk_seen = [_seen(a) for a in answers]
    assert lean_seen[0] == sdk_seen[0] == 200 and lean_seen[1] == sdk_seen[1]
    assert lean_seen[2].startswith(": ping\r\n\r\n")
    events = [[x for x in seen[2].splitlines() if x.startswith("data: ")] for seen in answers_seen]
    assert events[0] == events[1] and len(events[0]) == 1


async def test_a_handshake_call_past_the_keepalive_window_answers_on_an_event_stream(
    env: Env, monkeypatch: pytest.MonkeyPatch
):
    """Keep-alive comments, as the SDK's event stream sends them, then the answer as one
    `message` event: the message the SDK's path answers."""
    monkeypatch.setattr(mcp_lean, "KEEPALIVE", 0.05)
    svc = env.srv.bridge.catalog.slot("svc").upstream
    svc.gate = asyncio.Event()
    try:
        served = env.lean.served
        pending = asyncio.ensure_future(env.call(HANDSHAKE, "svc__slow", {"text": "z"}))
        await asyncio.sleep(0.3)
        svc.gate.set()
        lean = await pending
    finally:
        svc.gate = None
    assert env.lean.served == served + 1
    assert lean.headers["content-type"] == "text/event-stream"
    assert lean.headers["mcp-session-id"] == env.session["Mcp-Session-Id"]
    assert lean.text.startswith(": ping - ")
    (data,) = [x for x in lean.text.splitlines() if x.startswith("data: ")]
    env.lean.enabled = False
    try:
        sdk = await env.call(HANDSHAKE, "svc__slow", {"text": "z"})
    finally:
        env.lean.enabled = True
    (sdk_data,) = [x for x in sdk.text.splitlines() if x.startswith("data: ")]
    assert _VARYING.sub("N", data) == _VARYING.sub("N", sdk_data)


async def test_a_handshake_call_is_cancelled_by_notifications_cancelled(env: Env):
    svc = env.srv.bridge.catalog.slot("svc").upstream
    svc.gate = asyncio.Event()
    try:
        served = env.lean.served
        pending = asyncio.ensure_future(env.call(HANDSHAKE, "svc__slow", {"text": "z"}))
        async with asyncio.timeout(10):
            while not env.lean._running:
                await asyncio.sleep(0.01)
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "no longer needed"},
        }
        sent = await env.http.post(f"{env.srv.url}/mcp", json=cancel, headers=env.session)
        assert sent.status_code == 202
        response = await pending
    finally:
        svc.gate = None
    assert env.lean.served == served + 1
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32800, "message": "Request cancelled"},
    }


@pytest.mark.parametrize("told_by", ["protocol", "watcher"])
async def test_a_modern_call_is_cancelled_when_its_client_leaves(
    env: Env, told_by: str, monkeypatch: pytest.MonkeyPatch
):
    """The HTTP protocol tells the lean path that the client left; a server that does not
    (no such key in the scope) has a watcher of the connection tell it."""
    if told_by == "watcher":
        monkeypatch.setattr(mcp_lean, "LEAVE_SCOPE_KEY", "no such key")
    svc = env.srv.bridge.catalog.slot("svc").upstream
    svc.gate = asyncio.Event()
    running = env.srv.frontend.calls.running  # the handlers of tools/call in the pipeline
    try:
        served = env.lean.served
        pending = asyncio.ensure_future(env.call(MODERN, "svc__slow", {"text": "z"}))
        async with asyncio.timeout(10):
            while not running:
                await asyncio.sleep(0.01)
        pending.cancel()  # the client closes its connection
        async with asyncio.timeout(10):
            while running:  # the call is cancelled without its upstream answering
                await asyncio.sleep(0.01)
        assert not svc.gate.is_set() and env.lean.served == served + 1
    finally:
        svc.gate = None


async def test_what_a_plan_kept_of_a_tool_follows_the_catalog(env: Env):
    """What the lean path keeps of a tool (here: that its schema declares no `x-mcp-header`)
    is dropped when the catalog changes: a call the SDK's `Mcp-Param-*` check now refuses
    goes to the SDK."""
    svc = env.srv.bridge.catalog.slot("svc").upstream
    catalog = env.srv.bridge.catalog
    before = list(svc.tools)
    served = env.lean.served
    await env.call(MODERN, "svc__echo", {"text": "a", "zone": "eu"})
    assert env.lean.served == served + 1

    async def changed(tools: list[Any]) -> None:
        generation = catalog.generation
        svc.change_tools(tools)
        async with asyncio.timeout(10):
            while catalog.generation == generation:
                await asyncio.sleep(0.01)

    props = {"text": {"type": "string"}, "zone": {"type": "string", "x-mcp-header": "Zone"}}
    await changed([tool("echo", read_only=True, props=props), *before[1:]])
    try:
        response = await env.call(MODERN, "svc__echo", {"text": "a", "zone": "eu"})
        assert env.lean.served == served + 1  # no Mcp-Param-Zone header: the SDK refuses it
        assert response.status_code == 400, response.text
    finally:
        await changed(before)


@pytest.mark.parametrize(
    ("header", "value"),
    [("Mcp-Name", "svc__wipe"), ("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Method", "x")],
)
async def test_a_kept_envelope_verdict_holds_for_its_headers_only(
    env: Env, header: str, value: str
):
    """The SDK's envelope checks are decided once per envelope and headers: a call whose
    routing header disagrees with its body after the same call passed goes to the SDK, which
    refuses it, and the agreeing call is answered here again."""
    served = env.lean.served
    await env.call(MODERN, "svc__echo", {"text": "a"})
    assert env.lean.served == served + 1
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "svc__echo", "arguments": {"text": "a"}, "_meta": MODERN_META},
    }
    headers = {**env.headers(MODERN, "svc__echo"), header: value}
    refused = await env.http.post(f"{env.srv.url}/mcp", json=body, headers=headers)
    assert env.lean.served == served + 1
    assert refused.status_code == 400, refused.text
    await env.call(MODERN, "svc__echo", {"text": "a"})
    assert env.lean.served == served + 2
