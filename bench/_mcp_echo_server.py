"""The MCP upstream of bench/bench_mcp_frontend.py: one `echo` tool over streamable HTTP on
127.0.0.1:<port> (first argument). Run by the bench as its own process."""

from __future__ import annotations

import sys
from typing import Any

import mcp.types as types
import uvicorn
from mcp.server.lowlevel import Server

ECHO = types.Tool(
    name="echo",
    description="Echo the given text.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
)


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ECHO])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("bench-echo", version="1", on_list_tools=list_tools, on_call_tool=call_tool)

if __name__ == "__main__":
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
