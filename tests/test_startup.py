"""`bridge serve` loads at start only what every configuration needs: the Redis client, PyJWT,
aiohttp and the OpenTelemetry SDK load with the first use of what needs them (`redis`,
`server.oauth`, a token exchange, an OTLP audit, an HTTP upstream, an OTLP endpoint of traces),
since each start of the bridge pays for them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# loaded on demand only; each costs a quarter to half a second of CPU per start
ON_DEMAND = (
    "redis",
    "jwt",
    "cryptography.hazmat.primitives.asymmetric.rsa",
    "aiohttp",
    "opentelemetry.sdk",
)


def test_serve_loads_no_library_of_an_unconfigured_feature() -> None:
    # loaded, then serving a stdio MCP server and calling its tool: it needs no HTTP client
    script = (
        "import asyncio, json, sys\n"
        "import bridge.cli, bridge.serve.app\n"
        f"loaded = lambda: [m for m in {ON_DEMAND!r} if m in sys.modules]\n"
        "print(json.dumps(loaded()))\n"
        "from bridge.config import parse_config\n"
        "from bridge.runtime import Bridge\n"
        "from tests.servers import TINY_MCP_SERVER\n"
        "async def main():\n"
        "    tiny = {'name': 'tiny', 'kind': 'mcp', 'command': sys.executable,\n"
        "            'args': [str(TINY_MCP_SERVER)]}\n"
        "    config = parse_config({'store': {'path': ':memory:'}, 'upstreams': [tiny]})\n"
        "    async with Bridge(config) as running:\n"
        "        bridge.serve.app.build_app(running)\n"
        "        await running.wait_started()\n"
        "        result = await running.invoker.invoke('tiny__echo', {'text': 'hi'})\n"
        "        assert not result.is_error, result\n"
        "asyncio.run(main())\n"
        "print(json.dumps(loaded()))\n"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [[], []]
