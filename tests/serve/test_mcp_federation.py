"""Resources, resource templates, prompts, completion and logging of MCP upstreams, federated by the
bridge's MCP frontend: two real SDK servers (`fx` over stdio, prefixed; `plain` over streamable
HTTP on 2026-07-28, `prefix: never`), the mcp SDK's clients in both eras. A surface that hides an
upstream hides its resources and prompts too, answered as missing ones."""

from __future__ import annotations

import asyncio
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
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import PromptsListChanged, ResourceUpdated

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.mcp import MCPFrontend
from tests.adapters.mcp_fixtures.features_server import build_server
from tests.serve.mcp_support import ERAS, HANDSHAKE, MODERN
from tests.servers import serve_asgi

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

FIXTURE = str(
    Path(__file__).resolve().parents[1] / "adapters" / "mcp_fixtures" / "features_server.py"
)
ALL, NARROW = "token-for-every-upstream", "token-for-plain-only"
FX = "bridge://upstream/fx/"


class Federation:
    def __init__(self, url: str, bridge: Bridge, plain: Any) -> None:
        self.url, self.bridge, self.plain = url, bridge, plain


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def fed() -> AsyncIterator[Federation]:
    plain_server, plain_state = build_server("plain")
    async with serve_asgi(plain_server.streamable_http_app()) as plain_url:
        config = {
            "store": {"path": ":memory:"},
            "server": {"tokens": [{"token": ALL}, {"token": NARROW, "surface": "narrow"}]},
            "surfaces": [{"name": "default"}, {"name": "narrow", "block": [{"upstream": "fx"}]}],
            "upstreams": [
                {
                    "name": "fx",
                    "kind": "mcp",
                    "command": "python",
                    "args": [FIXTURE, "fx"],
                    "protocol": "legacy",
                    "shutdown_timeout": 0.2,
                },
                {
                    "name": "plain",
                    "kind": "mcp",
                    "url": f"{plain_url}/mcp",
                    "protocol": MODERN,
                    "prefix": "never",
                },
            ],
        }
        bridge = Bridge(parse_config(config))
        await bridge.start()
        frontend = MCPFrontend(bridge, debounce=0.05)
        try:
            for name in ("fx", "plain"):
                health = bridge.catalog.slot(name).health
                assert health.state == "ready", health.reason
            async with serve_asgi(frontend.http_app([]), server=bridge.config.server) as url:
                yield Federation(url, bridge, plain_state)
        finally:
            await frontend.aclose()
            await bridge.close()


