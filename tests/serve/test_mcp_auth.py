"""Inbound auth and DNS-rebinding protection of the MCP endpoint over HTTP: bearer tokens bound to
surfaces (the REST API's tokens), refusals for missing or wrong tokens in both eras, sessions
bound to the token that opened them, Host and Origin checks."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx2
import pytest

from bridge.serve.mcp_gate import transport_security_for
from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import (
    ACCEPT,
    ERAS,
    HANDSHAKE,
    INITIALIZE,
    MODERN,
    MODERN_META,
    http_client,
    served_bridge,
)

DEFAULT_TOKEN = "token-default-0001"
OPS_TOKEN = "token-ops-0002"
CONFIG = {
    "server": {
        "tokens": [{"token": DEFAULT_TOKEN}, {"token": OPS_TOKEN, "surface": "ops", "name": "ops"}]
    },
    "surfaces": [
        {"name": "default", "load": ["svc__read"], "defer": ["*"]},
        {"name": "ops", "load": ["svc__*"], "allow_destructive": True},
    ],
}
MODERN_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}}
MODERN_HEADERS = {**ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}


def upstreams() -> list[FakeUpstream]:
    return [
        FakeUpstream(
            name="svc",
            tools=[tool("read", read_only=True), tool("other"), tool("wipe", destructive=True)],
        )
    ]


async def post(url: str, body: dict, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=10) as http:
        return await http.post(f"{url}/mcp", json=body, headers=headers)


@pytest.mark.parametrize("token", [None, "not-a-configured-token", "Basic abc"])
async def test_missing_or_wrong_token_is_refused_in_both_eras(token):
    headers = (
        {}
        if token is None
        else {"Authorization": token if token.startswith("Basic") else f"Bearer {token}"}
    )
    async with served_bridge(CONFIG, upstreams()) as srv:
        for body, extra in ((INITIALIZE, ACCEPT), (MODERN_LIST, MODERN_HEADERS)):
            response = await post(srv.url, body, {**extra, **headers})
            assert response.status_code == 401
            assert response.json()["error"] == "invalid_token"
            assert response.headers["www-authenticate"].startswith("Bearer ")
            assert (
                token is None or token.split()[-1] not in response.text
            )  # the token is never echoed


@pytest.mark.parametrize("era", ERAS)
async def test_tokens_pick_their_surface(era):
    async with served_bridge(CONFIG, upstreams()) as srv:
        async with http_client(srv.url, era, token=DEFAULT_TOKEN) as client:
            assert await client.names() == {"search_tools", "call_tool", "svc__read"}
        async with http_client(srv.url, era, token=OPS_TOKEN) as client:
            assert await client.names() == {"svc__read", "svc__other", "svc__wipe"}
            result = await client.call("svc__wipe", {"text": "x"})
            assert not result.is_error  # ops allows destructive tools


async def test_a_session_is_bound_to_the_token_that_opened_it():
    async with served_bridge(CONFIG, upstreams()) as srv:
        opened = await post(
            srv.url, INITIALIZE, {**ACCEPT, "Authorization": f"Bearer {DEFAULT_TOKEN}"}
        )
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        common = {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": HANDSHAKE}
        hijack = await post(srv.url, listing, {**common, "Authorization": f"Bearer {OPS_TOKEN}"})
        assert hijack.status_code == 404  # as if the session did not exist


async def test_dns_rebinding_protection_checks_host_and_origin():
    async with served_bridge({}, upstreams()) as srv:
        evil_host = await post(srv.url, INITIALIZE, {**ACCEPT, "Host": "evil.example"})
        assert evil_host.status_code == 421
        evil_origin = await post(srv.url, INITIALIZE, {**ACCEPT, "Origin": "http://evil.example"})
        assert evil_origin.status_code == 403
        fine = await post(srv.url, INITIALIZE, {**ACCEPT, "Origin": srv.url})
        assert fine.status_code == 200


async def test_a_bridge_bound_to_another_loopback_address_accepts_that_host():
    """A bind to 127.0.0.2 is loopback (no token needed) and clients name it in their Host header."""
    async with served_bridge({}, upstreams(), host="127.0.0.2") as srv:
        assert (await post(srv.url, INITIALIZE, ACCEPT)).status_code == 200
        assert (await post(srv.url, INITIALIZE, {**ACCEPT, "Host": "127.0.0.3"})).status_code == 421
    assert "localhost.:*" in transport_security_for("localhost.").allowed_hosts


def test_transport_security_for_names_and_public_url():
    loopback = transport_security_for("127.0.0.1")
    assert loopback.enable_dns_rebinding_protection and loopback.allowed_hosts == [
        "127.0.0.1:*",
        "localhost:*",
        "[::1]:*",
    ]
    named = transport_security_for("bridge.internal", "https://tools.example.com")
    assert {"bridge.internal:*", "tools.example.com", "tools.example.com:*"} <= set(
        named.allowed_hosts
    )
    assert "https://tools.example.com" in named.allowed_origins
    wildcard = transport_security_for("0.0.0.0")
    assert wildcard.enable_dns_rebinding_protection and "0.0.0.0:*" not in wildcard.allowed_hosts


async def test_a_body_that_stops_partway_is_408_and_a_chunked_one_past_the_limit_413(caplog):
    """The gate reads a POST's body before the SDK does: a client that stops sending (here with
    a valid token) is answered by the server after `body_timeout`, with nothing logged as an
    error, and a body without a Content-Length is held to `max_body_bytes` like any other."""
    config = {**CONFIG, "server": {**CONFIG["server"], "body_timeout": 0.5, "max_body_bytes": 1024}}
    authorized = {**ACCEPT, "Authorization": f"Bearer {DEFAULT_TOKEN}"}
    async with served_bridge(config, upstreams()) as srv:
        host, port = srv.url.removeprefix("http://").rsplit(":", 1)
        head = f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in authorized.items()
        )
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"{head}Content-Length: 1000\r\n\r\n".encode() + b'{"jsonrpc":"')
        async with asyncio.timeout(10):
            answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert "server.body_timeout" in error["message"]

        chunk = b"x" * 600
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) * 2 + b"0\r\n\r\n")
        async with asyncio.timeout(10):
            answer = await reader.readuntil(b"\r\n\r\n")
        writer.close()
        assert answer.startswith(b"HTTP/1.1 413"), answer
        assert (await post(srv.url, INITIALIZE, authorized)).status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
