"""A `tools/call` sent to an MCP server over streamable HTTP beside the SDK's session
(adapters/mcp/lean.py): taken by a call whose caller cannot be asked, in both eras, with the
result, the errors, the progress, the log lines and the refusals of the server's questions the
SDK's session gives; a call whose caller can be asked still goes through the SDK."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from adapters.mcp.upstream import MCPUpstream
from bridge.config import parse_config
from bridge.model import ToolProgress
from bridge.runtime import Bridge
from bridge.upstream import CALLER_ASKS
from tests.adapters.mcp_fixtures.server import build_server
from tests.servers import serve_asgi

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODERN = "2026-07-28"
ERAS = ["legacy", MODERN]
_VARYING = re.compile(r"'(inv|res)_[0-9a-f]+'|[0-9]+\.[0-9]+")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bridge() -> AsyncIterator[Bridge]:
    server, _ = build_server()
    async with serve_asgi(server.streamable_http_app()) as base:
        config = {
            "store": {"path": ":memory:"},
            "upstreams": [
                {
                    "name": era.replace("-", "_"),
                    "kind": "mcp",
                    "url": f"{base}/mcp",
                    "protocol": era,
                }
                for era in ERAS
            ],
        }
        found = Bridge(parse_config(config, source="test"))
        await found.start()
        try:
            yield found
        finally:
            await found.close()


def upstream_of(bridge: Bridge, era: str) -> MCPUpstream:
    found = bridge.catalog.slot(era.replace("-", "_")).upstream
    assert isinstance(found, MCPUpstream)
    return found


async def both(bridge: Bridge, era: str, tool: str, arguments: dict[str, Any]) -> list[Any]:
    """The call through the lean path, then through the SDK's session: what each answered, with
    the progress it reported."""
    upstream = upstream_of(bridge, era)
    seen = []
    for lean in (True, False):
        upstream.lean = lean
        sent = upstream.lean_calls
        progress: list[ToolProgress] = []

        async def report(step: ToolProgress, progress: list[ToolProgress] = progress) -> None:
            progress.append(step)

        try:
            result = await bridge.invoker.invoke(
                f"{era.replace('-', '_')}__{tool}", arguments, progress=report
            )
        finally:
            upstream.lean = True
        assert upstream.lean_calls == sent + lean, "the lean path was (not) taken"
        record = result.model_dump(
            exclude={"invocation_id", "result_id", "started_at", "ended_at", "duration_ms"}
        )
        steps = [(p.message, p.current_step, p.total_steps, p.percent) for p in progress]
        seen.append((_VARYING.sub("N", repr(record)), steps))
    assert seen[0] == seen[1]
    return seen[0]


@pytest.mark.parametrize("era", ERAS)
async def test_results_and_errors_are_those_of_the_sdks_session(bridge: Bridge, era: str):
    await both(bridge, era, "echo", {"text": "hé ✓"})
    await both(bridge, era, "add", {"a": 2, "b": 3})  # structured content
    await both(bridge, era, "every_content", {})  # each kind of content block
    await both(bridge, era, "fail", {"text": "no"})  # an isError result
    await both(bridge, era, "fail", {"code": -32602, "message": "unknown tool x"})  # an error
    await both(bridge, era, "fail", {"code": -32000, "message": "boom"})


@pytest.mark.parametrize("era", ERAS)
async def test_progress_reaches_the_caller(bridge: Bridge, era: str):
    record, steps = await both(bridge, era, "slow", {"steps": 3, "delay": 0.01})
    assert len(steps) == 3 and "done 3" in record


async def test_a_question_of_the_server_is_refused_as_the_sdk_refuses_it(bridge: Bridge):
    record, _ = await both(bridge, "legacy", "ask", {"what": "elicitation"})
    assert "refused: -32602" in record


async def test_the_servers_log_lines_during_a_call_are_the_sessions(
    bridge: Bridge, caplog: pytest.LogCaptureFixture
):
    upstream = upstream_of(bridge, "legacy")
    with caplog.at_level(logging.INFO, logger="bridge.adapters.mcp"):
        sent = upstream.lean_calls
        await bridge.invoker.invoke("legacy__log", {"text": "over the lean path"})
        assert upstream.lean_calls == sent + 1
    assert any("over the lean path" in r.getMessage() for r in caplog.records), caplog.text


async def test_a_call_whose_caller_can_be_asked_goes_through_the_sdk(bridge: Bridge):
    upstream = upstream_of(bridge, "legacy")

    async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"name": "x"}}

    sent = upstream.lean_calls
    token = CALLER_ASKS.set(ask)
    try:
        result = await bridge.invoker.invoke("legacy__ask", {"what": "elicitation"})
    finally:
        CALLER_ASKS.reset(token)
    assert upstream.lean_calls == sent
    assert "answered" in result.content[0]["text"], result.content


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_goes_over_the_kept_connections_of_the_narrow_client(bridge: Bridge, era: str):
    upstream = upstream_of(bridge, era)
    assert upstream._wire is not None
    tool = f"{era.replace('-', '_')}__echo"
    await bridge.invoker.invoke(tool, {"text": "kept"})  # the first call makes the pool
    (kept,) = upstream._wire._kept.values()
    sent, opened = kept.sent, kept.opened
    for _ in range(3):
        result = await bridge.invoker.invoke(tool, {"text": "kept"})
        assert result.content == [{"type": "text", "text": "kept"}]
    assert kept.sent == sent + 3
    assert kept.opened <= opened + 1  # one kept connection carries them
