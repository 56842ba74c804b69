"""Users' own accounts at an upstream (`auth: {type: user_oauth}`), end to end against the real
OpenID provider of tests/oidc acting as the vendor's authorization server (its `vendor-app`
client): a call without an account answers credential_missing with a connect link; the test's
browser follows it through the provider's login and consent; the callback keeps the user's
token sealed in the store; the call then reaches the vendor's API (an aiohttp server checking
the token against the provider's keys) with that user's token. A second user has none; a token
near its expiry is refreshed first; a state is taken once; over MCP a client that takes URLs is
asked to connect instead of failing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import httpx2
import jwt
import mcp.types as types
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from bridge.config import ConfigError, load_config, parse_config
from bridge.identity.vault import seal, unseal
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app
from tests.identity.test_resource_server import AUDIENCE, issued
from tests.serve.mcp_support import HANDSHAKE, MODERN
from tests.serve.rest_env import config_with
from tests.servers import free_port, serve_asgi

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

VENDOR = "https://vendor.test"
KEY_ENV = "A2T_TEST_CREDENTIAL_KEY"
STATIC = "static-token-0001"
KEY = base64.b64encode(bytes(range(32))).decode()
SPEC = {
    "openapi": "3.1.0",
    "info": {"title": "vendor", "version": "1"},
    "paths": {
        "/me": {
            "get": {
                "operationId": "me",
                "responses": {
                    "200": {
                        "description": "who the token is of",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        }
    },
}


class VendorApi:
    """The vendor's API: answers who the bearer token is of, if the provider issued it for
    VENDOR; keeps the tokens it was sent."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        with urllib.request.urlopen(f"{issuer}/jwks", timeout=10) as response:
            self.keys = {key["kid"]: jwt.PyJWK(key) for key in json.loads(response.read())["keys"]}
        self.tokens: list[str] = []
        self.revoked: set[str] = set()  # tokens answered 401, as a vendor answers revoked ones

    async def me(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.tokens.append(token)
        if token in self.revoked:
            return web.json_response({"error": "token revoked"}, status=401)
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            claims = jwt.decode(
                token, self.keys[kid].key, algorithms=["RS256"], audience=VENDOR, issuer=self.issuer
            )
        except (jwt.PyJWTError, KeyError) as exc:
            return web.json_response({"error": str(exc)}, status=401)
        return web.json_response({"login": claims["sub"]})

    async def spec(self, request: web.Request) -> web.Response:
        return web.json_response(SPEC)


class Env:
    def __init__(self, bridge: Bridge, base: str, api: VendorApi) -> None:
        self.bridge, self.base, self.api = bridge, base, api

    async def invoke(self, tool: str, token: str) -> tuple[int, dict[str, Any]]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{self.base}/invoke",
                json={"tool": tool, "arguments": {}},
                headers={"Authorization": f"Bearer {token}"},
            ) as response,
        ):
            return response.status, await response.json()

    def stored(self, upstream: str, subject: str) -> bytes | None:
        return self.bridge.store.get_credential(upstream, self.issuer, subject)

    @property
    def issuer(self) -> str:
        return self.api.issuer


def user_oauth(issuer: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "user_oauth",
        "authorize_url": f"{issuer}/auth",
        "token_url": f"{issuer}/token",
        "client_id": "vendor-app",
        "client_secret": "vendor-app-secret",
        "scopes": ["openid", "tools"],
        "resource": VENDOR,
        "key_env": KEY_ENV,
        **extra,
    }


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(provider: str) -> AsyncIterator[Env]:
    os.environ[KEY_ENV] = KEY
    api = VendorApi(provider)
    app = web.Application()
    app.router.add_get("/me", api.me)
    app.router.add_get("/openapi.json", api.spec)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    bound = server.port
    vendor = f"http://127.0.0.1:{bound}"
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    upstreams = [
        {
            "name": name,
            "kind": "openapi",
            "spec": f"{vendor}/openapi.json",
            "base_url": vendor,
            "auth": user_oauth(provider),
        }
        for name in ("rest", "refresh", "ask", "ask_modern", "other", "revoked")
    ]
    config = config_with(
        server={
            "public_url": public,
            "tokens": [{"token": STATIC, "name": "ops"}],
            "oauth": {
                "issuer": provider,
                "audience": AUDIENCE,
                "client_id": "bridge-rs",  # users who open a connect link sign in with it
                "client_secret": "bridge-rs-secret",
            },
        },
        upstreams=upstreams,
    )
    bridge = Bridge(parse_config(config))
    await bridge.start()
    served = build_app(bridge)
    try:
        async with serve_asgi(served, port=port, server=bridge.config.server) as base:
            yield Env(bridge, base, api)
    finally:
        await close_app(served)
        await bridge.close()
        await server.close()
        del os.environ[KEY_ENV]


