"""A configurable MCP server (low-level `Server` of the mcp SDK) for the MCP adapter tests.

Serves both protocol eras on one endpoint. Run as a script it speaks stdio; `build_server()`
gives the same server for hosting on uvicorn over streamable HTTP in the test process.

    python tests/adapters/mcp_fixtures/server.py [--filler N] [--page-size K]
        [--refuse-if PATH] [--freeze-on-start] [--bad-tools]

Some answers are shapes the SDK's server refuses to send (it checks its results): a middleware
adds them to what the handlers return (`BAD_TOOLS` on the first tools/list page, blocks of
`odd_blocks`), and over stdio `raw_answer` writes its own answer line to stdout.
"""

from __future__ import annotations

import gc
import os
import sys
import time


def _early_exit(argv: list[str]) -> None:
    """`--refuse-if PATH` and `--freeze-on-start` act before the SDK import (a second of CPU),
    so a server that cannot start costs the tests almost nothing."""
    if "--refuse-if" in argv:
        marker = argv[argv.index("--refuse-if") + 1]
        if os.path.exists(marker):
            sys.stderr.write(f"refusing to start: {marker} exists\n")
            sys.exit(2)
    if "--freeze-on-start" in argv:
        time.sleep(3600)


if __name__ == "__main__":
    _early_exit(sys.argv)
    # the SDK's modules load with the collector held, then are frozen (see `main`): its runs
    # during the import were a fifth of the import's CPU
    gc.disable()

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
import mcp.types as types  # noqa: E402
from mcp.server.lowlevel import NotificationOptions, Server  # noqa: E402
from mcp.server.stdio import stdio_server  # noqa: E402
from mcp.server.subscriptions import (  # noqa: E402
    InMemorySubscriptionBus,
    ListenHandler,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError  # noqa: E402

MODERN = "2026-07-28"
# 1x1 transparent PNG and a 44-byte empty WAV, base64.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="

OBJ = "object"
# tools/list entries the SDK's types reject (`--bad-tools`); `bad_required` only before 2026-07-28
BAD_TOOLS: list[Any] = [
    {"name": "not_an_object", "description": "A string root.", "inputSchema": {"type": "string"}},
    {"name": "schema_is_text", "inputSchema": "oops"},
    {"name": "bad_required", "inputSchema": {"type": OBJ, "required": [{"a": 1}]}},
    {"description": "No name at all.", "inputSchema": {"type": OBJ}},
    {"name": "", "description": "An empty name.", "inputSchema": {"type": OBJ}},
    {"name": "echo", "description": "A second tool named echo.", "inputSchema": {"type": OBJ}},
]
# the blocks the middleware adds to the result of `odd_blocks`: a type from the future, and a
# text block whose text is not a string
ODD_BLOCKS: list[Any] = [
    {"type": "hologram", "uri": "x://1", "_meta": {"k": 1}},
    {"type": "text", "text": 5},
]


# what the `ask` tool asks its client: a request of each kind a server may send a client
ASKS: dict[str, types.InputRequest] = {
    "sampling": types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[
                types.SamplingMessage(
                    role="user",
                    content=types.TextContent(type="text", text="Summarize the report."),
                )
            ],
            max_tokens=50,
        )
    ),
    "elicitation": types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message="Which account?",
            requested_schema={"type": "object", "properties": {"account": {"type": "string"}}},
        )
    ),
    "url_elicitation": types.ElicitRequest(
        params=types.ElicitRequestURLParams(
            message="Sign in first.", url="https://example.invalid/login", elicitation_id="e1"
        )
    ),
    "roots": types.ListRootsRequest(),
}


def _schema(
    props: dict[str, Any] | None = None, required: list[str] | None = None
) -> dict[str, Any]:
    return {"type": OBJ, "properties": props or {}, "required": required or []}


