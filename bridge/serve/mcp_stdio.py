"""`bridge serve --stdio`: one surface served over MCP on stdin and stdout, for desktop clients."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

from mcp.server.stdio import stdio_server

from bridge.config import BridgeConfig
from bridge.runtime import Bridge, reload_on_hangup, settle_gc
from bridge.serve.mcp import MCPFrontend
from bridge.telemetry import say

__all__ = ["run_stdio"]

log = logging.getLogger("bridge.serve.mcp")


async def _start_then_settle(bridge: Bridge) -> None:
    await bridge.start(wait=True)
    settle_gc(collected=True)  # bridge.start(wait=True) ended with a full collection
    if not_ready := [
        s.name for s in bridge.catalog.slots.values() if s.health.state not in ("ready", "disabled")
    ]:
        log.info("upstreams started; not ready: %s", ", ".join(not_ready))


async def run_stdio(config: BridgeConfig, surface: str | None = None) -> int:
    """`bridge serve --stdio`: serve one surface over MCP on stdin/stdout until stdin closes.
    Stdout carries protocol only (while serving, the SDK points fd 1 at stderr for everything
    else, child processes included); logs go to stderr."""
    name = surface or config.server.default_surface
    known = {s.name for s in config.surfaces} | {"default"}
    if name not in known:
        say(
            f"bridge serve --stdio: no surface named {name!r} "
            f"(the config defines: {', '.join(sorted(known))})",
            logging.ERROR,
        )
        return 2
    # SIGTERM (what supervisors and clients send) or SIGINT: the bridge closes (its launched
    # processes and ATIP commands stopped), then the process ends; the SDK's thread reading stdin
    # would otherwise hold it until stdin closes
    loop = asyncio.get_running_loop()
    serving = asyncio.current_task()
    signalled: list[int] = []
    closing = False

    def on_signal(sig: int) -> None:
        # A signal while the bridge already closes lets the close finish: clients close stdin,
        # then send SIGTERM (the mcp SDK's 2 s later), and cancelling the close then left an
        # upstream still busy running, with a traceback and exit status 1.
        if not signalled and not closing and serving is not None:
            serving.cancel()
        signalled.append(sig)

    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal, sig)
            handled.append(sig)
    try:
        async with stdio_server() as (read, write):
            # another process holding the on-disk search index (a `bridge serve` on the same
            # config): answered at once all the same, with an index of its own in memory that moves
            # to disk once the index is free
            bridge = Bridge(config, index_lock_wait=config.search.lock_wait)
            if surface is not None:
                # a reload that removed it left every request of the session refused
                bridge.keep_surface(surface, f"this stdio session serves (--surface {surface})")
            stop_reloading = reload_on_hangup(bridge, config.source)
            # `initialize` is answered at once, while the upstreams start (a client's connect
            # timeout may be shorter than their start_timeout); tools/list waits for the start
            starting = asyncio.create_task(_start_then_settle(bridge), name="bridge start")
            try:
                frontend = MCPFrontend(
                    bridge, default_surface=surface, listing_waits_for_start=True
                )
                try:
                    await frontend.server.run(
                        read, write, frontend.server.create_initialization_options()
                    )
                finally:
                    closing = True
                    await frontend.aclose()
            finally:
                closing = True
                if not starting.done():
                    starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
                stop_reloading()
                await bridge.close()
                if (
                    signalled
                ):  # leaving stdio_server would wait for its stdin reader, until stdin closes
                    sys.stderr.flush()
                    os._exit(
                        0
                    )  # stopped as asked, everything closed: as `bridge serve` over HTTP, 0
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
    return 0
