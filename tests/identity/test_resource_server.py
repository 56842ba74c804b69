"""The bridge as an OAuth resource server, over REST and /mcp, against a real OpenID provider
(`oidc-provider`, started on loopback by tests/oidc/provider.mjs) for what it issues: discovery,
JWT access tokens for the bridge's audience (client credentials with a resource indicator),
another audience, rotated keys, opaque tokens through introspection, a `groups` claim choosing
the surface, a missing scope. Tokens no provider issues on demand (expired, not yet valid,
another issuer, a bad signature, an unknown kid, `alg: none`, HS256 signed with the public key)
are signed here with keys the test holds, served as an issuer's metadata and JWKS by a second
small server on loopback."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import HANDSHAKE, http_client
from tests.serve.rest_env import config_with, serving

AUDIENCE = "https://bridge.test/mcp"
STATIC = "static-token-0001"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": HANDSHAKE,
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


# ----------------------------------------------------------------------------- the provider


def _post(url: str, form: dict[str, str], auth: tuple[str, str] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    if auth:
        request.add_header(
            "Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def issued(
    issuer: str,
    *,
    client: str = "bridge-cc",
    scope: str = "tools",
    resource: str = AUDIENCE,
    groups: str | None = None,
) -> str:
    """An access token from the provider's token endpoint (client credentials, resource indicator)."""
    form = {"grant_type": "client_credentials", "scope": scope, "resource": resource}
    if groups:
        form["groups"] = groups
    return _post(f"{issuer}/token", form, (client, f"{client}-secret"))["access_token"]


# ----------------------------------------------------------------------------- our own issuer


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _public_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}


class OwnIssuer:
    """Metadata and a JWKS served on loopback for keys the test holds."""

    def __init__(self) -> None:
        self.key, self.other_key = _rsa(), _rsa()
        self.keys = [_public_jwk(self.key, "k1")]
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks"}
                elif self.path == "/jwks":
                    body = {"keys": issuer.keys}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def sign(
        self,
        *,
        key: rsa.RSAPrivateKey | None = None,
        kid: str = "k1",
        alg: str = "RS256",
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": "alice",
            "client_id": "own-client",
            "scope": "tools",
            "iat": now,
            "exp": now + 300,
            **claims,
        }
        return jwt.encode(payload, key or self.key, algorithm=alg, headers={"kid": kid})

    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@pytest.fixture(scope="module")
def own() -> Iterator[OwnIssuer]:
    issuer = OwnIssuer()
    yield issuer
    issuer.server.shutdown()
    issuer.server.server_close()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unsigned(own: OwnIssuer) -> str:
    """`alg: none`: a valid payload and no signature."""
    header = _b64(json.dumps({"alg": "none", "kid": "k1"}).encode())
    payload = json.loads(base64.urlsafe_b64decode(own.sign().split(".")[1] + "=="))
    return f"{header}.{_b64(json.dumps(payload).encode())}."


