"""Resources an MCP upstream links in a tool result, read back through the bridge: the fixture
server as a real stdio child, the bridge's whole app (MCP and REST) on uvicorn, the mcp SDK's
clients in both protocol eras. A read goes to the upstream that linked the URI, only for a
caller of the surface the link was given on, and never for a URI no result linked."""

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
from mcp.shared.exceptions import MCPError

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app
from tests.serve.mcp_support import HANDSHAKE, MODERN, http_client
from tests.servers import serve_asgi, until

FIXTURE = str(Path(__file__).resolve().parents[1] / "adapters" / "mcp_fixtures" / "server.py")
ALL, NARROW = "token-for-every-tool", "token-for-no-fixture-tool"
# the era of the client and the protocol of the upstream session
PAIRS = [(HANDSHAKE, "legacy"), (MODERN, MODERN)]


def config(protocol: str, *, default_blocks: tuple[str, ...] = ()) -> dict[str, Any]:
    blocks = {"narrow": ["fx__*"], "default": list(default_blocks)}
    return {
        "store": {"path": ":memory:"},
        "server": {"tokens": [{"token": ALL}, {"token": NARROW, "surface": "narrow"}]},
        "surfaces": [
            {"name": name, "block": [{"name": rule, "reason": "policy_blocked"} for rule in rules]}
            for name, rules in blocks.items()
        ],
        "upstreams": [
            {
                "name": "fx",
                "kind": "mcp",
                "command": "python",
                "args": [FIXTURE],
                "protocol": protocol,
                "retry_initial": 30,
                "retry_max": 30,
                "shutdown_timeout": 0.2,
            }
        ],
    }


@contextlib.asynccontextmanager
async def served(protocol: str) -> AsyncIterator[tuple[str, Bridge]]:
    bridge = Bridge(parse_config(config(protocol)))
    await bridge.start()
    app = build_app(bridge)
    try:
        assert bridge.catalog.slot("fx").health.state == "ready", bridge.catalog.slot(
            "fx"
        ).health.reason
        async with serve_asgi(app) as url:
            yield url, bridge
    finally:
        await close_app(app)
        await bridge.close()


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served_legacy() -> AsyncIterator[tuple[str, Bridge]]:
    """The bridge on a legacy session of the fixture server, for the module: its last test
    leaves the upstream down."""
    async with served("legacy") as both:
        yield both


async def upstream_reads(bridge: Bridge) -> list[str]:
    events = json.loads((await bridge.invoker.invoke("fx__events", {})).content[0]["text"])
    return [event for event in events if event.startswith("read ")]


async def refused(client: Any, uri: str) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await client.read(uri)
    return caught.value


