"""An ATIP command's wait for a user put to the MCP client that made the call, as an elicitation
in each era's own way: the demo `notes` tool run for real, its `note edit` reading the note's new
body on stdin. A client that declares no elicitation gets a `provide_input` error, and nothing
runs."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as types
import pytest
import pytest_asyncio
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.mcp import MCPFrontend
from tests.serve.mcp_support import MODERN
from tests.servers import serve_asgi

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

EDIT = "notes__notes_note_edit"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    work = tmp_path_factory.mktemp("notes")
    upstream = {
        "name": "notes",
        "kind": "atip",
        "command": ["python", "-m", "bridge.demo.atip_cli"],
        "cwd": str(work),
        "env": {"NOTES_DIR": str(work / "notes"), "PYTHONPATH": str(Path.cwd())},
        "xdg_data_home": str(work / "data"),
        "xdg_config_home": str(work / "config"),
        "system_dirs": [],
        "cache": False,
    }
    config = {"store": {"path": ":memory:"}, "upstreams": [upstream]}
    bridge = Bridge(parse_config(config, base_dir=str(work)))
    await bridge.start()
    frontend = MCPFrontend(bridge)
    try:
        added = await bridge.invoker.invoke("notes__notes_note_add", {"title": "todo"})
        assert added.structured_content["id"] == 1, added
        async with serve_asgi(frontend.http_app([]), server=bridge.config.server) as base:
            yield base
    finally:
        await frontend.aclose()
        await bridge.close()


asked: list[str] = []


async def answer(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    asked.append(params.message)
    assert params.requested_schema["required"] == ["input"]  # type: ignore[union-attr]
    return types.ElicitResult(action="accept", content={"input": f"body {len(asked)}"})


@contextlib.asynccontextmanager
async def client(url: str, era: str, **callbacks: Any) -> AsyncIterator[Any]:
    """A session whose `call_tool` is the era's own: ClientSession, or Client on 2026-07-28."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30)) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        if era == MODERN:
            async with Client(transport, mode=MODERN, cache=None, **callbacks) as modern:
                yield modern
            return
        async with transport as (read, write), ClientSession(read, write, **callbacks) as session:
            await session.initialize()
            yield session


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_the_commands_input_is_asked_of_a_client_that_declares_elicitation(
    url: str, era: str
) -> None:
    async with client(url, era, elicitation_callback=answer) as session:
        result = await session.call_tool(EDIT, {"id": 1})
    assert not result.is_error, result.content
    note = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert note["body"] == f"body {len(asked)}"
    assert asked[-1].startswith('`notes note edit` {"id": 1} (Replace the body of a note')


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_a_client_without_elicitation_gets_provide_input(url: str, era: str) -> None:
    async with client(url, era) as session:
        result = await session.call_tool(EDIT, {"id": 1})
    assert result.is_error
    error = result.structured_content["error"]  # type: ignore[index]
    assert error["error_class"] == "capability_gap" and error["recoverability"] == "provide_input"
    assert "from a client that answers elicitations" in result.content[0].text  # type: ignore[union-attr]