def hs256_with_public_key(own: OwnIssuer) -> str:
    """Algorithm confusion: HS256 whose secret is the issuer's public key (PEM), which a verifier
    that takes the header's word for the algorithm would accept."""
    header = _b64(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
    payload = own.sign().split(".")[1]
    signature = hmac.new(own.public_pem(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


# ----------------------------------------------------------------------------- the bridge


def upstream() -> FakeUpstream:
    return FakeUpstream(
        name="svc", tools=[tool("read", read_only=True), tool("ledger", read_only=True)]
    )


def bridge_config(issuer: str, **oauth: Any) -> dict[str, Any]:
    return config_with(
        server={
            "tokens": [{"token": STATIC, "name": "ops-script"}],
            "oauth": {
                "issuer": issuer,
                "audience": AUDIENCE,
                "scopes_required": ["tools"],
                "surface_claim": "groups",
                "surfaces": {"finance-team": "finance", "everyone": "default"},
                "keys_refetch_interval": 0,
                **oauth,
            },
        },
        surfaces=[
            {"name": "default", "load": ["svc__read"], "block": [{"name": "svc__ledger"}]},
            {"name": "finance", "load": ["svc__*"]},
        ],
    )


async def invoke(served: Any, token: str, name: str = "svc__read") -> tuple[int, Any, Any]:
    return await served.post("/invoke", {"tool": name, "arguments": {"text": "x"}}, token=token)


async def mcp_status(served: Any, token: str) -> tuple[int, httpx2.Response]:
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(
            f"{served.base}/mcp",
            json=INITIALIZE,
            headers={**ACCEPT, "Authorization": f"Bearer {token}"},
        )
    return response.status_code, response


def logged(served: Any) -> list[dict[str, Any]]:
    served.bridge.invoker.flush_log()
    return served.bridge.store.recent_invocations()


# ----------------------------------------------------------------------------- the tests


async def test_discovery_and_the_challenge_name_the_resource_metadata(provider):
    async with serving(upstream(), config=bridge_config(provider)) as served:
        for path in (
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp",
        ):
            status, body, _ = await served.get(path)
            assert status == 200
            assert body == {
                "resource": AUDIENCE,
                "authorization_servers": [provider],
                "bearer_methods_supported": ["header"],
                "resource_name": "a2t-bridge",
                "scopes_supported": ["tools"],
            }
        status, body, response = await served.post(
            "/invoke", {"tool": "svc__read", "arguments": {}}
        )
        assert status == 401
        challenge = response.headers["WWW-Authenticate"]
        assert (
            challenge.startswith("Bearer ") and "error=" not in challenge
        )  # no token sent: no error (RFC 6750 3.1)
        assert (
            f'resource_metadata="{served.base}/.well-known/oauth-protected-resource"' in challenge
        )
        assert 'scope="tools"' in challenge
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.post(f"{served.base}/mcp", json=INITIALIZE, headers=ACCEPT)
        assert response.status_code == 401
        assert (
            f'resource_metadata="{served.base}/.well-known/oauth-protected-resource/mcp"'
            in response.headers["www-authenticate"]
        )


async def test_without_oauth_the_metadata_is_no_route():
    async with serving(upstream()) as served:
        status, body, _ = await served.get("/.well-known/oauth-protected-resource")
        assert status == 404 and body["error"]["error_code"] == "route_not_found"


async def test_a_providers_token_is_accepted_over_rest_and_mcp_and_its_caller_logged(
    provider, caplog
):
    caplog.set_level(logging.DEBUG)
    token = issued(provider)
    async with serving(upstream(), config=bridge_config(provider)) as served:
        status, body, _ = await invoke(served, token)
        assert status == 200, body
        async with http_client(served.base, HANDSHAKE, token=token) as client:
            assert await client.names() == {"svc__read"}  # no group: the default surface
            result = await client.call("svc__read", {"text": "x"})
            assert not result.is_error
        status, _, _ = await invoke(served, STATIC)  # the static tokens keep working beside
        assert status == 200
        rows = logged(served)
    callers = sorted((str(r["subject"]), str(r["client_id"])) for r in rows)
    assert callers == [
        ("None", "ops-script"),
        ("bridge-cc", "bridge-cc"),
        ("bridge-cc", "bridge-cc"),
    ]
    assert token not in caplog.text and token not in json.dumps(rows)


async def test_a_group_claim_chooses_the_surface(provider):
    finance = issued(
        provider, groups="everyone,finance-team"
    )  # two matches: the first the config lists wins
    plain = issued(provider, groups="everyone")
    async with serving(upstream(), config=bridge_config(provider)) as served:
        assert (await invoke(served, finance, "svc__ledger"))[0] == 200
        assert (await invoke(served, plain, "svc__ledger"))[
            0
        ] == 404  # hidden on the default surface
        async with http_client(served.base, HANDSHAKE, token=finance) as client:
            assert await client.names() == {"svc__read", "svc__ledger"}


async def test_another_audience_and_a_missing_scope_are_refused(provider):
    elsewhere = issued(provider, resource="https://other.test/api")
    admin_only = issued(provider, scope="admin")
    async with serving(upstream(), config=bridge_config(provider)) as served:
        status, body, response = await invoke(served, elsewhere)
        assert status == 401 and body["error"]["error_code"] == "invalid_token"
        assert "audience" in body["error"]["message"]
        assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
        status, body, response = await invoke(served, admin_only)
        assert status == 403 and body["error"]["error_code"] == "insufficient_scope"
        assert 'error="insufficient_scope"' in response.headers["WWW-Authenticate"]
        assert 'scope="tools"' in response.headers["WWW-Authenticate"]
        assert (await mcp_status(served, elsewhere))[0] == 401
        status, response = await mcp_status(served, admin_only)
        assert status == 403 and response.json()["error"] == "insufficient_scope"


async def test_keys_the_provider_rotates_in_are_taken_without_a_restart(provider):
    async with serving(upstream(), config=bridge_config(provider)) as served:
        assert (await invoke(served, issued(provider)))[0] == 200  # the key set is fetched and kept
        _post(f"{provider}/test/rotate", {})
        rotated = issued(provider)
        assert (await invoke(served, rotated))[0] == 200  # an unknown kid fetched the set again
        assert (await mcp_status(served, rotated))[0] == 200


async def test_an_opaque_token_is_introspected_and_its_answer_kept(provider):
    opaque = issued(provider, client="bridge-opaque", groups="finance-team")
    assert "." not in opaque
    config = bridge_config(provider, client_id="bridge-rs", client_secret="bridge-rs-secret")
    async with serving(upstream(), config=config) as served:
        assert (await invoke(served, opaque, "svc__ledger"))[0] == 200
        assert (await mcp_status(served, opaque))[0] == 200
        status, body, _ = await invoke(served, "not-a-token-the-provider-issued")
        assert status == 401 and "not active" in body["error"]["message"]
        checks = served.bridge.identity._oauth
        assert checks is not None and checks.introspection is not None
        assert len(checks.introspection._answers) == 2
    async with serving(
        upstream(), config=bridge_config(provider)
    ) as served:  # no introspection client
        status, body, _ = await invoke(served, opaque)
        assert status == 401 and "no JWT" in body["error"]["message"]


def bad_tokens(own: OwnIssuer) -> dict[str, str]:
    now = int(time.time())
    good = own.sign()
    head, payload, signature = good.split(".")
    return {
        "expired": own.sign(exp=now - 120, iat=now - 600),
        "not yet valid": own.sign(nbf=now + 600),
        "wrong issuer": own.sign(iss="https://impostor.test"),
        "wrong audience": own.sign(aud="https://other.test"),
        "bad signature": f"{head}.{payload}.{signature[:-6]}AAAAAA",
        "signed by another key": own.sign(key=own.other_key),
        "unknown kid": own.sign(key=own.other_key, kid="k-unknown"),
        "alg none": unsigned(own),
        "HS256 with the public key": hs256_with_public_key(own),
        "20 KB": own.sign(padding="x" * 20_000),
        "garbage": "a.b.c",
    }


async def test_bad_tokens_are_refused_with_401_never_500_and_never_echoed(own, caplog):
    caplog.set_level(logging.DEBUG)
    async with serving(upstream(), config=bridge_config(own.url)) as served:
        assert (await invoke(served, own.sign()))[
            0
        ] == 200  # the issuer is right: only each flaw refuses
        assert (
            await invoke(
                served, own.sign(sub="bob", scope="tools", groups=["finance-team"]), "svc__ledger"
            )
        )[0] == 200
        for case, token in bad_tokens(own).items():
            status, body, response = await invoke(served, token)
            assert status == 401, (case, body)
            assert body["error"]["error_code"] == "invalid_token", case
            assert 'error="invalid_token"' in response.headers["WWW-Authenticate"], case
            status, response = await mcp_status(served, token)
            assert status == 401 and response.json()["error"] == "invalid_token", case
            assert token not in json.dumps(body) and token not in response.text, case
        rows = logged(served)
    assert {(r["subject"], r["client_id"]) for r in rows} == {
        ("alice", "own-client"),
        ("bob", "own-client"),
    }
    for token in bad_tokens(own).values():
        assert token[-40:] not in caplog.text


async def test_a_key_rotated_in_at_our_issuer_is_taken_and_one_withdrawn_refused(own):
    async with serving(upstream(), config=bridge_config(own.url)) as served:
        assert (await invoke(served, own.sign()))[0] == 200
        own.keys = [_public_jwk(own.other_key, "k2"), _public_jwk(own.key, "k1")]
        try:
            assert (await invoke(served, own.sign(key=own.other_key, kid="k2")))[0] == 200
        finally:
            own.keys = [_public_jwk(own.key, "k1")]


async def test_an_unreachable_issuer_answers_503_not_500():
    async with serving(upstream(), config=bridge_config("http://127.0.0.1:9")) as served:
        token = jwt.encode({"sub": "x"}, _rsa(), algorithm="RS256", headers={"kid": "k"})
        status, body, response = await invoke(served, token)
        assert status == 503 and body["error"]["error_class"] == "dependency_unavailable"
        assert response.headers["Retry-After"]
        assert (await mcp_status(served, token))[0] == 503
