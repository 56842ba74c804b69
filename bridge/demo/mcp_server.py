"""The demo MCP server: a few small tools served with the mcp SDK's low-level `Server`.

    python -m bridge.demo.mcp_server              # stdio (what configs/demo.yaml runs)
    python -m bridge.demo.mcp_server --http 9001  # streamable HTTP at http://127.0.0.1:9001/mcp

Tools: `echo`, `add` (structured output), `text_stats` (structured output), `countdown`
(progress notifications, cancellable) and `utc_now`.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

__all__ = ["TOOLS", "build_server", "main"]

_READ_ONLY = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


TOOLS = [
    types.Tool(
        name="echo",
        title="Echo",
        description="Return the given text unchanged.",
        input_schema=_object(
            {"text": {"type": "string", "description": "text to return"}}, ["text"]
        ),
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="add",
        title="Add numbers",
        description="Add two numbers and return their sum.",
        input_schema=_object({"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
        output_schema=_object({"sum": {"type": "number"}}, ["sum"]),
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="text_stats",
        title="Text statistics",
        description="Count the characters, words and lines of a text.",
        input_schema=_object({"text": {"type": "string"}}, ["text"]),
        output_schema=_object(
            {
                "characters": {"type": "integer"},
                "words": {"type": "integer"},
                "lines": {"type": "integer"},
            },
            ["characters", "words", "lines"],
        ),
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="countdown",
        title="Countdown",
        description="Count down from `seconds` to zero, reporting progress every second.",
        input_schema=_object(
            {"seconds": {"type": "integer", "minimum": 1, "maximum": 60}}, ["seconds"]
        ),
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="utc_now",
        title="Current UTC time",
        description="The current date and time in UTC, RFC 3339.",
        input_schema=_object({}, []),
        annotations=types.ToolAnnotations(
            read_only_hint=True, idempotent_hint=False, open_world_hint=False
        ),
    ),
]
_BY_NAME = {tool.name: tool for tool in TOOLS}


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=text)]


def _structured(data: dict[str, Any]) -> types.CallToolResult:
    # structured content, plus its JSON as text for clients that read only text
    return types.CallToolResult(content=_text(json.dumps(data)), structured_content=data)


async def _list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name not in _BY_NAME:
        return types.CallToolResult(content=_text(f"unknown tool {params.name!r}"), is_error=True)
    try:
        if params.name == "echo":
            return types.CallToolResult(content=_text(str(args["text"])))
        if params.name == "add":
            return _structured({"sum": args["a"] + args["b"]})
        if params.name == "text_stats":
            text = str(args["text"])
            return _structured(
                {
                    "characters": len(text),
                    "words": len(re.findall(r"\S+", text)),
                    "lines": len(text.splitlines()),
                }
            )
        if params.name == "countdown":
            seconds = int(args["seconds"])
            for left in range(seconds, 0, -1):
                await ctx.session.report_progress(seconds - left, seconds, f"{left}s left")
                await anyio.sleep(1)
            await ctx.session.report_progress(seconds, seconds, "done")
            return types.CallToolResult(content=_text(f"counted down from {seconds}"))
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        return types.CallToolResult(content=_text(now))
    except (KeyError, TypeError, ValueError) as exc:
        return types.CallToolResult(
            content=_text(f"bad arguments for {params.name}: {exc}"), is_error=True
        )


def build_server() -> Server[Any]:
    return Server(
        "bridge-demo",
        version="1.0.0",
        instructions="Small demonstration tools.",
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )


async def _serve_stdio() -> None:
    server = build_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.demo.mcp_server", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--http",
        type=int,
        metavar="PORT",
        help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio",
    )
    parser.add_argument("--host", default="127.0.0.1")
    opts = parser.parse_args(argv)
    if opts.http is None:
        anyio.run(_serve_stdio)
        return
    import uvicorn

    app = build_server().streamable_http_app(streamable_http_path="/mcp", host=opts.host)
    uvicorn.run(app, host=opts.host, port=opts.http, log_level="warning")


if __name__ == "__main__":
    main()
