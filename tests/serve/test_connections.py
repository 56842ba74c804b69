"""The connection table: caps in all and per address, a new connection taking the place of an
idle one, refusals when none is idle, and the descriptors kept free under the open-file limit.
The load test at the end holds many idle connections from one address against `bridge serve`
under `ulimit -n 256` on loopback while another address calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bridge.config import ServerConfig
from bridge.serve.connections import DESCRIPTOR_RECOUNT, ConnectionTable, DescriptorBudget
from tests.servers import TINY_MCP_SERVER

ROOT = Path(__file__).resolve().parents[2]


@dataclass(eq=False)
class Conn:
    """A connection as the table sees it; `idle_since` None while a request is served."""

    address: str
    idle_since: float | None = 0.0
    closed: list[Conn] = field(default_factory=list)

    def let_go(self) -> None:
        self.closed.append(self)


def table(**server: int) -> ConnectionTable:
    return ConnectionTable(ServerConfig(**server), DescriptorBudget(0, count=lambda: 0))


def test_past_its_address_cap_a_connection_takes_the_place_of_that_address_longest_idle():
    conns = table(max_connections_per_address=3)
    closed: list[Conn] = []
    a = [Conn("10.0.0.1", idle_since=t, closed=closed) for t in (5.0, 1.0, 3.0)]
    other = Conn("10.0.0.2", idle_since=0.0, closed=closed)
    for conn in [*a, other]:
        assert conns.admit(conn) is None
    assert conns.admit(Conn("10.0.0.1")) is None
    assert closed == [a[1]] and conns.from_address("10.0.0.1") == 3 and len(conns) == 4


def test_past_its_address_cap_with_none_idle_a_connection_is_refused_429():
    conns = table(max_connections_per_address=2)
    for _ in range(2):
        assert conns.admit(Conn("10.0.0.1", idle_since=None)) is None
    refused = conns.admit(Conn("10.0.0.1"))
    assert refused is not None and refused.status == 429 and refused.error_class == "rate_limited"
    assert refused.headers == {"Retry-After": "1"} and len(conns) == 2
    assert conns.admit(Conn("10.0.0.2")) is None  # other addresses are not held back


def test_past_the_server_cap_the_longest_idle_of_the_address_holding_most_goes():
    conns = table(max_connections=4)
    closed: list[Conn] = []
    few = Conn("10.0.0.9", idle_since=0.0, closed=closed)  # idle longest, but its address holds one
    many = [Conn("10.0.0.1", idle_since=t, closed=closed) for t in (2.0, None, 1.0)]
    for conn in [few, *many]:
        assert conns.admit(conn) is None
    assert conns.admit(Conn("10.0.0.5")) is None
    assert closed == [many[2]] and len(conns) == 4


def test_past_the_server_cap_with_none_idle_a_connection_is_refused_503():
    conns = table(max_connections=2)
    busy = [Conn(f"10.0.0.{i}", idle_since=None) for i in (1, 2)]
    for conn in busy:
        assert conns.admit(conn) is None
    refused = conns.admit(Conn("10.0.0.3"))
    assert refused is not None and refused.status == 503
    assert refused.error_class == "dependency_unavailable"
    conns.release(busy[0])
    conns.release(busy[0])  # a second release of one connection changes nothing
    assert len(conns) == 1 and conns.admit(Conn("10.0.0.3")) is None


def test_connections_leave_the_reserve_of_descriptors_free_under_the_open_file_limit():
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    others = soft - 100  # what the rest of the process holds
    now = [0.0]
    counts: list[int] = []

    def count() -> int:  # the socket just accepted is open too
        counts.append(others + len(conns) + 1)
        return counts[-1]

    budget = DescriptorBudget(90, count=count, clock=lambda: now[0])
    conns = ConnectionTable(ServerConfig(fd_reserve=90), budget)
    held = [Conn("10.0.0.1", idle_since=None) for _ in range(10)]
    for conn in held:
        assert conns.admit(conn) is None
    refused = conns.admit(Conn("10.0.0.2"))
    assert refused is not None and refused.status == 503
    assert len(counts) == 1  # counted once: the connections are known without counting
    others -= 1  # an upstream closed a descriptor: seen at the next count, not before
    assert conns.admit(Conn("10.0.0.2")) is not None
    now[0] += DESCRIPTOR_RECOUNT
    assert conns.admit(Conn("10.0.0.2")) is None and len(counts) == 2


# ---------------------------------------------------------------- under load, on loopback

OPEN_FILES = 256
IDLE_CONNECTIONS = 300
CALLS = 60


async def _open_idle_connections(host: str, port: int, count: int) -> list[asyncio.StreamWriter]:
    """`count` connections from 127.0.0.1 that never finish a request: half send nothing, half
    part of a head."""

    async def one(i: int) -> asyncio.StreamWriter:
        _, writer = await asyncio.open_connection(host, port, local_addr=("127.0.0.1", 0))
        if i % 2:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        return writer

    return list(await asyncio.gather(*(one(i) for i in range(count))))


@dataclass
class Served:
    process: asyncio.subprocess.Process
    base: str
    said: list[str]  # its stderr, line by line


@contextlib.asynccontextmanager
async def bridge_serve(config_file: Path, open_files: int) -> AsyncIterator[Served]:
    """`bridge serve` under `ulimit -n open_files`, once its upstreams have started."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge.cli",
        "serve",
        "-c",
        str(config_file),
        "--port",
        "0",
        cwd=ROOT,
        preexec_fn=limited,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    said: list[str] = []

    async def read_all() -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            said.append(line.decode())

    reading = asyncio.create_task(read_all())
    try:
        async with asyncio.timeout(30):
            while not any(line.startswith("bridge: upstreams started") for line in said):
                assert not reading.done(), "".join(said)
                await asyncio.sleep(0.05)
        base = said[0].rsplit(" on ", 1)[1].strip()
        yield Served(process, base, said)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await reading


