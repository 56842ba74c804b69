"""An OTLP/HTTP collector that takes everything and keeps nothing, for benchmarks: answers every
`POST /v1/traces` and `POST /v1/logs` with an empty success, after reading the body.

Run as its own process: `_otlp_sink.py PORT`; prints a line starting with `otlp sink listening`
when it accepts connections."""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web


async def take(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=b"", content_type="application/x-protobuf")


async def main(port: int) -> None:
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/traces", take)
    app.router.add_post("/v1/logs", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"otlp sink listening on http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