async def follow(url: str, login: str, user: str = "bridge-cc") -> tuple[str, int, str]:
    """A browser at `url` (a connect link) that signs in at the provider as the bridge's `user`,
    then as `login` at the vendor (the same provider), consenting each time, up to the bridge's
    callback: (the callback URL, its status, its body)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        for _ in range(20):
            path = urlsplit(url).path
            if "/interaction/" in path:
                async with browser.get(url) as response:
                    asked = await response.json()
                step = "login" if asked["prompt"] == "login" else "confirm"
                name = user if asked["client_id"] == "bridge-rs" else login
                form = {"login": name} if step == "login" else {}
                async with browser.post(f"{url}/{step}", data=form, allow_redirects=False) as r:
                    assert r.status in (302, 303), await r.text()
                    url = urljoin(url, r.headers["Location"])
                continue
            async with browser.get(url, allow_redirects=False) as response:
                if path == "/oauth/callback" or response.status not in (302, 303):
                    return url, response.status, await response.text()
                url = urljoin(url, response.headers["Location"])
            if path == "/oauth/signed-in":
                # the bridge's identity provider and the vendor are two sites: no shared session
                browser.cookie_jar.clear()
    raise AssertionError("the flow did not reach the callback")


async def connected(env: Env, upstream: str, token: str, login: str) -> str:
    """Connect `login`'s account at `upstream` for the caller of `token`; the callback's URL."""
    status, body = await env.invoke(f"{upstream}__me", token)
    assert status == 403, body
    callback, status, page = await follow(body["error"]["details"]["connect_url"], login)
    assert status == 200 and "connected" in page, page
    return callback


def record(env: Env, upstream: str, subject: str) -> dict[str, Any]:
    sealed = env.stored(upstream, subject)
    assert sealed is not None
    opened = unseal(base64.b64decode(KEY), "token", (upstream, env.issuer, subject), sealed)
    assert opened is not None
    return json.loads(opened)


async def test_a_user_connects_an_account_and_calls_with_their_own_token(env: Env, caplog):
    caplog.set_level(logging.DEBUG)
    first, second = issued(env.issuer), issued(env.issuer, client="bridge-cc2")
    status, body = await env.invoke("rest__me", first)
    assert status == 403, body
    error = body["error"]
    assert error["error_class"] == "credential_missing"
    assert error["error_code"] == "account_not_connected"
    link = error["details"]["connect_url"]
    assert link.startswith(f"{env.base}/oauth/connect?ticket=") and link in error["message"]
    assert env.api.tokens == []  # the vendor was not called
    callback, status, page = await follow(link, "alice")
    assert status == 200, page
    sealed = env.stored("rest", "bridge-cc")
    kept = record(env, "rest", "bridge-cc")
    assert sealed is not None and kept["access_token"].encode() not in sealed
    assert kept["refresh_token"].encode() not in sealed
    status, body = await env.invoke("rest__me", first)
    assert status == 200, body
    assert body["structured_content"] == {"login": "alice"}
    assert env.api.tokens[-1] == kept["access_token"]
    assert kept["access_token"] not in json.dumps(body)
    # the other user has no account connected: not the first one's
    status, body = await env.invoke("rest__me", second)
    assert status == 403 and body["error"]["error_code"] == "account_not_connected"
    assert env.stored("rest", "bridge-cc2") is None
    assert first not in env.api.tokens and second not in env.api.tokens
    # a caller that is no OAuth user has no account to keep
    status, body = await env.invoke("rest__me", STATIC)
    assert status == 403 and body["error"]["error_code"] == "caller_token_required"
    # a state is taken once; one the bridge never gave, or none, is refused; so is a used link
    async with aiohttp.ClientSession() as http:
        for url in (callback, f"{env.base}/oauth/callback?state=forged&code=x", link):
            async with http.get(url, allow_redirects=False) as response:
                assert response.status == 400, url
                refused = (await response.json())["error"]
                assert refused["error_code"] in ("invalid_state", "unknown_connect_link")
    assert record(env, "rest", "bridge-cc")["access_token"] == kept["access_token"]
    said = caplog.text
    assert all(t not in said for t in (first, second, kept["access_token"], kept["refresh_token"]))
    assert link.split("ticket=")[1] not in said


async def test_a_link_opened_by_another_user_connects_nothing(env: Env):
    caller = issued(env.issuer, client="bridge-cc2")
    status, body = await env.invoke("other__me", caller)
    assert status == 403, body
    link = body["error"]["details"]["connect_url"]
    _, status, page = await follow(link, "mallory", user="bridge-cc")  # not the link's user
    assert status == 403 and json.loads(page)["error"]["error_code"] == "another_user", page
    assert env.stored("other", "bridge-cc2") is None
    status, body = await env.invoke("other__me", caller)
    assert status == 403 and body["error"]["error_code"] == "account_not_connected"


async def test_a_token_near_its_expiry_is_refreshed_before_the_call(env: Env):
    caller = issued(env.issuer)
    await connected(env, "refresh", caller, "bob")
    kept = record(env, "refresh", "bridge-cc")
    # within refresh_margin (60 s) of its expiry: the next call refreshes it first
    near = {**kept, "expires_at": time.time() + 10}
    key = base64.b64decode(KEY)
    soon = seal(key, "token", ("refresh", env.issuer, "bridge-cc"), json.dumps(near).encode())
    env.bridge.store.put_credential("refresh", env.issuer, "bridge-cc", soon)
    before = env.bridge.admission.user_tokens.refreshes
    answers = await asyncio.gather(*(env.invoke("refresh__me", caller) for _ in range(3)))
    for status, body in answers:
        assert status == 200 and body["structured_content"] == {"login": "bob"}, body
    assert env.bridge.admission.user_tokens.refreshes == before + 1  # one for the three calls
    fresh = record(env, "refresh", "bridge-cc")
    assert fresh["access_token"] != kept["access_token"]
    assert fresh["expires_at"] > time.time() + 200
    assert env.api.tokens[-3:] == [fresh["access_token"]] * 3


async def test_a_token_the_vendor_refuses_is_refreshed_before_the_next_call(env: Env):
    caller = issued(env.issuer)
    await connected(env, "revoked", caller, "dave")
    kept = record(env, "revoked", "bridge-cc")
    env.api.revoked.add(kept["access_token"])
    status, body = await env.invoke("revoked__me", caller)
    assert status == 403 and body["error"]["error_class"] == "credential_missing", body
    assert kept["access_token"] not in json.dumps(body)
    assert record(env, "revoked", "bridge-cc")["expires_at"] == 0
    status, body = await env.invoke("revoked__me", caller)
    assert status == 200 and body["structured_content"] == {"login": "dave"}, body
    assert env.api.tokens[-1] == record(env, "revoked", "bridge-cc")["access_token"]
    assert env.api.tokens[-1] != kept["access_token"]


@contextlib.asynccontextmanager
async def mcp_client(base: str, era: str, token: str, answer: Any) -> AsyncIterator[Any]:
    """A client of `era` that declares elicitation (form and URL), answered by `answer`."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=30)) as http:
        transport = streamable_http_client(f"{base}/mcp", http_client=http)
        if era == MODERN:
            async with Client(transport, mode=MODERN, cache=None, elicitation_callback=answer) as c:
                yield c
        else:
            async with (
                transport as (read, write),
                ClientSession(read, write, elicitation_callback=answer) as session,
            ):
                await session.initialize()
                yield session


