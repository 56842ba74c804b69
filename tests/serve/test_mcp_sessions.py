"""Caps on the handshake-era MCP sessions over HTTP: per token (per client address without
tokens) and in all; an initialize past a cap ends the client's own longest idle session first,
never one in use, and no client can take the room of the others (a bounded load test)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import httpx2

from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import ACCEPT, HANDSHAKE, INITIALIZE, served_bridge
from tests.servers import until

TOKENS = ["token-a-000001", "token-b-000002", "token-c-000003"]
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
CALL = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "svc__echo", "arguments": {"text": "hi"}},
}


def config(per_client: int | None, total: int, *, tokens: bool = True) -> dict[str, Any]:
    server: dict[str, Any] = {"mcp_max_sessions": total}
    if per_client is not None:
        server["mcp_max_sessions_per_client"] = per_client
    if tokens:
        server["tokens"] = [{"token": t} for t in TOKENS]
    return {"server": server, "surfaces": [{"name": "default", "load": ["*"]}]}


def upstreams() -> list[FakeUpstream]:
    return [FakeUpstream(name="svc", tools=[tool("echo", read_only=True)])]


def auth(token: str | None) -> dict[str, str]:
    return {**ACCEPT, "Authorization": f"Bearer {token}"} if token else dict(ACCEPT)


async def initialize(http: httpx2.AsyncClient, url: str, token: str | None) -> httpx2.Response:
    return await http.post(f"{url}/mcp", json=INITIALIZE, headers=auth(token))


async def open_session(http: httpx2.AsyncClient, url: str, token: str | None) -> str:
    response = await initialize(http, url, token)
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


async def in_session(
    http: httpx2.AsyncClient, url: str, token: str | None, session: str, body: dict[str, Any]
) -> httpx2.Response:
    headers = {**auth(token), "Mcp-Session-Id": session, "MCP-Protocol-Version": HANDSHAKE}
    return await http.post(f"{url}/mcp", json=body, headers=headers)


def jsonrpc_result(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, sent as JSON or as one SSE event."""
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(
            line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip()
        )
    return json.loads(text)


