"""Real servers on loopback for tests: an ASGI app on uvicorn (ephemeral port), ready when
uvicorn says it is listening; no sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn

from bridge.config import ServerConfig
from bridge.serve.http_protocol import http_protocol

uvicorn_log = logging.getLogger("uvicorn.error")
TINY_MCP_SERVER = Path(__file__).resolve().parent / "adapters" / "mcp_fixtures" / "tiny_server.py"


def held_upstream(name: str, fifo: Path) -> dict[str, Any]:
    """The config of an MCP upstream (the tiny server) that answers nothing until `release(fifo)`;
    its start_timeout (60 s) outlasts any test."""
    if not fifo.exists():
        os.mkfifo(fifo)
    return {
        "name": name,
        "kind": "mcp",
        "command": sys.executable,
        "args": [str(TINY_MCP_SERVER), "--hold", str(fifo)],
        "start_timeout": 60,
        "shutdown_timeout": 0.5,
    }


async def release(fifo: Path) -> None:
    """Let the upstream held on `fifo` answer (opening the pipe waits for its reader)."""
    await asyncio.to_thread(lambda: open(fifo, "w").close())


def unblock(fifo: Path) -> None:
    """Release a held upstream if one is waiting, so that no test leaves one behind."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def until(predicate: Callable[[], Any], timeout: float = 5.0) -> None:
    """Wait until `predicate()` holds, driven by the tasks under test (no fixed sleeps)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def read_body(receive: Callable[[], Awaitable[Any]]) -> bytes:
    """The whole body of an ASGI request, read from `receive`."""
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    return body


def replaying(body: bytes, receive: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    """An ASGI `receive` that gives the request's `body` (already read by a wrapper that looked
    at it) once, then whatever `receive` gives (a disconnect)."""
    replayed = False

    async def replay() -> Any:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class TestServer(uvicorn.Server):
    """uvicorn's server as the tests run it: the test owns the signals, and a stop takes as long
    as the connections and requests still open take to end (uvicorn looks at its stop flag every
    0.1 s and gives the connections a fixed 0.1 s first: 0.15 s for each server a test starts).
    Open requests get `timeout_graceful_shutdown` to end, then are cancelled, as in uvicorn."""

    __test__ = False  # not a test class

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stopping = asyncio.Event()

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def stop(self) -> None:
        self.should_exit = True
        self.stopping.set()

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.1):  # uvicorn's tick
                    await self.stopping.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                while self.server_state.connections or self.server_state.tasks:
                    await asyncio.sleep(0.005)
                for server in self.servers:
                    await server.wait_closed()
        except TimeoutError:
            uvicorn_log.error(
                "Cancel %s running task(s), timeout graceful shutdown exceeded",
                len(self.server_state.tasks),
            )
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()


@contextlib.asynccontextmanager
async def serve_asgi(
    app: Any,
    port: int | None = None,
    lifespan: str = "on",
    host: str = "127.0.0.1",
    ssl_certfile: str | None = None,
    server: ServerConfig | None = None,
) -> AsyncIterator[str]:
    """Run `app` on uvicorn at `host` (127.0.0.1), with the HTTP protocol `bridge serve` uses
    (corked writes, and the connection limits of `server`, the defaults when None), over TLS
    with `ssl_certfile` (a PEM file of the certificate and its key); yields the base URL (no
    trailing slash)."""
    # an explicit IPPROTO_TCP socket lets asyncio set TCP_NODELAY (else ~40 ms stalls per request)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port or 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http=http_protocol(server or ServerConfig()),
        ws="none",
        log_level="warning",
        lifespan=lifespan,
        timeout_graceful_shutdown=1,
        ssl_certfile=ssl_certfile,
    )
    uv_server = TestServer(config)
    task = asyncio.create_task(uv_server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(15):
            while not uv_server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield f"{'https' if ssl_certfile else 'http'}://{host}:{port}"
    finally:
        uv_server.stop()
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(5):
                await task
        if not task.done():
            task.cancel()
        sock.close()


async def raw_exchange(base: str, request: bytes) -> bytes:
    """Send `request`, bytes as they are, to the server at `base`; its whole answer, read until
    it closes the connection (the request should ask it to, or be one it refuses)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        return await reader.read()
    finally:
        writer.close()


def process_running(pid: int) -> bool:
    """The process is there and no zombie (a zombie still answers kill 0)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def process_ended(pid: int, within: float = 10.0) -> bool:
    """Whether the process ended within `within` seconds; killed if it did not."""
    deadline = asyncio.get_running_loop().time() + within
    while process_running(pid) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    if process_running(pid):
        os.kill(pid, signal.SIGKILL)
        return False
    return True


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


async def left_by_a_killed_parent(script: str, cwd: Any) -> int:
    """Run the Python `script`, which starts a process, prints its pid and waits; kill the script
    without letting it close anything (as a kill -9 of the bridge), and return that pid, running
    when its parent was killed."""
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, cwd=cwd
    )
    try:
        async with asyncio.timeout(20):
            assert parent.stdout is not None
            pid = int(await parent.stdout.readline())
        assert process_running(pid)
    finally:
        parent.kill()
        await parent.wait()
    return pid


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def clear_proxy_environment(monkeypatch: Any) -> None:
    """No proxy variable of the machine's (either case) reaches the test."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def proxy_loopback_too(monkeypatch: Any) -> None:
    """Loopback hosts go through the environment's proxy as any other (the bridge reaches them
    directly), so that a test's loopback upstream can stand for a remote one behind it."""
    from adapters.http import proxy as http_proxy

    monkeypatch.setattr(http_proxy, "LOOPBACK_DIRECT", False)


@contextlib.asynccontextmanager
async def forward_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A plain-HTTP forward proxy on loopback: yields its URL and the request lines it forwarded
    (`GET http://host:port/path`). Each connection carries one request (sent on with
    `Connection: close`), so that every request is seen."""
    seen: list[str] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

    async def handle(
        client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await client_reader.readuntil(b"\r\n\r\n")
            line, *fields = head.decode("latin-1").split("\r\n")
            method, target, version = line.split(" ")
            url = urllib.parse.urlsplit(target)
            seen.append(f"{method} {target}")
            kept = [
                f
                for f in fields
                if f
                and f.split(":", 1)[0].lower()
                not in ("connection", "proxy-connection", "keep-alive")
            ]
            path = url.path + (f"?{url.query}" if url.query else "")
            upstream_reader, upstream_writer = await asyncio.open_connection(
                url.hostname, url.port or 80
            )
            upstream_writer.write(
                "\r\n".join(
                    [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
                ).encode("latin-1")
            )
            sending = asyncio.create_task(pipe(client_reader, upstream_writer))
            await pipe(upstream_reader, client_writer)  # the answer, to its end (the agent closes)
            sending.cancel()
            upstream_writer.close()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            client_writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        await server.wait_closed()