@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
async def test_over_mcp_a_client_taking_urls_is_asked_to_connect_and_the_call_goes_on(
    env: Env, era: str
):
    """A 2025-11-25 client is sent the question during the call; a 2026-07-28 client gets it
    as an input_required result, and its retry with the answer resumes the call."""
    asked: list[types.ElicitRequestURLParams] = []
    upstream = "ask" if era == HANDSHAKE else "ask_modern"

    async def connect_in_browser(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        await follow(params.url, "carol")
        return types.ElicitResult(action="accept")

    async def decline(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="decline")

    results = []
    for client, answer in (("bridge-cc", connect_in_browser), ("bridge-cc2", decline)):
        token = issued(env.issuer, client=client)
        async with mcp_client(env.base, era, token, answer) as session:
            results.append(await session.call_tool(f"{upstream}__me", {}))
    done, declined = results
    assert not done.is_error, done.content
    assert done.structured_content == {"login": "carol"}
    assert [p.mode for p in asked] == ["url", "url"]
    assert all(p.url.startswith(f"{env.base}/oauth/connect?ticket=") for p in asked)
    assert declined.is_error
    # the record is in the bridge's `_meta` entry: the tool was listed with an output schema
    record = declined.structured_content or (declined.meta or {})["a2t-bridge/result"]
    error = record["error"]
    assert error["error_class"] == "credential_missing"
    assert error["details"]["connect_url"] == asked[1].url


async def test_a_missing_or_malformed_key_or_no_public_url_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("A2T_TEST_SHORT_KEY", base64.b64encode(b"short").decode())
    issuer = "https://login.example.com"
    source = tmp_path / "bridge.yaml"
    entries = [
        {"name": f"u{i}", "kind": "a2t", "url": "https://a.example.com", "auth": auth}
        for i, auth in enumerate(
            [
                user_oauth(issuer),
                user_oauth(issuer, key_env="A2T_TEST_SHORT_KEY"),
                user_oauth(issuer, token_url="http://vendor.example.com/token"),
            ]
        )
    ]
    source.write_text(
        json.dumps(
            config_with(
                server={"oauth": {"issuer": issuer, "audience": AUDIENCE}}, upstreams=entries
            )
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_config(source)
    text = str(caught.value)
    assert str(source) in text
    assert f"upstreams[0].auth.key_env: the environment variable {KEY_ENV} is not set" in text
    assert (
        "upstreams[1].auth.key_env: the environment variable A2T_TEST_SHORT_KEY holds 5 bytes"
        in text
    )
    assert "openssl rand -base64 32" in text
    assert (
        "upstreams[2].auth.token_url: token_url 'http://vendor.example.com/token' is no https"
        in text
    )
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(ConfigError) as caught:
        parse_config(
            config_with(
                server={"oauth": {"issuer": issuer, "audience": AUDIENCE}},
                upstreams=[entries[0]],
            )
        )
    assert "upstreams[0].auth: sends users to the vendor" in str(caught.value)
    assert "set server.public_url" in str(caught.value)
    assert "upstreams[0].auth.verify_user: the user who opens a connect link signs in" in str(
        caught.value
    )
