"""The HTTP server: one Starlette app on one port (MCP at `/mcp` when the MCP frontend is present,
the A2T REST routes beside it), served by uvicorn with clean shutdown on SIGINT and SIGTERM, and
the config file applied again on SIGHUP."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import LOGGING_CONFIG

from bridge.config import BridgeConfig
from bridge.net import is_loopback
from bridge.runtime import Bridge, reload_on_hangup, settle_gc
from bridge.serve.auth import identify, resource_metadata_routes
from bridge.serve.connect import connect_routes
from bridge.serve.console import console_routes
from bridge.serve.http_protocol import http_protocol
from bridge.serve.mcp import MCPFrontend
from bridge.serve.openapi_doc import openapi_routes
from bridge.serve.rest import ietf_routes
from bridge.serve.rest_a2t import CatalogViews, a2t_routes
from bridge.serve.rest_http import ApiError, ServeContext, error_response, not_found, too_large
from bridge.serve.rest_records import records_routes
from bridge.telemetry import json_logs, say

__all__ = [
    "Entrance",
    "build_app",
    "close_app",
    "rest_routes",
    "run_http",
    "served_urls",
    "started_line",
]

log = logging.getLogger("bridge.serve")


class _Server(uvicorn.Server):
    """uvicorn's server, without its own signal handlers: the bridge installs its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Entrance:
    """What every HTTP request passes first, inside the server-error answer and the spans: a
    request whose declared body is over `limit` is refused before any route runs (every path,
    MCP included; bodies without a Content-Length are counted by the routes as they read).

    A request for the MCP endpoint (`route`) then goes straight to it, past Starlette's
    exception middleware and routing, which would only find that route: the scope gets what
    routing gives it (`router`, `route`, `endpoint`, `path_params`). The endpoint raises no
    `HTTPException`, the one thing the skipped exception middleware answers, and identifies its
    callers itself (its gate, `mcp_gate.py`). Any other request has its caller identified
    before its route runs (`identify`: an OAuth token may need the issuer's keys fetched, which
    the synchronous route helpers cannot wait for); a route that needs no caller ignores it."""

    def __init__(
        self, app: ASGIApp, bridge: Bridge, limit: int, mcp: tuple[Router, Route] | None
    ) -> None:
        self.app = app
        self.bridge = bridge
        self.limit = limit
        self.router: Router | None = mcp[0] if mcp is not None else None
        self.route: Route | None = mcp[1] if mcp is not None else None
        self.path = self.route.path if self.route is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                if value.isdigit() and int(value) > self.limit:
                    await error_response(too_large(self.limit))(scope, receive, send)
                    return
                break
        route = self.route
        if route is not None and scope["path"] == self.path and not scope.get("root_path"):
            scope["router"], scope["route"] = self.router, route
            scope["endpoint"], scope["path_params"] = route.endpoint, {}
            await route.app(scope, receive, send)
            return
        await identify(self.bridge, scope)
        await self.app(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405 and request.method == "POST" and request.url.path.endswith(":invoke"):
        # `/tools/:invoke` or `/tools/<id>/versions/:invoke`: an empty id or version matched a
        # GET route; no such tool (or version) exists
        path = request.url.path
        error = (
            ApiError(
                404,
                "unknown_tool",
                f"{path} names no version; use /tools/{{toolId}}/versions/{{n}}:invoke",
                error_code="unknown_version",
            )
            if "/versions/" in path
            else not_found(
                path.removeprefix("/tools/").removesuffix(":invoke"),
                request.app.state.bridge.catalog,
            )
        )
    elif exc.status_code == 405:
        error = ApiError(
            405,
            "invalid_arguments",
            f"{request.method} is not allowed on {request.url.path}",
            error_code="method_not_allowed",
            headers=dict(exc.headers or {}),
        )
    elif exc.status_code == 404:
        error = ApiError(
            404,
            "invalid_arguments",
            f"no route {request.url.path}; see /openapi.json",
            error_code="route_not_found",
        )
    else:
        error = ApiError(
            exc.status_code,
            "invalid_arguments" if exc.status_code < 500 else "execution_failed",
            str(exc.detail),
            headers=dict(exc.headers or {}),
        )
    return error_response(error)


async def _server_error(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(
        ApiError(500, "execution_failed", "the bridge failed to answer this request; it was logged")
    )


def rest_routes(bridge: Bridge) -> tuple[list[BaseRoute], list[Callable[[], Any]]]:
    """Every REST route over one bridge, and what must be called when the app is done."""
    ctx = ServeContext(bridge)
    views = CatalogViews(bridge.catalog)
    routes = [
        *ietf_routes(ctx),
        *a2t_routes(ctx, views),
        *records_routes(ctx),
        *openapi_routes(ctx),
    ]
    return routes, [views.close]


def build_app(bridge: Bridge, *, host: str = "127.0.0.1") -> Starlette:
    """One Starlette app: the MCP frontend's app (whose lifespan runs its session manager) with
    the REST routes and the designers' console (`/ui`) beside `/mcp`."""
    routes, closers = rest_routes(bridge)
    routes += resource_metadata_routes(bridge)
    routes += connect_routes(bridge)
    routes += console_routes(ServeContext(bridge))
    frontend = MCPFrontend(bridge)
    app: Starlette = frontend.http_app(routes, host)
    closers.append(frontend.aclose)
    # `/tools/` is not `/tools`: an undocumented redirect would only confuse REST clients
    app.router.redirect_slashes = False
    app.exception_handlers[HTTPException] = _http_error
    app.exception_handlers[Exception] = _server_error
    mcp = next(
        (
            (app.router, route)
            for route in app.router.routes
            if isinstance(route, Route) and route.path == "/mcp" and route.methods is None
        ),
        None,
    )
    limit = bridge.config.server.max_body_bytes
    app.add_middleware(Entrance, bridge=bridge, limit=limit, mcp=mcp)
    if bridge.telemetry.tracing is not None:  # outermost: its span covers the whole request
        from bridge.serve.traced import TracedHTTP

        app.add_middleware(TracedHTTP, tracing=bridge.telemetry.tracing)
    app.state.bridge = bridge
    app.state.closers = closers
    app.state.mcp_frontend = frontend
    return app


async def close_app(app: Starlette) -> None:
    """Release what `build_app` set up (catalog subscriptions, the MCP frontend's tasks)."""
    closers: list[Callable[[], Any]] = getattr(app.state, "closers", [])
    while closers:
        outcome = closers.pop()()
        if inspect.isawaitable(outcome):
            with contextlib.suppress(Exception):
                await outcome


def served_urls(base: str) -> list[tuple[str, str]]:
    return [
        ("A2T REST (IETF draft)", f"{base}/tools"),
        ("a2t dialect", f"{base}/.well-known/a2t-capabilities.json"),
        ("MCP (streamable HTTP)", f"{base}/mcp"),
        ("Agent Tool records", f"{base}/search?q=..  {base}/invoke"),
        ("OpenAPI", f"{base}/openapi.json"),
        ("designers' console", f"{base}/ui"),
        ("health", f"{base}/healthz  {base}/readyz"),
    ]


def started_line(bridge: Bridge) -> str:
    """What the bridge says once every upstream has listed or failed its first attempt."""
    slots = bridge.catalog.slots.values()
    down = [
        f"{s.name} ({s.health.state})" for s in slots if s.health.state not in ("ready", "disabled")
    ]
    said = f"; not ready: {', '.join(down)}" if down else ""
    return f"upstreams started: serving {len(bridge.catalog)} tools from {len(bridge.catalog.slots)} upstreams{said}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every response split in two writes waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    # not inheritable: a process the bridge launches (under uvloop, which passes inheritable
    # descriptors on) held the port after the bridge died, and a restart could not listen
    return sock


async def _start_then_index(bridge: Bridge) -> None:
    """The bridge's start, then the wait for its search index to take in what the start listed
    (`/readyz` says ready then, and the `upstreams started` line follows)."""
    await bridge.start(wait=True, freeze_first=True)
    settle_gc(collected=True)  # bridge.start(wait=True) ended with a full collection
    await bridge.wait_indexed()


async def run_http(config: BridgeConfig, host: str | None, port: int | None, insecure: bool) -> int:
    """`bridge serve`: start the bridge and serve it over HTTP until SIGINT or SIGTERM."""
    host = host or config.server.host
    port = config.server.port if port is None else port
    if (
        not config.server.tokens
        and config.server.oauth is None
        and not is_loopback(host)
        and not insecure
    ):
        say(
            f"bridge serve: refusing to serve {host} without authentication: add server.tokens or "
            "server.oauth to the config, bind a loopback address (--host 127.0.0.1), or pass --insecure",
            logging.ERROR,
        )
        return 2
    try:
        sock = _bind(host, port)
    except OSError as exc:
        say(f"bridge serve: cannot listen on {host}:{port}: {exc.strerror or exc}", logging.ERROR)
        return 1
    loop = asyncio.get_running_loop()
    server: uvicorn.Server | None = None
    app: Starlette | None = None

    def on_signal() -> None:
        if server is None or app is None:  # (both made before the loop first runs a handler)
            return
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True
        # streams that only wait for notices would hold the graceful stop for its whole grace;
        # MCP calls still running near its end are answered
        app.state.mcp_frontend.stopping(config.server.shutdown_timeout)

    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
            handled.append(sig)
    # another process holding the on-disk search index: the server answers at once, with an
    # index of its own in memory that moves to disk once the index is free
    bridge = Bridge(config, index_lock_wait=config.search.lock_wait)
    stop_reloading = reload_on_hangup(
        bridge, config.source
    )  # SIGHUP: the config file read again and applied
    app = build_app(bridge, host=host)
    starting: asyncio.Task[None] | None = None
    try:
        # ws="none": no route takes a WebSocket, and uvicorn would import its WebSocket module
        # here, while the upstreams start (one that had used up the file descriptors ended the
        # server on that import)
        # the protocol times and caps client connections (server.idle_timeout and the rest);
        # log_config None in the JSON format: uvicorn's own handlers would write text lines
        uv_config = uvicorn.Config(
            app,
            http=http_protocol(config.server),
            ws="none",
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=math.ceil(config.server.shutdown_timeout),
            log_config=None if json_logs() else LOGGING_CONFIG,
        )
        server = _Server(uv_config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.wait([task], timeout=0.05)
        if task.done() and not server.started:
            task.result()
            if server.should_exit:  # a signal before it listened
                return 0
            say("bridge serve: the server did not start", logging.ERROR)
            return 1
        # the upstreams start once the server listens, and while it serves: /healthz answers at
        # once, /readyz says which upstreams are still starting (then that the search index takes
        # in what they listed), and the catalog grows as each lists. A signal meanwhile stops the
        # server, and the start with it, without waiting for their start_timeout.
        starting = asyncio.create_task(_start_then_index(bridge), name="bridge start")
        bound_port = sock.getsockname()[1]
        bound = f"http://{host if ':' not in host else f'[{host.strip(chr(91) + chr(93))}]'}:{bound_port}"
        base = (config.server.public_url or bound).rstrip("/")
        public = f" (public URL {base})" if config.server.public_url else ""
        waiting = bridge.starting()
        still = f" ({len(waiting)} still starting)" if waiting else ""
        say(
            f"bridge: serving {len(bridge.catalog)} tools from {len(bridge.catalog.slots)} "
            f"upstreams{still} on {bound}{public}"
        )
        for label, url in served_urls(base):
            say(f"  {label + ':':<24}{url}")
        await asyncio.wait([task, starting], return_when=asyncio.FIRST_COMPLETED)
        if starting.done() and not task.done():
            starting.result()
            say(f"bridge: {started_line(bridge)}")
        await task
        return 0
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        stop_reloading()
        if starting is not None and not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
        await close_app(app)
        await bridge.close()
        sock.close()
