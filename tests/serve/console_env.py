"""A bridge served on loopback from a thread of its own, so that a test's thread can drive a
browser (Selenium blocks) while the bridge answers. Every request and its answer are recorded:
what the console asked for, with which token, and what it was told."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.config import parse_config
from bridge.runtime import Bridge, settle_gc
from bridge.serve.app import build_app, close_app
from bridge.upstream import Upstream
from tests.serve.rest_env import indexed
from tests.servers import serve_asgi

T = TypeVar("T")


@dataclass
class Exchange:
    method: str
    target: str  # path and query
    authorization: str
    status: int = 0
    body: bytes = b""


@dataclass
class Recorder:
    """ASGI middleware keeping every HTTP exchange (request line, token, status, whole body)."""

    app: ASGIApp
    exchanges: list[Exchange] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        query = scope.get("query_string", b"").decode()
        exchange = Exchange(
            scope["method"],
            scope["path"] + (f"?{query}" if query else ""),
            headers.get(b"authorization", b"").decode(),
        )
        self.exchanges.append(exchange)

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
            elif message["type"] == "http.response.body":
                exchange.body += message.get("body", b"")
            await send(message)

        await self.app(scope, receive, recording)


class ThreadedBridge:
    """A started bridge over `upstreams`, served on loopback by a thread's event loop."""

    def __init__(
        self,
        config: dict[str, Any],
        upstreams: list[Upstream],
        start_timeout: float = 60,
        settle_gc: bool = False,
    ) -> None:
        self.config = config
        self.settle_gc = settle_gc
        self.start_timeout = start_timeout
        self.upstreams = upstreams
        self.base = ""
        self.bridge: Bridge | None = None
        self.recorder: Recorder | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="console bridge", daemon=True)

    def __enter__(self) -> ThreadedBridge:
        self._thread.start()
        if not self._ready.wait(self.start_timeout):
            raise TimeoutError(f"the bridge did not start within {self.start_timeout} s")
        if self._failed is not None:
            raise self._failed
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._failed = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        bridge = self.bridge = Bridge(parse_config(self.config), extra_upstreams=self.upstreams)
        await bridge.start()
        await indexed(bridge)
        if self.settle_gc:  # as bridge serve does once started (process-wide: for benches)
            settle_gc()
        app = build_app(bridge)
        self.recorder = Recorder(app)
        try:
            async with serve_asgi(self.recorder, server=bridge.config.server) as base:
                self.base = base
                self._ready.set()
                await self._stop.wait()
        finally:
            await close_app(app)
            await bridge.close()

    def run(self, make: Callable[[], Awaitable[T]], timeout: float = 20) -> T:
        """Run a coroutine on the bridge's loop and wait for its outcome."""
        assert self._loop is not None

        async def wrapped() -> T:
            return await make()

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            wrapped(), self._loop
        )
        return future.result(timeout)
