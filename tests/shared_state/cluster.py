"""Replicas of `bridge serve` as subprocesses sharing one Redis, and a raw MCP client that sends
each HTTP request to the replica the test names (or to the next one in turn, as the strictest
load balancer would)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.servers import TINY_MCP_SERVER, free_port

ROOT = Path(__file__).resolve().parents[2]
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
FEATURES = ROOT / "tests" / "adapters" / "mcp_fixtures" / "features_server.py"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def replica_config(
    folder: Path,
    redis_url: str,
    *,
    store: dict[str, Any] | None = None,
    shutdown_timeout: float = 3.0,
) -> dict[str, Any]:
    """One replica's config: the tiny MCP server and the features server (its own children)
    behind a surface that defers every tool, Redis for what the replicas share."""
    return {
        "server": {"shutdown_timeout": shutdown_timeout},
        "store": {**(store or {}), "path": str(folder / "bridge.db")},
        # a result past 256 characters is kept in the store, read back through /results/<ref>
        "invoke": {"inline_result_limit": 256},
        "search": {"semantic": "off"},
        "redis": {"url": redis_url},
        "upstreams": [
            {
                "name": "tiny",
                "kind": "mcp",
                "command": sys.executable,
                "args": [str(TINY_MCP_SERVER), "--slow", "--log", str(folder / "calls.log")],
            },
            # resources to subscribe to, and log messages: in the handshake era, whose server
            # sends a call's log messages as notices of its own
            {
                "name": "fx",
                "kind": "mcp",
                "command": sys.executable,
                "args": [str(FEATURES)],
                "protocol": "legacy",
            },
        ],
        # every tool deferred, but those of an upstream named `later` (one a test adds) loaded
        "surfaces": [{"name": "default", "load": ["later__*"], "defer": ["*"]}],
    }


class Replica:
    """One `bridge serve` process on a free loopback port; what it writes to stderr is kept."""

    def __init__(self, name: str, folder: Path, config: dict[str, Any]) -> None:
        self.name = name
        self.folder = folder
        self.config = config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []
        self._reader: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def answered(self) -> list[str]:
        """The `text` of each call this replica's upstream answered."""
        path = self.folder / "calls.log"
        return path.read_text().splitlines() if path.exists() else []

    @property
    def config_path(self) -> Path:
        return self.folder / "bridge.yaml"

    def write_config(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config))

    async def start(self) -> None:
        self.write_config()
        self.lines = []
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bridge.cli",
            "serve",
            "-c",
            str(self.config_path),
            "--port",
            str(self.port),
            cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self._reader = asyncio.create_task(self._read(self.process))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        while raw := await process.stderr.readline():
            self.lines.append(raw.decode(errors="replace"))

    async def ready(self, http: aiohttp.ClientSession, timeout: float = 60.0) -> None:
        """Wait until it says its upstreams started and its search index has them."""
        async with asyncio.timeout(timeout):
            while True:
                assert self.process is not None
                if self.process.returncode is not None:
                    raise AssertionError(f"{self.name} exited: {''.join(self.lines)[-3000:]}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{self.url}/readyz") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.05)

    def send(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)

    async def stop(self, how: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        process = self.process
        if process is None or process.returncode is not None:
            return process.returncode if process else None
        process.send_signal(how)
        try:
            async with asyncio.timeout(timeout):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
        if self._reader is not None:
            with contextlib.suppress(BaseException):
                await self._reader
        return process.returncode


@contextlib.asynccontextmanager
async def cluster(
    folder: Path, redis_url: str, count: int = 3, store: dict[str, Any] | None = None
) -> AsyncIterator[list[Replica]]:
    replicas = [
        Replica(
            chr(ord("a") + i),
            folder / f"replica-{i}",
            replica_config(folder / f"replica-{i}", redis_url, store=store),
        )
        for i in range(count)
    ]
    try:
        await asyncio.gather(*(replica.start() for replica in replicas))
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(*(replica.ready(http) for replica in replicas))
        yield replicas
    finally:
        await asyncio.gather(*(replica.stop() for replica in replicas))


def _messages(content_type: str, body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response: one JSON body, or the `data:` events of an SSE
    stream."""
    if content_type.startswith("application/json"):
        return [json.loads(body)] if body.strip() else []
    found = []
    for event in body.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip() for line in event.splitlines() if line.startswith("data:")
        )
        if data:
            found.append(json.loads(data))
    return found


class Answer:
    def __init__(self, status: int, headers: Any, messages: list[dict[str, Any]]) -> None:
        self.status = status
        self.headers = headers
        self.messages = messages

    @property
    def reply(self) -> dict[str, Any]:
        """The response among the messages (those with an id and a result or an error)."""
        return next(m for m in self.messages if "result" in m or "error" in m)

    @property
    def result(self) -> dict[str, Any]:
        reply = self.reply
        assert "result" in reply, reply
        return reply["result"]

    def notices(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("method") == method]


class McpClient:
    """A raw MCP client of the replicas: `post(replica, method, params)` sends one JSON-RPC
    request to that replica; `next_replica()` turns round them. A handshake-era client keeps
    its session id and protocol version headers."""

    def __init__(
        self, http: aiohttp.ClientSession, replicas: list[Replica], era: str = HANDSHAKE
    ) -> None:
        self.http = http
        self.replicas = replicas
        self.era = era
        self.session_id: str | None = None
        self._turn = 0
        self._ids = 0

    def next_replica(self) -> Replica:
        replica = self.replicas[self._turn % len(self.replicas)]
        self._turn += 1
        return replica

    def headers(self) -> dict[str, str]:
        headers = {**ACCEPT, "MCP-Protocol-Version": self.era}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    async def post(
        self,
        replica: Replica | None,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        notification: bool = False,
    ) -> Answer:
        replica = replica or self.next_replica()
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        params = dict(params or {})
        if self.era == MODERN:
            params["_meta"] = {**MODERN_META, **params.get("_meta", {})}
        if params:
            message["params"] = params
        if not notification:
            self._ids += 1
            message["id"] = self._ids
        headers = self.headers()
        if self.era == MODERN:
            headers["Mcp-Method"] = method
            if isinstance(params.get("name"), str):
                headers["Mcp-Name"] = params["name"]
        async with self.http.post(f"{replica.url}/mcp", json=message, headers=headers) as response:
            body = await response.text()
            answer = Answer(
                response.status,
                response.headers,
                _messages(response.headers.get("content-type", ""), body),
            )
        return answer

    async def initialize(self, replica: Replica | None = None) -> Answer:
        answer = await self.post(
            replica,
            "initialize",
            {
                "protocolVersion": HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        assert answer.status == 200, answer.messages
        self.session_id = answer.headers["mcp-session-id"]
        notified = await self.post(None, "notifications/initialized", notification=True)
        assert notified.status == 202, notified.messages
        return answer

    async def names(self, replica: Replica | None = None) -> list[str]:
        answer = await self.post(replica, "tools/list")
        return [tool["name"] for tool in answer.result["tools"]]

    async def call(self, replica: Replica | None, name: str, arguments: dict[str, Any]) -> Answer:
        return await self.post(replica, "tools/call", {"name": name, "arguments": arguments})


@contextlib.asynccontextmanager
async def event_stream(
    http: aiohttp.ClientSession,
    replica: Replica,
    headers: dict[str, str],
    message: dict[str, Any] | None = None,
) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
    """A stream on `replica`, as a queue of the messages it carries: the session's GET stream,
    or the response stream of the POST of `message` (a subscriptions/listen)."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    opened: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def read() -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        if message is None:
            get_headers = {k: v for k, v in headers.items() if k != "Content-Type"}
            get_headers["Accept"] = "text/event-stream"
            request = http.get(f"{replica.url}/mcp", headers=get_headers, timeout=timeout)
        else:
            request = http.post(
                f"{replica.url}/mcp", json=message, headers=headers, timeout=timeout
            )
        try:
            async with request as response:
                opened.set_result(response.status)
                data: list[str] = []
                async for raw in response.content:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        queue.put_nowait(json.loads("\n".join(data)))
                        data = []
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc)
            raise

    task = asyncio.create_task(read())
    try:
        async with asyncio.timeout(10):
            status = await asyncio.shield(opened)
        assert status == 200, status
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


class Outcome:
    """What one call of a load came to: the replica that accepted it (or failed it) and how."""

    def __init__(self, text: str, replica: str, ok: bool, detail: str = "") -> None:
        self.text, self.replica, self.ok, self.detail = text, replica, ok, detail

    def __repr__(self) -> str:
        return f"{self.text}@{self.replica}:{'ok' if self.ok else self.detail}"


async def load(
    replicas: list[Replica],
    *,
    clients: int,
    calls: int,
    tool: str,
    arguments: dict[str, Any],
    at: int,
    action: Any,
) -> list[Outcome]:
    """`calls` calls of `tool` (deferred, loaded in each client's session by search first) from
    `clients` handshake-era sessions, each request to the next replica in turn; `action()` runs
    once `at` calls have ended. A request a replica refuses to connect is sent to the next one,
    as a load balancer does; any other failure is the call's outcome."""
    outcomes: list[Outcome] = []
    started = 0
    acted = asyncio.Event()
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=30)
    ) as http:

        async def send(
            client: McpClient, method: str, params: dict[str, Any]
        ) -> tuple[Replica, Answer]:
            for _ in range(len(replicas) * 4):
                replica = client.next_replica()
                try:
                    return replica, await client.post(replica, method, params)
                except aiohttp.ClientConnectorError:
                    continue  # not listening (stopped or stopping): the next replica
            raise AssertionError(f"no replica took {method}")

        async def one(number: int) -> None:
            nonlocal started
            client = McpClient(http, replicas)
            client._turn = number
            _, opened = await send(
                client,
                "initialize",
                {
                    "protocolVersion": HANDSHAKE,
                    "capabilities": {},
                    "clientInfo": {"name": f"load-{number}", "version": "0"},
                },
            )
            client.session_id = opened.headers["mcp-session-id"]
            _, found = await send(
                client,
                "tools/call",
                {"name": "search_tools", "arguments": {"query": f"select:{tool}"}},
            )
            assert not found.result.get("isError"), found.result
            while started < calls:
                text = f"c{number}-{started}"
                started += 1
                replica = client.next_replica()
                try:
                    answer = await client.call(replica, tool, {**arguments, "text": text})
                except aiohttp.ClientConnectorError:  # not listening: the next replica takes it
                    started -= 1
                    continue
                except aiohttp.ClientError as exc:
                    outcomes.append(Outcome(text, replica.name, False, type(exc).__name__))
                else:
                    ok = (
                        answer.status == 200
                        and not answer.reply.get("error")
                        and not answer.result.get("isError")
                    )
                    detail = "" if ok else f"HTTP {answer.status} {str(answer.messages)[:300]}"
                    outcomes.append(Outcome(text, replica.name, ok, detail))
                if len(outcomes) >= at and not acted.is_set():
                    acted.set()
                    action()

        await asyncio.gather(*(one(n) for n in range(clients)))
    return outcomes