def base_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name="echo",
            title="Echo",
            description="Echo the given text.",
            input_schema=_schema({"text": {"type": "string"}}, ["text"]),
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
            icons=[
                types.Icon(
                    src="https://example.invalid/echo.png", mime_type="image/png", sizes=["48x48"]
                )
            ],
            _meta={"example.invalid/owner": "tests"},
        ),
        types.Tool(
            name="add",
            description="Add two numbers.",
            input_schema=_schema({"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
            output_schema=_schema({"sum": {"type": "number"}}, ["sum"]),
            annotations=types.ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=True
            ),
        ),
        types.Tool(name="plain", description="No annotations at all.", input_schema=_schema()),
        types.Tool(
            name="wipe",
            description="Declared destructive.",
            input_schema=_schema(),
            annotations=types.ToolAnnotations(destructive_hint=True),
        ),
        types.Tool(
            name="every_content",
            description="One block of each content type.",
            input_schema=_schema(),
        ),
        types.Tool(
            name="fail",
            description="Fails as a tool (isError) saying `text`; given a `code`, answers with "
            "that JSON-RPC error instead.",
            input_schema=_schema(
                {
                    "text": {"type": "string"},
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                }
            ),
        ),
        types.Tool(
            name="slow",
            description="Reports progress each step.",
            input_schema=_schema({"steps": {"type": "integer"}, "delay": {"type": "number"}}),
        ),
        types.Tool(
            name="hang", description="Never answers (until cancelled).", input_schema=_schema()
        ),
        types.Tool(
            name="freeze",
            description="Blocks the whole server for N seconds.",
            input_schema=_schema({"seconds": {"type": "number"}}),
        ),
        types.Tool(
            name="crash",
            description="Writes to stderr and exits with the code.",
            input_schema=_schema({"code": {"type": "integer"}, "message": {"type": "string"}}),
        ),
        types.Tool(name="events", description="What the server saw.", input_schema=_schema()),
        types.Tool(
            name="ask",
            description="Asks the client for sampling, elicitation (form or url) or roots; says how the client answered.",
            input_schema=_schema({"what": {"type": "string", "enum": list(ASKS)}}, ["what"]),
        ),
        types.Tool(
            name="log",
            description="Sends a log message (notifications/message) at each level given.",
            input_schema=_schema(
                {
                    "levels": {"type": "array", "items": {"type": "string"}},
                    "text": {"type": "string"},
                }
            ),
        ),
        types.Tool(
            name="set_extra",
            description="Replace the extra tools; optionally announce the change.",
            input_schema=_schema(
                {
                    "names": {"type": "array", "items": {"type": "string"}},
                    "notify": {"type": "boolean"},
                }
            ),
        ),
        types.Tool(
            name="task_only",
            description="Only runs as a task.",
            input_schema=_schema(),
            execution=types.ToolExecution(task_support="required"),
        ),
        types.Tool(
            name="odd_blocks",
            description="Content blocks the SDK does not know.",
            input_schema=_schema(),
        ),
        types.Tool(
            name="storm",
            description="Announces a tool list change every `every` seconds for `seconds`.",
            input_schema=_schema({"seconds": {"type": "number"}, "every": {"type": "number"}}),
        ),
        types.Tool(
            name="linked",
            description="Links resources the server serves (resources/read).",
            input_schema=_schema(),
        ),
        types.Tool(
            name="raw_answer",
            description="stdio: writes its own answer line (surrogate, deep, very_deep, shape, "
            "no_result, big, big_id_last) and waits.",
            input_schema=_schema({"kind": {"type": "string"}, "size": {"type": "integer"}}),
        ),
    ]


@dataclass
class FixtureState:
    filler: int = 0
    page_size: int = 0
    events: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    bad_tools: list[Any] = field(default_factory=list)  # added to the first tools/list page
    wire: Any = None  # over stdio: the stream the server writes its messages on
    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    # when set, a tool `route` whose argument of this name travels in an Mcp-Param header
    # (2026-07-28 HTTP); tests change it without a notice, as a server redeployed in place
    header_on: str | None = None

    def tools(self) -> list[types.Tool]:
        tools = base_tools()
        if self.header_on:
            props: dict[str, Any] = {"region": {"type": "string"}, "zone": {"type": "string"}}
            props[self.header_on] = {
                **props[self.header_on],
                "x-mcp-header": self.header_on.title(),
            }
            tools.append(
                types.Tool(
                    name="route",
                    description="Route by region and zone.",
                    input_schema=_schema(props),
                )
            )
        tools += [
            types.Tool(name=n, description=f"Extra tool {n}.", input_schema=_schema())
            for n in self.extra
        ]
        tools += [
            types.Tool(
                name=f"filler_{i:03d}", description=f"Filler tool {i}.", input_schema=_schema()
            )
            for i in range(self.filler)
        ]
        return tools


# what resources/read serves: `linked` links the first two, never the last
RESOURCES: dict[str, types.TextResourceContents | types.BlobResourceContents] = {
    "fixture://notes/1": types.TextResourceContents(
        uri="fixture://notes/1", mime_type="text/plain", text="note one"
    ),
    "fixture://notes/2": types.BlobResourceContents(
        uri="fixture://notes/2", mime_type="application/octet-stream", blob="AAEC"
    ),
    "fixture://notes/secret": types.TextResourceContents(
        uri="fixture://notes/secret", mime_type="text/plain", text="never linked"
    ),
}


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=text)]


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(depth):
        value = {"a": value}
    return value


