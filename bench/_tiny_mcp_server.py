"""The MCP upstreams of bench/bench_many_upstreams.py: a stdio server on the standard library
alone (no SDK import, so hundreds start in seconds) listing 10 tools of vendor N (first argument).
Run by the bridge as a `kind: mcp` upstream."""

from __future__ import annotations

import json
import sys

VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "export",
    "sync",
    "archive",
    "restore",
]


def tools(vendor: str) -> list[dict]:
    return [
        {
            "name": f"{verb}_item_{vendor}",
            "description": f"{verb.title()} an item of vendor {vendor}.",
            "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
        }
        for verb in VERBS
    ]


def main() -> None:
    listed = tools(sys.argv[1] if len(sys.argv) > 1 else "0")
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tiny", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": listed}
        elif method == "tools/call":
            result = {
                "content": [{"type": "text", "text": json.dumps(params.get("arguments") or {})}]
            }
        else:
            result = {}
        sys.stdout.write(
            json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
