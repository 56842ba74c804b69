"""Replicas sharing a store refresh a user's token once: the refresh is leased in the store, the
replica holding the lease asks the vendor, and the others take the token it keeps. The vendor
here is a token endpoint on loopback that rotates refresh tokens and, as oidc-provider does,
revokes the whole grant when a used one comes back."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

from bridge.identity.authenticate import Identity
from bridge.identity.vault import UserTokens, seal
from bridge.store import Store
from bridge.user_oauth_config import UserOAuthConfig

KEY_ENV = "A2T_TEST_LEASE_KEY"
KEY = bytes(range(32))
ISSUER = "https://idp.test"
USER = ("vendor", ISSUER, "alice")


class Vendor:
    """A token endpoint that rotates refresh tokens and revokes the grant on a used one's return.
    The first refresh is answered once a second replica has either asked too or been told to
    wait (`second`), so that the two overlap whatever the scheduling."""

    def __init__(self) -> None:
        self.live = "r1"
        self.revoked = False
        self.refreshes = 0
        self.second = asyncio.Event()

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.refreshes += 1
        if self.refreshes == 1:
            await asyncio.wait_for(self.second.wait(), 10)
        else:
            self.second.set()
        if self.revoked or form.get("refresh_token") != self.live:
            self.revoked = True
            return web.json_response({"error": "invalid_grant"}, status=400)
        n = self.refreshes
        self.live = f"r{n + 1}"
        return web.json_response(
            {"access_token": f"a{n + 1}", "refresh_token": self.live, "expires_in": 3600}
        )


class WatchedStore(Store):
    """The SQLite store, telling the vendor when a claim of the refresh's lease was refused."""

    def __init__(self, path: Path, vendor: Vendor) -> None:
        super().__init__(path)
        self.vendor = vendor

    def claim_flow(self, *args: Any) -> bool:
        kept = super().claim_flow(*args)
        if not kept:
            self.vendor.second.set()
        return kept


@pytest_asyncio.fixture
async def vendor() -> AsyncIterator[tuple[Vendor, str]]:
    vendor = Vendor()
    app = web.Application()
    app.router.add_post("/token", vendor.token)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield vendor, f"http://127.0.0.1:{server.port}/token"
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_two_replicas_refresh_a_user_token_once(
    vendor: tuple[Vendor, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, base64.b64encode(KEY).decode())
    api, token_url = vendor
    config = UserOAuthConfig.model_validate(
        {
            "type": "user_oauth",
            "authorize_url": "http://127.0.0.1:1/auth",
            "token_url": token_url,
            "client_id": "bridge",
            "key_env": KEY_ENV,
        }
    )
    path = tmp_path / "bridge.db"
    stores = [WatchedStore(path, api), WatchedStore(path, api)]
    near = {"access_token": "a1", "refresh_token": "r1", "expires_at": time.time() + 5}
    stores[0].put_credential(*USER, seal(KEY, "token", USER, json.dumps(near).encode()))
    replicas = []
    for store in stores:
        tokens = UserTokens()
        tokens.store = store
        tokens.update({"vendor": config}, "http://127.0.0.1:1")
        replicas.append(tokens)
    alice = Identity(surface="default", via="jwt", subject="alice", issuer=ISSUER)
    try:
        answers = await asyncio.gather(
            *(tokens.authorization("vendor", config, alice) for tokens in replicas)
        )
    finally:
        for tokens in replicas:
            await tokens.aclose()
        for store in stores:
            store.close()
    assert answers == ["Bearer a2", "Bearer a2"]
    assert api.refreshes == 1 and not api.revoked
    assert [tokens.refreshes for tokens in replicas] in ([1, 0], [0, 1])