def _raw_answer(ctx: Any, kind: str, size: int) -> str:
    """One answer line for the request being handled, in a shape the SDK would never write."""
    request_id = json.dumps(ctx.request_id)
    modern = ', "resultType": "complete"' if ctx.protocol_version == MODERN else ""
    if kind in ("big", "big_id_last"):
        content = '{"content": [{"type": "text", "text": "' + "x" * size + '"}]' + modern + "}"
        if kind == "big":
            return f'{{"jsonrpc": "2.0", "id": {request_id}, "result": {content}}}'
        return f'{{"jsonrpc": "2.0", "result": {content}, "id": {request_id}}}'
    if kind == "no_result":  # an answer naming its request, with neither a result nor an error
        return f'{{"jsonrpc": "2.0", "id": {request_id}}}'
    if kind == "very_deep":  # deeper than Python's own json module can parse
        return f'{{"jsonrpc": "2.0", "id": {request_id}, "result": {{"structuredContent": {"[" * 5000}{"]" * 5000}}}}}'
    result: Any = {"content": [{"type": "text", "text": "x\ud800y"}]}  # a lone surrogate
    if kind == "deep":
        result = {"content": [], "structuredContent": _nested(400)}
    elif kind == "shape":
        result = ["not", "an", "object"]
    if isinstance(result, dict) and modern:
        result["resultType"] = "complete"
    return json.dumps({"jsonrpc": "2.0", "id": ctx.request_id, "result": result})