async def test_a_token_at_its_cap_ends_its_own_longest_idle_session_and_others_are_served():
    async with (
        served_bridge(config(per_client=3, total=5), upstreams()) as srv,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        a = [await open_session(http, srv.url, TOKENS[0]) for _ in range(3)]
        # the oldest one used last: the second is now the longest idle
        assert (await in_session(http, srv.url, TOKENS[0], a[0], LIST)).status_code == 200
        a.append(await open_session(http, srv.url, TOKENS[0]))
        assert (await in_session(http, srv.url, TOKENS[0], a[1], LIST)).status_code == 404
        for session in (a[0], a[2], a[3]):
            assert (await in_session(http, srv.url, TOKENS[0], session, LIST)).status_code == 200
        assert srv.frontend.sessions.held(client_of(TOKENS[0])) == 3
        # however many more it opens, the other tokens open theirs
        for _ in range(10):
            await open_session(http, srv.url, TOKENS[0])
        b = await open_session(http, srv.url, TOKENS[1])
        c = await open_session(http, srv.url, TOKENS[2])
        for token, session in ((TOKENS[1], b), (TOKENS[2], c)):
            assert (
                jsonrpc_result(await in_session(http, srv.url, token, session, CALL))["result"][
                    "isError"
                ]
                is False
            )


async def test_a_session_in_use_is_never_ended_to_make_room():
    async with (
        served_bridge(config(per_client=2, total=10), upstreams()) as srv,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        sessions = [await open_session(http, srv.url, TOKENS[0]) for _ in range(2)]
        headers = {
            **auth(TOKENS[0]),
            "Accept": "text/event-stream",
            "MCP-Protocol-Version": HANDSHAKE,
        }
        async with contextlib_streams(http, srv.url, headers, sessions):
            refused = await initialize(http, srv.url, TOKENS[0])
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            error = refused.json()["error"]
            assert error["code"] == -32600 and "mcp_max_sessions_per_client" in error["message"]
            assert "\n" not in error["message"]
            for session in sessions:  # both still served
                assert (
                    await in_session(http, srv.url, TOKENS[0], session, LIST)
                ).status_code == 200
            assert (await initialize(http, srv.url, TOKENS[1])).status_code == 200
        # the streams closed, the sessions are idle: room is made again
        await until(lambda: srv.frontend.sessions.idle(client_of(TOKENS[0])) == 2)
        await open_session(http, srv.url, TOKENS[0])


class contextlib_streams:
    """Each session's GET stream (server notices) held open: the sessions are in use."""

    def __init__(
        self, http: httpx2.AsyncClient, url: str, headers: dict[str, str], sessions: list[str]
    ) -> None:
        self.requests = [
            http.stream("GET", f"{url}/mcp", headers={**headers, "Mcp-Session-Id": s})
            for s in sessions
        ]

    async def __aenter__(self) -> None:
        for request in self.requests:
            response = await request.__aenter__()
            assert response.status_code == 200

    async def __aexit__(self, *exc: object) -> None:
        for request in self.requests:
            await request.__aexit__(None, None, None)


async def test_a_request_the_sdk_refuses_ends_no_session():
    # a web page's cross-site POST to a bridge on loopback: another Origin, or text/plain to skip
    # the browser's preflight
    async with (
        served_bridge(config(per_client=2, total=10, tokens=False), upstreams()) as srv,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        sessions = [await open_session(http, srv.url, None) for _ in range(2)]
        for headers, status in (
            ({**ACCEPT, "Origin": "http://pages.example"}, 403),
            ({**ACCEPT, "Content-Type": "text/plain"}, 400),
        ):
            refused = await http.post(f"{srv.url}/mcp", json=INITIALIZE, headers=headers)
            assert refused.status_code == status, refused.text
        for session in sessions:
            assert (await in_session(http, srv.url, None, session, LIST)).status_code == 200


async def test_a_session_the_client_ends_frees_its_room():
    async with (
        served_bridge(config(per_client=2, total=10), upstreams()) as srv,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        first, second = [await open_session(http, srv.url, TOKENS[0]) for _ in range(2)]
        headers = {**auth(TOKENS[0]), "Mcp-Session-Id": first, "MCP-Protocol-Version": HANDSHAKE}
        assert (await http.delete(f"{srv.url}/mcp", headers=headers)).status_code == 200
        await open_session(http, srv.url, TOKENS[0])
        assert (
            await in_session(http, srv.url, TOKENS[0], second, LIST)
        ).status_code == 200  # nothing else ended


async def test_without_tokens_each_client_address_has_its_own_cap():
    async with served_bridge(config(per_client=2, total=4, tokens=False), upstreams()) as srv:
        clients = [
            httpx2.AsyncClient(
                timeout=10, transport=httpx2.AsyncHTTPTransport(local_address=address)
            )
            for address in ("127.0.0.1", "127.0.0.2")
        ]
        try:
            one, two = clients
            held = [await open_session(one, srv.url, None) for _ in range(2)]
            for _ in range(5):
                await open_session(one, srv.url, None)
            assert (await in_session(one, srv.url, None, held[0], LIST)).status_code == 404
            others = [await open_session(two, srv.url, None) for _ in range(2)]
            for session in others:
                assert (await in_session(two, srv.url, None, session, LIST)).status_code == 200
        finally:
            for client in clients:
                await client.aclose()


async def test_a_full_bridge_ends_an_idle_session_of_the_client_holding_the_most():
    # one token filling the bridge refused every other token's initialize with 503
    async with (
        served_bridge(config(per_client=None, total=5), upstreams()) as srv,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        a = [await open_session(http, srv.url, TOKENS[0]) for _ in range(5)]
        b = await open_session(http, srv.url, TOKENS[1])
        assert (await in_session(http, srv.url, TOKENS[0], a[0], LIST)).status_code == 404
        await open_session(http, srv.url, TOKENS[2])
        assert (await in_session(http, srv.url, TOKENS[0], a[1], LIST)).status_code == 404
        # A holds 3, B and C one each: B, holding an idle session, ends its own, not A's
        await open_session(http, srv.url, TOKENS[1])
        assert (await in_session(http, srv.url, TOKENS[1], b, LIST)).status_code == 404
        for session in a[2:]:
            assert (await in_session(http, srv.url, TOKENS[0], session, LIST)).status_code == 200


async def test_a_full_bridge_whose_sessions_are_all_in_use_answers_503():
    async with (
        served_bridge(config(per_client=None, total=2), upstreams()) as srv,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        sessions = [await open_session(http, srv.url, TOKENS[0]) for _ in range(2)]
        headers = {
            **auth(TOKENS[0]),
            "Accept": "text/event-stream",
            "MCP-Protocol-Version": HANDSHAKE,
        }
        async with contextlib_streams(http, srv.url, headers, sessions):
            refused = await initialize(http, srv.url, TOKENS[1])
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            error = refused.json()["error"]
            assert error["code"] == -32603 and "server.mcp_max_sessions)" in error["message"], error


def client_of(token: str) -> str:
    """The key the sessions of `token` are counted under."""
    return "token sha256:" + hashlib.sha256(token.encode()).hexdigest()[:12]


async def test_other_tokens_are_served_while_one_token_holds_its_maximum_of_sessions():
    """Load, bounded (a few seconds): one token opens sessions 8 at a time and leaves each open,
    to its cap and then as many again past it, while two other tokens each open a session and call
    a tool three times, over and over. Every request of theirs is answered, and the first token
    never holds more than its cap."""
    per_client, total = 50, 80
    async with served_bridge(config(per_client=per_client, total=total), upstreams()) as srv:
        limits = httpx2.Limits(max_connections=16, max_keepalive_connections=16)
        async with httpx2.AsyncClient(timeout=10, limits=limits) as http:
            noisy = client_of(TOKENS[0])
            most = 0

            async def flood(count: int) -> None:
                nonlocal most
                for _ in range(count):
                    await open_session(http, srv.url, TOKENS[0])
                    most = max(most, srv.frontend.sessions.held(noisy))

            await asyncio.gather(*(flood(per_client // 8 + 1) for _ in range(8)))
            assert srv.frontend.sessions.held(noisy) == per_client
            rounds: list[float] = []
            flooding = asyncio.gather(*(flood(per_client // 8 + 1) for _ in range(8)))

            async def work(token: str) -> None:
                while not flooding.done() or len(rounds) < 10:
                    began = time.perf_counter()
                    session = await open_session(http, srv.url, token)
                    for _ in range(3):
                        answer = jsonrpc_result(
                            await in_session(http, srv.url, token, session, CALL)
                        )
                        assert answer["result"]["isError"] is False, answer
                    rounds.append(time.perf_counter() - began)

            await asyncio.gather(flooding, *(work(token) for token in TOKENS[1:]))
    assert most == per_client
    assert len(rounds) >= 10
