"""`bridge` with one more upstream kind, `local_echo`: an upstream inside the bridge's process
whose one tool, `echo`, answers at once with the text it was given, as bench/_mcp_echo_server.py
answers over HTTP. A call of it runs the bridge's frontend and pipeline and no upstream
connection, so bench/bench_mcp_proxy.py reads from it what the bridge's side facing its clients
costs, apart from the side facing its upstreams.

Run by bench/bench_mcp_proxy.py: `_local_echo.py serve -c CONFIG`, a config naming an upstream
of kind `local_echo`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _mcp_echo_server import ECHO as MCP_ECHO

from bridge.cli import main
from bridge.model import SafetyHints, UpstreamResult, UpstreamTool
from bridge.upstream import CallContext, Upstream, UpstreamConfig, register_kind

ECHO = UpstreamTool(  # the tool of bench/_mcp_echo_server.py
    native_id=MCP_ECHO.name,
    name=MCP_ECHO.name,
    description=MCP_ECHO.description or "",
    input_schema=MCP_ECHO.input_schema,
    safety=SafetyHints(read_only=True, open_world=False),
)


class LocalEchoConfig(UpstreamConfig):
    kind: str = "local_echo"


class LocalEcho(Upstream):
    """The `echo` tool, answered in the bridge's own process."""

    kind = "local_echo"
    config_model = LocalEchoConfig

    async def start(self) -> None:
        return None

    async def list_tools(self) -> list[UpstreamTool]:
        return [ECHO]

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        return UpstreamResult(content=[{"type": "text", "text": str(arguments.get("text", ""))}])

    async def close(self) -> None:
        return None


if __name__ == "__main__":
    register_kind("local_echo", LocalEcho)
    sys.exit(main(sys.argv[1:]))