async def _until_ready(http: aiohttp.ClientSession, upstream: str) -> None:
    """Until /readyz says `upstream` is ready."""
    async with asyncio.timeout(20):
        while True:
            async with http.get("/readyz") as response:
                states = {u["name"]: u["state"] for u in (await response.json())["upstreams"]}
            if states.get(upstream) == "ready":
                return
            await asyncio.sleep(0.05)


def tiny(name: str) -> dict[str, Any]:
    return {"name": name, "kind": "mcp", "command": sys.executable, "args": [str(TINY_MCP_SERVER)]}


def echo(http: aiohttp.ClientSession, upstream: str) -> Any:
    return http.post("/invoke", json={"tool": f"{upstream}__echo", "arguments": {"text": "hi"}})


async def test_one_address_holding_idle_connections_past_the_file_limit_keeps_no_one_out(tmp_path):
    """226 idle connections against `ulimit -n 256` made every request fail, /healthz
    included. Here 127.0.0.1 opens 300 that never finish a request, and 300 more halfway
    through, while 127.0.0.2 calls, each call on a new connection; then an upstream added by a
    reload starts its stdio child in the descriptors kept free."""
    config = {
        "store": {"path": ":memory:"},
        "upstreams": [tiny("tiny")],
        "server": {"idle_timeout": 60, "header_timeout": 60},
    }  # only the caps let them go
    config_file = tmp_path / "bridge.json"
    config_file.write_text(json.dumps(config))
    async with bridge_serve(config_file, OPEN_FILES) as served:
        host, port = served.base.removeprefix("http://").rsplit(":", 1)
        held = await _open_idle_connections(host, int(port), IDLE_CONNECTIONS)
        in_use = [len(os.listdir(f"/proc/{served.process.pid}/fd"))]
        statuses: list[int] = []
        latencies: list[float] = []
        loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0), force_close=True)
        session = aiohttp.ClientSession(
            served.base, connector=connector, timeout=aiohttp.ClientTimeout(total=10)
        )
        try:
            async with session as http:
                burst = None
                for i in range(CALLS):
                    if i == CALLS // 2:
                        burst = asyncio.create_task(
                            _open_idle_connections(host, int(port), IDLE_CONNECTIONS)
                        )
                    began = loop.time()
                    async with echo(http, "tiny") if i % 2 else http.get("/healthz") as response:
                        statuses.append(response.status)
                    latencies.append(loop.time() - began)
                assert burst is not None
                held += await burst
                in_use.append(len(os.listdir(f"/proc/{served.process.pid}/fd")))
                config["upstreams"].append(tiny("later"))
                config_file.write_text(json.dumps(config))
                served.process.send_signal(signal.SIGHUP)
                await _until_ready(http, "later")
                async with echo(http, "later") as response:
                    assert response.status == 200, await response.text()
        finally:
            for writer in held:
                writer.close()
    assert statuses == [200] * CALLS, statuses
    assert max(latencies) < 5, latencies
    assert max(in_use) <= OPEN_FILES - 64, in_use  # most of fd_reserve's 128 stayed free
    troubles = ("Too many open files", "Traceback")
    assert not [line for line in served.said if any(t in line for t in troubles)]
