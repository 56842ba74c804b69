"""An MCP server over stdio that lists the function declarations of a JSON-lines file (name,
description, parameters) as its tools, for bench/search_quality.py's `--public` mode; a call
answers that the tool is a listing only. Run by the bridge as a `kind: mcp` upstream:
`python bench/_catalog_mcp_server.py SHARD.jsonl`."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server


def load(path: str) -> list[types.Tool]:
    tools = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                schema = row.get("parameters") or {}
                tools.append(
                    types.Tool(
                        name=row["name"],
                        description=row.get("description") or "",
                        input_schema={**schema, "type": "object"},
                    )
                )
    return tools


TOOLS = load(sys.argv[1]) if __name__ == "__main__" else []


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="listing only")], is_error=True
    )


async def serve() -> None:
    server = Server("bench-catalog", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


if __name__ == "__main__":
    anyio.run(serve)
