"""What the benches that run processes share: a child process ended when its bench is done, an
ASGI app served as the bridge serves (for the floors the benches set beside it), a percentile of
measured values, and a plain-text table."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@contextlib.asynccontextmanager
async def process(
    *argv: str, grace: float = 10.0, stderr: int = asyncio.subprocess.DEVNULL
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`argv` run from the repository's root, with it on PYTHONPATH and no output kept but its
    `stderr` if asked (PIPE); ended with SIGTERM on the way out, and killed if it has not
    exited within `grace` seconds."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(ROOT),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(grace):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def serve_as_bridge(app: Any, port: int, ready: str | None = None) -> None:
    """Serve the ASGI `app` on 127.0.0.1:`port` on the bridge's HTTP stack (uvicorn with the
    bridge's corked httptools protocol, under the running loop: uvloop for a caller that runs
    under it), until the process is stopped; print `ready` once it accepts connections."""
    import uvicorn

    from bridge.serve.http_protocol import CorkedHttpToolsProtocol

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=CorkedHttpToolsProtocol,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    if ready is not None:
        while not server.started and not task.done():
            await asyncio.wait([task], timeout=0.05)
        print(ready, flush=True)
    await task


def pct(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def table(rows: list[list[str]], header: list[str]) -> str:
    """`rows` under `header`, each column as wide as its widest cell."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    out = [
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)),
        "  ".join("-" * w for w in widths),
    ]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)) for r in rows]
    return "\n".join(out)
