"""An MCP server (the SDK's low-level `Server`) with resources, a resource template, prompts,
completion, logging and resource subscriptions, in both protocol eras, for the tests of what
the bridge federates besides tools. Run as a script it speaks stdio; `build_server()` gives
the same server for hosting on uvicorn over streamable HTTP in the test process.

Its tools change what it serves and send the notices about it: `touch` (a resource updated,
to subscribers), `add_prompt` (prompts list changed), `log` (log messages at each level), and
`events` answers what it was asked so far (subscriptions, logging levels).
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourceUpdated,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

MODERN = "2026-07-28"
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass
class FeaturesState:
    label: str
    prompts: list[str] = field(default_factory=lambda: ["greet"])
    subscribed: set[str] = field(default_factory=set)
    level: str = "info"
    events: list[str] = field(default_factory=list)
    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=text)]


def _schema(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def build_server(label: str = "fx") -> tuple[Server[Any], FeaturesState]:
    state = FeaturesState(label)
    notes = {"note://a": f"{label} note a", "note://b": f"{label} note b"}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name="touch", input_schema=_schema(uri={"type": "string"})),
                types.Tool(name="add_prompt", input_schema=_schema(name={"type": "string"})),
                types.Tool(name="log", input_schema=_schema()),
                types.Tool(name="events", input_schema=_schema()),
                types.Tool(name="ask", input_schema=_schema()),
                types.Tool(name="sample", input_schema=_schema()),
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        modern = ctx.protocol_version == MODERN
        if params.name == "touch":
            uri = str(args["uri"])
            if modern:
                await state.bus.publish(ResourceUpdated(uri=uri))
            elif uri in state.subscribed:
                await ctx.session.send_resource_updated(uri)
            return types.CallToolResult(content=_text("touched"))
        if params.name == "add_prompt":
            state.prompts.append(str(args["name"]))
            if modern:
                await state.bus.publish(PromptsListChanged())
            else:
                await ctx.session.send_prompt_list_changed()
            return types.CallToolResult(content=_text("added"))
        if params.name == "log":
            for level in LEVELS[:5]:
                if LEVELS.index(level) >= LEVELS.index(state.level):
                    await ctx.session.send_log_message(level, {"said": level}, "talk")
            return types.CallToolResult(content=_text("logged"))
        if params.name in ("ask", "sample") and modern:
            return _ask_modern(params)
        if params.name in ("ask", "sample"):
            return types.CallToolResult(content=_text(await _ask(ctx, params.name)))
        if params.name == "events":
            return types.CallToolResult(content=_text(json.dumps(state.events)))
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name}")

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=uri.rsplit("/", 1)[-1], mime_type="text/plain")
                for uri in notes
            ]
        )

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template="note://item/{id}", name="item", mime_type="text/plain"
                )
            ]
        )

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri in notes:
            text = notes[uri]
        elif uri.startswith("note://item/"):
            text = f"{label} item {uri.removeprefix('note://item/')}"
        else:
            raise MCPError(-32002, f"no resource {uri}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)]
        )

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        state.subscribed.add(str(params.uri))
        state.events.append(f"subscribe {params.uri}")
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        state.subscribed.discard(str(params.uri))
        state.events.append(f"unsubscribe {params.uri}")
        return types.EmptyResult()

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=name,
                    description=f"{label} says hello",
                    arguments=[types.PromptArgument(name="name", required=True)],
                )
                for name in state.prompts
            ]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name not in state.prompts:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name}")
        who = (params.arguments or {}).get("name", "nobody")
        message = types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=f"{label}: hello {who}")
        )
        return types.GetPromptResult(description=params.name, messages=[message])

    async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        owner = ref.name if isinstance(ref, types.PromptReference) else ref.uri
        values = [f"{label}:{owner}:{params.argument.value}{tail}" for tail in ("1", "2")]
        return types.CompleteResult(
            completion=types.Completion(values=values, total=2, has_more=False)
        )

    async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        state.level = str(params.level)
        state.events.append(f"level {params.level}")
        return types.EmptyResult()

    with warnings.catch_warnings():  # logging is served to handshake-era clients
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            f"features-{label}",
            version="1.0",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe,
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,
            on_completion=complete,
            on_set_logging_level=set_level,
            on_subscriptions_listen=ListenHandler(state.bus),
        )
    return server, state


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
SAY_HI = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="Say hi"))


def _said(answer: Any) -> str:
    if isinstance(answer, types.ElicitResult):
        return json.dumps({"action": answer.action, "content": answer.content})
    content = answer.content
    return f"{answer.model}: {content.text if isinstance(content, types.TextContent) else content}"


def _ask_modern(params: types.CallToolRequestParams) -> Any:
    """The same questions in the 2026-07-28 way: an input_required result, answered on retry."""
    answer = (params.input_responses or {}).get("q")
    if answer is not None and params.request_state == "asked":
        return types.CallToolResult(content=_text(_said(answer)))
    question: Any
    if params.name == "ask":
        form = types.ElicitRequestFormParams(message="Who are you?", requested_schema=SCHEMA)
        question = types.ElicitRequest(params=form)
    else:
        sampling = types.CreateMessageRequestParams(messages=[SAY_HI], max_tokens=10)
        question = types.CreateMessageRequest(params=sampling)
    return types.InputRequiredResult(input_requests={"q": question}, request_state="asked")


async def _ask(ctx: Any, what: str) -> str:
    """Put an elicitation or a sampling request to the client during the call; its answer, or
    `refused <code>`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            if what == "ask":
                answer = await ctx.session.elicit_form(
                    "Who are you?", SCHEMA, related_request_id=ctx.request_id
                )
                return _said(answer)
            sampled = await ctx.session.create_message(
                [SAY_HI], max_tokens=10, related_request_id=ctx.request_id
            )
            return _said(sampled)
    except MCPError as exc:
        return f"refused {exc.code}"


OPTIONS = NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(OPTIONS))


if __name__ == "__main__":
    anyio.run(_serve_stdio, build_server(sys.argv[1] if len(sys.argv) > 1 else "fx")[0])
