"""RFC 8693 token exchange toward upstreams, against the real OpenID provider of tests/oidc (its
token-exchange grant registered by provider.mjs): an OpenAPI upstream (an aiohttp server that
checks the token's signature against the provider's keys and its audience) and a second bridge,
federated over A2T REST and over MCP, that is a resource server for its own audience. Each call
carries a token the provider issued for that upstream, never the caller's; the exchange is kept
until it expires; a caller without an OAuth token, and an exchange the provider refuses, get
structured errors."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bridge.config import ConfigError, parse_config
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app
from tests.adapters.a2a_fixtures.agent import build_agent
from tests.fakes import FakeUpstream, tool
from tests.identity.test_resource_server import AUDIENCE, issued
from tests.serve.rest_env import config_with, serving
from tests.servers import free_port, serve_asgi

LEDGER = "https://ledger.test"
INNER = "https://inner-bridge.test/mcp"
STATIC = "static-token-0001"
SPEC = {
    "openapi": "3.1.0",
    "info": {"title": "ledger", "version": "1"},
    "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "security": [{"bearer": []}],
    "paths": {
        "/balance": {
            "get": {
                "operationId": "balance",
                "responses": {
                    "200": {
                        "description": "the balance",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        }
    },
}


class Ledger:
    """An OpenAPI server that accepts only access tokens of the provider for its audience."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        with urllib.request.urlopen(f"{issuer}/jwks", timeout=10) as response:
            self.keys = {key["kid"]: jwt.PyJWK(key) for key in json.loads(response.read())["keys"]}
        self.seen: list[str] = []  # the Authorization headers of the calls
        self.claims: list[dict[str, Any]] = []
        self.refuse_next = False  # answer the next call 401, as for a token revoked

    async def balance(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        self.seen.append(header)
        if self.refuse_next:
            self.refuse_next = False
            return web.json_response({"error": "revoked"}, status=401)
        token = header.removeprefix("Bearer ")
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            claims = jwt.decode(
                token, self.keys[kid].key, algorithms=["RS256"], audience=LEDGER, issuer=self.issuer
            )
        except (jwt.PyJWTError, KeyError) as exc:
            return web.json_response({"error": str(exc)}, status=401)
        self.claims.append(claims)
        return web.json_response({"balance": 42, "for": claims["sub"]})

    async def spec(self, request: web.Request) -> web.Response:
        return web.json_response(SPEC)


@pytest.fixture
async def ledger(provider: str) -> AsyncIterator[tuple[Ledger, str]]:
    found = Ledger(provider)
    app = web.Application()
    app.router.add_get("/balance", found.balance)
    app.router.add_get("/openapi.json", found.spec)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    port = server.port
    try:
        yield found, f"http://127.0.0.1:{port}"
    finally:
        await server.close()


def oauth(issuer: str, audience: str = AUDIENCE) -> dict[str, Any]:
    return {
        "issuer": issuer,
        "audience": audience,
        "client_id": "bridge-rs",
        "client_secret": "bridge-rs-secret",
        "keys_refetch_interval": 0,
    }


def exchanges(issuer: str) -> int:
    with urllib.request.urlopen(f"{issuer}/test/exchanges", timeout=10) as response:
        return json.loads(response.read())["exchanges"]


def ledger_config(issuer: str, base: str, audience: str = LEDGER) -> dict[str, Any]:
    return config_with(
        server={"tokens": [{"token": STATIC, "name": "ops"}], "oauth": oauth(issuer)},
        upstreams=[
            {
                "name": "ledger",
                "kind": "openapi",
                "spec": f"{base}/openapi.json",
                "base_url": base,
                "auth": {"type": "token_exchange", "audience": audience},
            }
        ],
    )


async def test_each_call_carries_a_token_exchanged_for_the_upstream_and_kept(provider, ledger):
    api, base = ledger
    caller = issued(provider)
    before = exchanges(provider)
    async with serving(config=ledger_config(provider, base)) as served:
        for _ in range(2):
            status, body, _ = await served.post(
                "/invoke", {"tool": "ledger__balance", "arguments": {}}, token=caller
            )
            assert status == 200, body
            assert body["structured_content"] == {"balance": 42, "for": "bridge-cc"}
        assert exchanges(provider) - before == 1  # the second call used the token kept
        # a token the upstream refuses is not used again: the next call exchanges anew
        api.refuse_next = True
        status, body, _ = await served.post(
            "/invoke", {"tool": "ledger__balance", "arguments": {}}, token=caller
        )
        assert status == 403 and body["error"]["error_class"] == "credential_missing", body
        status, body, _ = await served.post(
            "/invoke", {"tool": "ledger__balance", "arguments": {}}, token=caller
        )
        assert status == 200, body
        assert exchanges(provider) - before == 2
        status, body, _ = await served.post(
            "/invoke", {"tool": "ledger__balance", "arguments": {}}, token=STATIC
        )
        assert status == 403 and body["error"]["error_class"] == "credential_missing"
        assert "OAuth access token" in body["error"]["message"]
    assert len(api.claims) == 3
    claims = api.claims[0]
    assert (
        claims["aud"] == LEDGER
        and claims["sub"] == "bridge-cc"
        and claims["act"] == {"sub": "bridge-rs"}
    )
    assert all(caller not in seen for seen in api.seen)


async def test_an_exchange_the_provider_refuses_is_permission_denied(provider, ledger):
    _, base = ledger
    async with serving(
        config=ledger_config(provider, base, audience="https://refused.test")
    ) as served:
        status, body, _ = await served.post(
            "/invoke", {"tool": "ledger__balance", "arguments": {}}, token=issued(provider)
        )
    assert status == 403
    assert body["error"]["error_class"] == "permission_denied"
    assert body["error"]["error_code"] == "token_exchange_refused"
    assert "invalid_target" in body["error"]["message"]


async def test_a_bridge_federating_a_bridge_exchanges_for_its_audience_over_a2t_and_mcp(provider):
    inner = Bridge(
        parse_config(config_with(server={"oauth": oauth(provider, INNER)})),
        extra_upstreams=[FakeUpstream(name="svc", tools=[tool("echo")])],
    )
    await inner.start()
    app = build_app(inner)
    try:
        async with serve_asgi(app) as inner_base:
            # the outer bridge lists the inner one with a token of its own for the inner audience
            listing = issued(provider, resource=INNER)
            header = {"Authorization": f"Bearer {listing}"}
            exchange = {"type": "token_exchange", "resource": INNER}
            config = config_with(
                server={"oauth": oauth(provider)},
                upstreams=[
                    {
                        "name": "rest",
                        "kind": "a2t",
                        "url": inner_base,
                        "headers": header,
                        "auth": exchange,
                    },
                    {
                        "name": "mcp",
                        "kind": "mcp",
                        "url": f"{inner_base}/mcp",
                        "headers": header,
                        "auth": exchange,
                    },
                ],
            )
            caller = issued(provider, groups="outer")
            async with serving(config=config) as served:
                for name in ("rest__svc__echo", "mcp__svc__echo"):
                    status, body, _ = await served.post(
                        "/invoke", {"tool": name, "arguments": {"text": "hi"}}, token=caller
                    )
                    assert status == 200, body
            inner.invoker.flush_log()
            rows = inner.store.recent_invocations()
    finally:
        await close_app(app)
        await inner.close()
    # the inner bridge saw the exchanged token's caller (the subject, the exchanging client)
    assert sorted((r["subject"], r["client_id"]) for r in rows) == [("bridge-cc", "bridge-rs")] * 2


async def test_an_a2a_agent_is_called_with_a_token_exchanged_for_it(provider):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    app, control = build_agent(base, bearer="never-configured")
    control.required_bearer = None  # the card asks for a bearer; the agent records what it gets
    async with serve_asgi(app, port=port):
        config = config_with(
            server={"oauth": oauth(provider)},
            upstreams=[
                {
                    "name": "agent",
                    "kind": "a2a",
                    "base_url": base,
                    "auth": {"type": "token_exchange", "audience": base},
                    "timeout": 1.0,
                }
            ],
        )
        caller = issued(provider)
        async with serving(config=config) as served:
            status, body, _ = await served.post(
                "/invoke",
                {"tool": "agent__echo", "arguments": {"message": "hi"}},
                token=caller,
            )
            # a call that times out cancels its task at the agent, with the same token
            _, late, _ = await served.post(
                "/invoke",
                {"tool": "agent__wait", "arguments": {"message": "hold"}},
                token=caller,
            )
            async with asyncio.timeout(5):
                await control.cancel_seen.wait()
    assert status == 200, body["error"]
    assert late["error"]["error_class"] == "timeout"
    sent = [r["headers"].get("authorization", "") for r in control.requests]
    calls = [h for r, h in zip(control.requests, sent, strict=True) if r["path"] == "/"]
    assert calls and all(h.startswith("Bearer ") for h in calls)
    claims = jwt.decode(calls[0].removeprefix("Bearer "), options={"verify_signature": False})
    assert claims["aud"] == base and claims["sub"] == "bridge-cc"
    assert all(caller not in h for h in sent)
    cancels = [h for r, h in zip(control.requests, sent, strict=True) if b"CancelTask" in r["body"]]
    assert cancels and cancels[0] == calls[0]


def test_a_token_exchange_on_a_command_without_audience_or_over_http_is_a_config_error():
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {
                "upstreams": [
                    {
                        "name": "cli",
                        "kind": "mcp",
                        "command": "true",
                        "auth": {"type": "token_exchange", "audience": "x"},
                    },
                    {
                        "name": "api",
                        "kind": "openapi",
                        "spec": "x.yaml",
                        "auth": [{"type": "token_exchange"}],
                    },
                    {
                        "name": "plain",
                        "kind": "a2t",
                        "url": "http://127.0.0.1:9",
                        "auth": {
                            "type": "token_exchange",
                            "audience": "x",
                            "token_url": "http://idp.example/token",
                        },
                    },
                ]
            }
        )
    text = str(caught.value)
    assert "upstreams[0].auth.type: a token exchange gives HTTP requests a header" in text
    assert "upstreams[1].auth[0]: a token exchange needs the upstream it is for" in text
    assert "upstreams[2].auth.token_url: token_url 'http://idp.example/token' is no https" in text


async def test_without_oauth_a_token_exchange_is_a_config_error():
    with pytest.raises(ConfigError) as caught:
        parse_config(
            config_with(
                upstreams=[
                    {
                        "name": "api",
                        "kind": "a2t",
                        "url": "http://127.0.0.1:9",
                        "auth": {"type": "token_exchange", "audience": "x"},
                    }
                ]
            )
        )
    assert "upstreams[0].auth: exchanges the caller's OAuth access token" in str(caught.value)