class Heard:
    """The notices a handshake-era client received."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.changed = asyncio.Event()

    async def message(self, message: Any) -> None:
        if isinstance(
            message,
            types.ServerNotification
            | types.ResourceUpdatedNotification
            | types.PromptListChangedNotification
            | types.ResourceListChangedNotification,
        ):
            self.messages.append(message)
            self.changed.set()

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.changed.set()

    async def until(self, predicate: Any, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


@contextlib.asynccontextmanager
async def handshake(
    url: str, token: str = ALL, **callbacks: Any
) -> AsyncIterator[tuple[ClientSession, Heard]]:
    heard = Heard()
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(10, read=30)
    ) as http:
        async with (
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(
                read, write, message_handler=heard.message, logging_callback=heard.log, **callbacks
            ) as session,
        ):
            await session.initialize()
            yield session, heard


@contextlib.asynccontextmanager
async def modern(url: str, token: str = ALL, **callbacks: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(10, read=30)
    ) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, mode=MODERN, cache=None, **callbacks) as client:
            yield client


class Either:
    """The requests the tests make, the same in both eras."""

    def __init__(self, target: ClientSession | Client) -> None:
        self.target = target

    async def resources(self) -> list[str]:
        return sorted(str(r.uri) for r in (await self.target.list_resources()).resources)

    async def templates(self) -> list[str]:
        return sorted(
            t.uri_template for t in (await self.target.list_resource_templates()).resource_templates
        )

    async def prompts(self) -> list[str]:
        return sorted(p.name for p in (await self.target.list_prompts()).prompts)

    async def read(self, uri: str) -> list[tuple[str, str]]:
        result = await self.target.read_resource(uri)
        return [
            (str(c.uri), c.text)
            for c in result.contents
            if isinstance(c, types.TextResourceContents)
        ]

    async def prompt(self, name: str, who: str) -> str:
        result = await self.target.get_prompt(name, {"name": who})
        content = result.messages[0].content
        assert isinstance(content, types.TextContent)
        return content.text

    async def complete(self, ref: Any, value: str) -> list[str]:
        result = await self.target.complete(ref, {"name": "id", "value": value})
        return result.completion.values


@contextlib.asynccontextmanager
async def either(url: str, era: str, token: str = ALL) -> AsyncIterator[Either]:
    if era == HANDSHAKE:
        async with handshake(url, token) as (session, _):
            yield Either(session)
    else:
        async with modern(url, token) as client:
            yield Either(client)


async def refused(request: Any) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await request
    return caught.value


@pytest.mark.parametrize("era", ERAS)
async def test_resources_and_templates_are_listed_under_their_upstreams_prefix(
    fed: Federation, era: str
) -> None:
    async with either(fed.url, era) as client:
        assert await client.resources() == [
            f"{FX}note://a",
            f"{FX}note://b",
            "note://a",
            "note://b",
        ]
        assert await client.templates() == [f"{FX}note://item/{{id}}", "note://item/{id}"]


@pytest.mark.parametrize("era", ERAS)
async def test_a_resource_is_read_from_the_upstream_its_uri_names(
    fed: Federation, era: str
) -> None:
    async with either(fed.url, era) as client:
        assert await client.read(f"{FX}note://a") == [(f"{FX}note://a", "fx note a")]
        assert await client.read("note://b") == [("note://b", "plain note b")]
        # a template's expansions, namespaced or not
        assert await client.read(f"{FX}note://item/7") == [(f"{FX}note://item/7", "fx item 7")]
        assert await client.read("note://item/9") == [("note://item/9", "plain item 9")]
        missing = await refused(client.read("note://nowhere"))
        assert missing.code == -32002
        gone = await refused(client.read(f"{FX}note://gone"))
        assert gone.code == -32002, gone.message


@pytest.mark.parametrize("era", ERAS)
async def test_a_surface_hiding_an_upstream_hides_its_resources_and_prompts(
    fed: Federation, era: str
) -> None:
    async with either(fed.url, era, NARROW) as client:
        assert await client.resources() == ["note://a", "note://b"]
        assert await client.templates() == ["note://item/{id}"]
        assert "fx__greet" not in await client.prompts()
        hidden = await refused(client.read(f"{FX}note://a"))
        assert hidden.code == -32002  # as for a resource that does not exist
        assert (await refused(client.prompt("fx__greet", "Ann"))).code == types.INVALID_PARAMS
        ref = types.PromptReference(type="ref/prompt", name="fx__greet")
        assert (await refused(client.complete(ref, "A"))).code == types.INVALID_PARAMS


@pytest.mark.parametrize("era", ERAS)
async def test_prompts_are_listed_and_got_from_their_upstream(fed: Federation, era: str) -> None:
    async with either(fed.url, era) as client:
        prompts = await client.prompts()
        assert {"fx__greet", "greet"} <= set(prompts)
        assert await client.prompt("fx__greet", "Ann") == "fx: hello Ann"
        assert await client.prompt("greet", "Bo") == "plain: hello Bo"
        assert (await refused(client.prompt("fx__nothing", "Ann"))).code == types.INVALID_PARAMS


@pytest.mark.parametrize("era", ERAS)
async def test_completion_goes_to_the_upstream_owning_the_prompt_or_template(
    fed: Federation, era: str
) -> None:
    async with either(fed.url, era) as client:
        prompt = types.PromptReference(type="ref/prompt", name="fx__greet")
        assert await client.complete(prompt, "A") == ["fx:greet:A1", "fx:greet:A2"]
        template = types.ResourceTemplateReference(type="ref/resource", uri="note://item/{id}")
        assert await client.complete(template, "4") == [
            "plain:note://item/{id}:41",
            "plain:note://item/{id}:42",
        ]
        namespaced = types.ResourceTemplateReference(
            type="ref/resource", uri=f"{FX}note://item/{{id}}"
        )
        assert await client.complete(namespaced, "5") == [
            "fx:note://item/{id}:51",
            "fx:note://item/{id}:52",
        ]


async def test_a_log_level_is_passed_on_and_log_messages_come_back(fed: Federation) -> None:
    async with handshake(fed.url) as (session, heard):
        await session.set_logging_level("warning")
        result = await session.call_tool("fx__log", {})
        assert not result.is_error, result.content
        await heard.until(lambda: len(heard.logs) >= 2)
        assert [(p.level, p.logger, p.data) for p in heard.logs] == [
            ("warning", "fx/talk", {"said": "warning"}),
            ("error", "fx/talk", {"said": "error"}),
        ]
        events = await session.call_tool("fx__events", {})
        assert "level warning" in json.loads(events.content[0].text)  # type: ignore[union-attr]


async def test_a_handshake_client_subscribed_to_a_resource_hears_of_its_updates(
    fed: Federation,
) -> None:
    uri = f"{FX}note://a"
    async with handshake(fed.url) as (session, heard):
        await session.subscribe_resource(uri)
        await session.call_tool("fx__touch", {"uri": "note://a"})
        await heard.until(
            lambda: any(isinstance(m, types.ResourceUpdatedNotification) for m in heard.messages)
        )
        updated = [m for m in heard.messages if isinstance(m, types.ResourceUpdatedNotification)]
        assert [str(m.params.uri) for m in updated] == [uri]
        await session.unsubscribe_resource(uri)
        events = json.loads((await session.call_tool("fx__events", {})).content[0].text)  # type: ignore[union-attr]
        assert events[-2:] == ["subscribe note://a", "unsubscribe note://a"]


async def test_a_handshake_client_hears_that_an_upstreams_prompts_changed(fed: Federation) -> None:
    async with handshake(fed.url) as (session, heard):
        assert "fx__hello2" not in {p.name for p in (await session.list_prompts()).prompts}
        await session.call_tool("fx__add_prompt", {"name": "hello2"})
        await heard.until(
            lambda: any(isinstance(m, types.PromptListChangedNotification) for m in heard.messages)
        )
        assert "fx__hello2" in {p.name for p in (await session.list_prompts()).prompts}


async def test_a_modern_listen_stream_hears_of_resource_updates_and_prompt_changes(
    fed: Federation,
) -> None:
    async with modern(fed.url) as client:
        async with client.listen(
            prompts_list_changed=True, resource_subscriptions=["note://b"]
        ) as events:
            # acknowledged once the upstream follows note://b on its own listen stream
            await client.call_tool("touch", {"uri": "note://b"})
            async with asyncio.timeout(10):
                stream = aiter(events)
                assert await anext(stream) == ResourceUpdated(uri="note://b")
                await client.call_tool("add_prompt", {"name": f"p{len(fed.plain.prompts)}"})
                assert await anext(stream) == PromptsListChanged()


async def elicited(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert params.message == "Who are you?"
    return types.ElicitResult(action="accept", content={"name": "Ann"})


async def sampled(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    text = params.messages[0].content.text  # type: ignore[union-attr]
    return types.CreateMessageResult(
        role="assistant",
        model="test-model",
        content=types.TextContent(type="text", text=f"{text}!"),
    )


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result.content
    return result.content[0].text  # type: ignore[union-attr]


async def test_an_upstreams_elicitation_and_sampling_reach_the_client_that_made_the_call(
    fed: Federation,
) -> None:
    async with handshake(fed.url, elicitation_callback=elicited, sampling_callback=sampled) as (
        session,
        _,
    ):
        assert json.loads(text(await session.call_tool("fx__ask", {}))) == {
            "action": "accept",
            "content": {"name": "Ann"},
        }
        assert text(await session.call_tool("fx__sample", {})) == "test-model: Say hi!"


async def test_a_client_that_cannot_answer_has_the_upstreams_request_refused_with_the_specs_error(
    fed: Federation,
) -> None:
    async with handshake(fed.url, elicitation_callback=elicited) as (session, _):  # no sampling
        assert (
            text(await session.call_tool("fx__sample", {})) == f"refused {types.METHOD_NOT_FOUND}"
        )
    async with handshake(fed.url) as (session, _):
        assert text(await session.call_tool("fx__ask", {})) == f"refused {types.INVALID_PARAMS}"
    async with modern(fed.url) as client:
        result = await client.call_tool("fx__ask", {})
        assert text(result) == f"refused {types.INVALID_PARAMS}"


ASKED = {"action": "accept", "content": {"name": "Ann"}}


@pytest.mark.parametrize("tool", ["fx__", ""])
async def test_a_modern_client_is_asked_through_input_required_results(
    fed: Federation, tool: str
) -> None:
    """A 2026-07-28 client gets the question as an input_required result and its retry resumes
    the call, whether the upstream asked on its session (fx) or in a result of its own (plain)."""
    async with modern(fed.url, elicitation_callback=elicited, sampling_callback=sampled) as client:
        assert json.loads(text(await client.call_tool(f"{tool}ask", {}))) == ASKED
        assert text(await client.call_tool(f"{tool}sample", {})) == "test-model: Say hi!"
        with pytest.raises(MCPError) as caught:  # a state no held call has
            await client.session.call_tool("ask", {}, request_state="made-up")
        assert caught.value.code == types.INVALID_PARAMS


async def test_an_upstreams_input_required_result_is_put_to_a_handshake_client(
    fed: Federation,
) -> None:
    async with handshake(fed.url, elicitation_callback=elicited, sampling_callback=sampled) as (
        session,
        _,
    ):
        assert json.loads(text(await session.call_tool("ask", {}))) == ASKED
        assert text(await session.call_tool("sample", {})) == "test-model: Say hi!"
    async with modern(fed.url) as client:  # nobody to answer: the call fails, saying so
        result = await client.call_tool("ask", {})
        assert result.is_error and "elicitation/create" in result.content[0].text  # type: ignore[union-attr]
