"""An MCP stdio server on the standard library alone, for tests that start many: it starts in a
few milliseconds (the SDK's import costs a second of CPU). It answers `initialize`, `ping` and
`tools/call`, and lists one `echo` tool. `--linger N` keeps it running N seconds after its stdin
closes, as a server with work still under way does (a Node server with a timer pending).
`--cursors same` gives every tools/list page the same `nextCursor`, `--cursors endless` a new one.
`--hold FIFO` reads nothing until a writer has opened and closed the named pipe FIFO: a server
slow to start, for as long as the test wants. `--hang` lists a second tool, `hang`, whose calls
are never answered (the server reads on): a call still running when the test wants one.
`--slow` lists a third tool, `slow`, whose calls are answered after `seconds` (an argument), each on
a thread of its own so that calls overlap: calls in flight for as long as the test wants.
`--log FILE` appends the `text` argument of each call, a line each, as the call is answered: what
reached this server and was answered.

    python tests/adapters/mcp_fixtures/tiny_server.py [--linger N] [--cursors same|endless] [--hold FIFO] [--hang] [--slow] [--log FILE]
"""

from __future__ import annotations

import json
import sys
import threading
import time

ECHO = {
    "name": "echo",
    "description": "Echo the given text.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
}
HANG = {
    "name": "hang",
    "description": "Never answer.",
    "inputSchema": {"type": "object", "properties": {}},
}
SLOW = {
    "name": "slow",
    "description": "Answer after a while.",
    "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
}
WRITING = threading.Lock()


def answer(message: dict) -> dict:
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny", "version": "1"},
        }
    if method == "tools/list":
        if "--cursors" not in sys.argv:
            return {
                "tools": [
                    ECHO,
                    *([HANG] if "--hang" in sys.argv else []),
                    *([SLOW] if "--slow" in sys.argv else []),
                ]
            }
        page = int(params.get("cursor") or "0")
        cursor = "1" if sys.argv[sys.argv.index("--cursors") + 1] == "same" else str(page + 1)
        return {"tools": [{**ECHO, "name": f"echo_{page}"}], "nextCursor": cursor}
    if method == "tools/call":
        return {
            "content": [
                {"type": "text", "text": str((params.get("arguments") or {}).get("text", ""))}
            ]
        }
    return {}


def reply(message: dict) -> None:
    with WRITING:
        if "--log" in sys.argv and message.get("method") == "tools/call":
            with open(sys.argv[sys.argv.index("--log") + 1], "a") as log:
                log.write(
                    str(((message.get("params") or {}).get("arguments") or {}).get("text", ""))
                    + "\n"
                )
        sys.stdout.write(
            json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}) + "\n"
        )
        sys.stdout.flush()


def main() -> None:
    if "--hold" in sys.argv:
        with open(sys.argv[sys.argv.index("--hold") + 1]) as held:  # blocks until a writer opens it
            held.read()
    for line in sys.stdin:
        message = json.loads(line)
        called = (
            (message.get("params") or {}).get("name")
            if message.get("method") == "tools/call"
            else None
        )
        if called == "slow":
            seconds = float(
                ((message.get("params") or {}).get("arguments") or {}).get("seconds", 0.1)
            )
            threading.Timer(seconds, reply, (message,)).start()
        elif "id" in message and "method" in message and called != "hang":
            reply(message)
    if "--linger" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--linger") + 1]))


if __name__ == "__main__":
    main()
