"""The bridge as an OAuth client (bridge/identity/vault.py, bridge/identity/exchange.py):
authorization requests with PKCE, requests to a token endpoint, and the issuers and HTTP session
they are sent with."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus, urlencode

from bridge.identity.issuer import FETCH_TIMEOUT, MAX_DOCUMENT_BYTES, Issuer
from bridge.model import BridgeError

if TYPE_CHECKING:
    import aiohttp

__all__ = ["IssuerClients", "authorization_url", "new_pkce", "token_request"]


class IssuerClients:
    """The issuers an OAuth client reads (metadata and keys, each kept once by URL) and the HTTP
    session it asks them and token endpoints over, made on first use: aiohttp loads then, since
    most servers never act as a client."""

    def __init__(self) -> None:
        self._issuers: dict[str, Issuer] = {}
        self._http: aiohttp.ClientSession | None = None

    def issuer(self, url: str) -> Issuer:
        known = self._issuers.get(url)
        if known is None:
            known = self._issuers[url] = Issuer(url)
        return known

    def session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT))
        return self._http

    async def aclose(self) -> None:
        for issuer in self._issuers.values():
            await issuer.aclose()
        self._issuers.clear()
        if self._http is not None:
            await self._http.close()
            self._http = None


def new_pkce() -> tuple[str, str]:
    """(state, PKCE code verifier), both fresh and unguessable."""
    return secrets.token_urlsafe(32), secrets.token_urlsafe(48)


def authorization_url(endpoint: str, params: dict[str, str], verifier: str) -> str:
    """`endpoint` with an authorization request (`response_type=code`, `params`, and the S256
    challenge of `verifier`) in its query."""
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        **params,
        "code_challenge": challenge.rstrip(b"=").decode(),
        "code_challenge_method": "S256",
    }
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"


async def token_request(
    http: aiohttp.ClientSession,
    url: str,
    client: tuple[str, str | None],
    client_auth: str,
    form: dict[str, str],
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON answer or {}) of `form` posted to the token endpoint `url` by the
    client (id, secret or None); BridgeError `dependency_unavailable` when it cannot be
    reached."""
    import aiohttp

    client_id, secret = client
    headers = {"Accept": "application/json"}
    if secret is not None and client_auth == "basic":  # RFC 6749 2.3.1: each part encoded
        pair = f"{quote_plus(client_id)}:{quote_plus(secret)}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form = {**form, "client_id": client_id}
        if secret is not None:
            form["client_secret"] = secret
    try:
        async with http.post(url, data=form, headers=headers, allow_redirects=False) as response:
            status = response.status
            body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise BridgeError(
            f"the token endpoint {url} cannot be reached ({type(exc).__name__})",
            error_class="dependency_unavailable",
            recoverability="retry_later",
            retry_after=5.0,
        ) from None
    try:
        answer = json.loads(body) if len(body) <= MAX_DOCUMENT_BYTES else None
    except ValueError:
        answer = None
    return status, answer if isinstance(answer, dict) else {}