def _odd_shapes(state: FixtureState) -> Any:
    """Middleware adding what the SDK's server would refuse to send (it checks handler results,
    not what a middleware returns)."""

    async def middleware(ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        params = ctx.params or {}
        if ctx.method == "tools/list" and state.bad_tools and not params.get("cursor"):
            result = {**result, "tools": [*result["tools"], *state.bad_tools]}
        elif ctx.method == "tools/call" and params.get("name") == "odd_blocks":
            result = {**result, "content": [*result["content"], *ODD_BLOCKS]}
        return result

    return middleware


def build_server(filler: int = 0, page_size: int = 0) -> tuple[Server[Any], FixtureState]:
    state = FixtureState(filler=filler, page_size=page_size)

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = state.tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        if not state.page_size:
            return types.ListToolsResult(tools=tools)
        end = start + state.page_size
        state.events.append(f"list {start}")
        return types.ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        name = params.name
        state.events.append(f"call {name} {ctx.protocol_version}")
        headers = getattr(ctx.request, "headers", None)  # over HTTP
        traced = (
            (ctx.meta or {}).get("traceparent"),
            headers.get("traceparent") if headers is not None else None,
        )
        if any(traced):  # the W3C trace context the call came with: in _meta, and as a header
            state.events.append(f"traceparent {traced[0]} {traced[1]}")
        if name in ("echo", "plain", "wipe") or name in state.extra or name.startswith("filler_"):
            return types.CallToolResult(content=_text(str(args.get("text", name))))
        if name == "add":
            total = args["a"] + args["b"]
            return types.CallToolResult(
                content=_text(json.dumps({"sum": total})), structured_content={"sum": total}
            )
        if name == "every_content":
            return types.CallToolResult(
                content=[
                    types.TextContent(
                        type="text", text="hello", _meta={"example.invalid/block": 1}
                    ),
                    types.ImageContent(type="image", data=PNG, mime_type="image/png"),
                    types.AudioContent(type="audio", data=WAV, mime_type="audio/wav"),
                    types.ResourceLink(
                        type="resource_link",
                        uri="file:///tmp/report.txt",
                        name="report",
                        mime_type="text/plain",
                    ),
                    types.EmbeddedResource(
                        type="resource",
                        resource=types.TextResourceContents(
                            uri="memo://one", mime_type="text/plain", text="embedded text"
                        ),
                    ),
                    types.EmbeddedResource(
                        type="resource",
                        resource=types.BlobResourceContents(
                            uri="memo://two", mime_type="application/octet-stream", blob="AAEC"
                        ),
                    ),
                ],
                structured_content={"blocks": 6},
                _meta={"example.invalid/trace": "abc"},
            )
        if name == "linked":
            return types.CallToolResult(
                content=[
                    types.ResourceLink(
                        type="resource_link",
                        uri="fixture://notes/1",
                        name="note 1",
                        mime_type="text/plain",
                    ),
                    types.EmbeddedResource(
                        type="resource", resource=RESOURCES["fixture://notes/2"]
                    ),
                    types.ResourceLink(
                        type="resource_link", uri="fixture://notes/gone", name="a link to nothing"
                    ),
                ]
            )
        if name == "fail":
            if "code" in args:
                raise MCPError(int(args["code"]), str(args.get("message", "failed")))
            said = str(args.get("text", "the input was not acceptable"))
            return types.CallToolResult(content=_text(said), is_error=True)
        if name == "slow":
            steps, delay = int(args.get("steps", 3)), float(args.get("delay", 0.01))
            try:
                for i in range(steps):
                    await ctx.session.report_progress(i + 1, steps, f"step {i + 1} of {steps}")
                    await anyio.sleep(delay)
            except anyio.get_cancelled_exc_class():
                state.events.append(f"cancelled slow {ctx.protocol_version}")
                raise
            return types.CallToolResult(content=_text(f"done {steps}"))
        if name == "hang":
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                state.events.append(f"cancelled hang {ctx.protocol_version}")
                raise
        if name == "freeze":
            time.sleep(float(args.get("seconds", 5)))  # blocks the event loop: a hung server
            return types.CallToolResult(content=_text("thawed"))
        if name == "crash":
            sys.stderr.write(str(args.get("message", "crashing")) + "\n")
            sys.stderr.flush()
            os._exit(int(args.get("code", 3)))
        if name == "events":
            return types.CallToolResult(content=_text(json.dumps(state.events)))
        if name == "ask":
            request = ASKS[str(args.get("what"))]
            declared = ctx.session.client_capabilities
            state.events.append(
                f"ask {args.get('what')}: client declares {sorted(declared.model_dump(exclude_none=True) if declared else {})}"
            )
            if (
                ctx.protocol_version == MODERN
            ):  # no requests to the client: the result asks for input
                return types.InputRequiredResult(
                    input_requests={"q": request}, request_state="asked"
                )
            try:
                answer = await ctx.session.send_request(
                    request, types.EmptyResult, request_read_timeout_seconds=5
                )
            except MCPError as exc:
                return types.CallToolResult(content=_text(f"refused: {exc.code} {exc.message}"))
            return types.CallToolResult(content=_text(f"answered: {answer.model_dump_json()}"))
        if name == "log":
            for level in args.get("levels") or ["info"]:
                data = {"text": args.get("text", "a line"), "level": level}
                with warnings.catch_warnings(
                    category=MCPDeprecationWarning, action="ignore"
                ):  # deprecated in 2026-07-28 only
                    await ctx.session.send_log_message(
                        level, data, logger="fixture", related_request_id=ctx.request_id
                    )
            return types.CallToolResult(content=_text("logged"))
        if name == "route":
            return types.CallToolResult(content=_text(f"{args.get('region')}/{args.get('zone')}"))
        if name == "odd_blocks":
            return types.CallToolResult(
                content=_text("order 42 created"), structured_content={"order": 42}
            )
        if name == "storm":
            seconds, every = float(args.get("seconds", 2)), float(args.get("every", 0.005))
            sent, deadline = 0, time.monotonic() + seconds
            while time.monotonic() < deadline:
                if ctx.protocol_version == MODERN:
                    await state.bus.publish(ToolsListChanged())
                else:
                    await ctx.session.send_tool_list_changed()
                sent += 1
                await anyio.sleep(every)
            return types.CallToolResult(content=_text(str(sent)))
        if name == "raw_answer":
            if state.wire is None:
                return types.CallToolResult(
                    content=_text("raw_answer works over stdio only"), is_error=True
                )
            await state.wire.write(
                _raw_answer(ctx, str(args.get("kind")), int(args.get("size", 0))) + "\n"
            )
            await state.wire.flush()
            await anyio.sleep_forever()  # that line was the answer; wait to be cancelled
        if name == "set_extra":
            state.extra = list(args.get("names") or [])
            if args.get("notify"):
                if ctx.protocol_version == MODERN:
                    await state.bus.publish(ToolsListChanged())
                else:
                    await ctx.session.send_tool_list_changed()
            return types.CallToolResult(content=_text("ok"))
        return types.CallToolResult(content=_text(f"unknown tool {name}"), is_error=True)

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        state.events.append(f"read {uri}")
        if uri not in RESOURCES:
            raise MCPError(-32002, f"no resource {uri}")
        return types.ReadResourceResult(contents=[RESOURCES[uri]])

    server: Server[Any] = Server(
        "fixture",
        version="1.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_read_resource=read_resource,
        on_subscriptions_listen=ListenHandler(state.bus),
    )
    server.middleware.append(_odd_shapes(state))
    return server, state


async def _serve_stdio(server: Server[Any], state: FixtureState) -> None:
    # the wire passed in (so not diverted from fd 1), for `raw_answer` to write on it too
    state.wire = anyio.wrap_file(io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8"))
    async with stdio_server(stdout=state.wire) as (read, write):
        await server.run(
            read,
            write,
            server.create_initialization_options(NotificationOptions(tools_changed=True)),
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--filler", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--refuse-if", default=None, help="exit 2 at start while this file exists")
    parser.add_argument("--freeze-on-start", action="store_true")
    parser.add_argument("--bad-tools", action="store_true", help="list BAD_TOOLS too")
    opts = parser.parse_args()
    server, state = build_server(opts.filler, opts.page_size)
    if opts.bad_tools:
        state.bad_tools = list(BAD_TOOLS)
    anyio.run(_serve_stdio, server, state)


if __name__ == "__main__":
    gc.freeze()
    gc.enable()
    main()
