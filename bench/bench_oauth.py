"""Added latency of an OAuth access token (a JWT checked against the issuer's keys, held after
the first request) over a static bearer token, on REST `POST /invoke`, in one run: a bridge
over an in-memory upstream served on loopback, an issuer's metadata and JWKS on a second
loopback server, and requests alternating the two tokens one at a time (client and server in
one process: the difference of the medians is what the check costs). Prints p50 and p90 in ms."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.config import parse_config  # noqa: E402
from bridge.runtime import Bridge  # noqa: E402
from bridge.serve.app import build_app, close_app  # noqa: E402
from tests.fakes import FakeUpstream, tool  # noqa: E402
from tests.identity.test_resource_server import STATIC, OwnIssuer, bridge_config  # noqa: E402
from tests.servers import serve_asgi  # noqa: E402

REQUESTS = 2000


async def main() -> None:
    issuer = OwnIssuer()
    bridge = Bridge(
        parse_config(bridge_config(issuer.url)),
        extra_upstreams=[FakeUpstream(name="svc", tools=[tool("read", read_only=True)])],
    )
    await bridge.start()
    app = build_app(bridge)
    token = issuer.sign()
    body = {"tool": "svc__read", "arguments": {"text": "x"}}
    times: dict[str, list[float]] = {"static": [], "jwt": []}
    try:
        async with serve_asgi(app) as base, aiohttp.ClientSession(base_url=base) as http:
            for i in range(REQUESTS * 2 + 200):
                kind = "static" if i % 2 else "jwt"
                headers = {"Authorization": f"Bearer {STATIC if kind == 'static' else token}"}
                began = time.perf_counter()
                async with http.post("/invoke", json=body, headers=headers) as response:
                    await response.read()
                    assert response.status == 200, response.status
                if i >= 200:  # after a warm-up (the key set fetched once)
                    times[kind].append((time.perf_counter() - began) * 1000)
    finally:
        await close_app(app)
        await bridge.close()
        issuer.server.shutdown()
    print(
        f"{'token':<8}{'p50 ms':>9}{'p90 ms':>9}   ({REQUESTS} requests each, REST /invoke, one at a time)"
    )
    for kind, values in times.items():
        print(
            f"{kind:<8}{statistics.median(values):>9.3f}{statistics.quantiles(values, n=10)[-1]:>9.3f}"
        )
    added = statistics.median(times["jwt"]) - statistics.median(times["static"])
    print(f"a JWT adds {added * 1000:.0f} µs at the median (RS256, cached keys)")


if __name__ == "__main__":
    asyncio.run(main())