@pytest.mark.parametrize(("era", "protocol"), PAIRS)
async def test_resources_an_upstream_linked_are_read_through_it_by_callers_of_that_surface(
    era: str, protocol: str, served_legacy: tuple[str, Bridge]
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        if protocol == "legacy":
            url, bridge = served_legacy
        else:
            url, bridge = await stack.enter_async_context(served(protocol))
        client = await stack.enter_async_context(http_client(url, era, ALL))
        kept = bridge.invoker.resource_links.kept
        stack.callback(setattr, bridge.invoker.resource_links, "kept", kept)
        await read_through(url, bridge, era, client)


async def read_through(url: str, bridge: Bridge, era: str, client: Any) -> None:
    reads = len(await upstream_reads(bridge))
    result = await client.call("fx__linked", {})
    assert not result.is_error, result.content
    link = next(b for b in result.content if isinstance(b, types.ResourceLink))
    embedded = next(b for b in result.content if isinstance(b, types.EmbeddedResource))
    assert (str(link.uri), str(embedded.resource.uri)) == (
        "fixture://notes/1",
        "fixture://notes/2",
    )  # as the upstream gave them

    text = await client.read("fixture://notes/1")
    assert [(str(c.uri), c.mime_type, c.text) for c in text.contents] == [
        ("fixture://notes/1", "text/plain", "note one")
    ]
    blob = await client.read("fixture://notes/2")
    assert [(c.mime_type, c.blob) for c in blob.contents] == [("application/octet-stream", "AAEC")]

    # linked, but the upstream has no such resource: its not-found, passed on
    gone = await refused(client, "fixture://notes/gone")
    assert gone.code == -32002 and "no resource fixture://notes/gone" in gone.message
    # the upstream has it, but no result linked it: never forwarded
    secret = await refused(client, "fixture://notes/secret")
    assert secret.code == -32002 and "was linked by a result on this surface" in secret.message
    assert (await upstream_reads(bridge))[reads:] == [
        "read fixture://notes/1",
        "read fixture://notes/2",
        "read fixture://notes/gone",
    ]

    # a caller of another surface (which blocks the upstream's tools) reads none of them
    async with http_client(url, era, NARROW) as narrow:
        assert (await refused(narrow, "fixture://notes/1")).code == -32002
    # REST reads the same way, behind the same rule
    async with httpx2.AsyncClient(base_url=url, timeout=10) as http:
        rest = await http.get(
            "/resources",
            params={"uri": "fixture://notes/1"},
            headers={"Authorization": f"Bearer {ALL}"},
        )
        assert rest.status_code == 200 and rest.json() == {
            "contents": [{"uri": "fixture://notes/1", "mimeType": "text/plain", "text": "note one"}]
        }
        other = await http.get(
            "/resources",
            params={"uri": "fixture://notes/1"},
            headers={"Authorization": f"Bearer {NARROW}"},
        )
        assert (
            other.status_code == 404 and other.json()["error"]["error_code"] == "resource_not_found"
        )
        missing = await http.get("/resources", headers={"Authorization": f"Bearer {ALL}"})
        assert missing.status_code == 400 and missing.json()["error"]["details"] == {
            "parameter": "uri"
        }
    assert len(await upstream_reads(bridge)) == reads + 4

    # the links kept are the last `kept`: older ones are no longer readable
    bridge.invoker.resource_links.kept = 2
    await client.call("fx__linked", {})  # three links: notes/1 is the oldest
    assert (await refused(client, "fixture://notes/1")).code == -32002
    assert (await client.read("fixture://notes/2")).contents[0].blob == "AAEC"


async def test_a_link_of_an_upstream_now_down_or_now_hidden_is_refused_clearly(
    served_legacy: tuple[str, Bridge],
) -> None:
    url, bridge = served_legacy
    async with http_client(url, HANDSHAKE, ALL) as client:
        await client.call("fx__linked", {})
        assert (await client.read("fixture://notes/1")).contents[0].text == "note one"

        # the surface now blocks the upstream's tools: its links are not read through it any more
        bridge.surfaces.update(parse_config(config("legacy", default_blocks=("fx__*",))).surfaces)
        assert (await refused(client, "fixture://notes/1")).code == -32002
        bridge.surfaces.update(parse_config(config("legacy")).surfaces)
        assert (await client.read("fixture://notes/1")).contents[0].text == "note one"

        # the upstream is down (its process exited; no reconnect before retry_initial=30 s)
        await bridge.invoker.invoke("fx__crash", {"code": 3, "message": "bye"})
        await until(lambda: bridge.catalog.slot("fx").health.state != "ready", timeout=10)
        down = await refused(client, "fixture://notes/1")
        assert down.code == types.INTERNAL_ERROR
        assert (
            down.error.data["error_class"] == "dependency_unavailable"
            and down.error.data["recoverability"] == "retry_later"
        )
        assert "exited with code 3" in down.message
        async with httpx2.AsyncClient(base_url=url, timeout=10) as http:
            rest = await http.get(
                "/resources",
                params={"uri": "fixture://notes/1"},
                headers={"Authorization": f"Bearer {ALL}"},
            )
            assert (
                rest.status_code == 503
                and rest.json()["error"]["error_class"] == "dependency_unavailable"
            )
            assert "retry-after" in rest.headers
