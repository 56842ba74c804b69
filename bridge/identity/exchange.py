"""RFC 8693 token exchange: the caller's access token given to the identity provider for a token
whose audience is one upstream, sent to that upstream in place of its own credential. The
caller's token itself never leaves for an upstream.

Exchanged tokens are kept by (upstream, the caller token's SHA-256 digest) until `refresh_margin`
seconds before they expire, `capacity` of them, the least recently used going first; one
exchange runs for a key however many calls wait for it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import quote_plus

from bridge.exchange_config import TokenExchangeConfig
from bridge.identity.issuer import MAX_DOCUMENT_BYTES, IssuerUnavailable
from bridge.identity.oauth_client import IssuerClients
from bridge.model import BridgeError

__all__ = ["GRANT_TYPE", "TOKEN_TYPE", "TokenExchange"]

log = logging.getLogger("bridge.identity")

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
# A token the issuer gives without `expires_in` is kept this long.
DEFAULT_LIFETIME = 300.0


class TokenExchange:
    """Exchanges callers' tokens at the issuer of `server.oauth` (or each upstream's own
    `token_url`), with the bridge's client credentials there."""

    def __init__(
        self,
        capacity: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = capacity
        self.clock = clock
        self.exchanges = 0  # asked of the issuer since the start
        self._kept: OrderedDict[tuple[str, bytes], tuple[str, float]] = OrderedDict()
        self._running: dict[tuple[str, bytes], asyncio.Future[str]] = {}
        self._clients = IssuerClients()

    async def aclose(self) -> None:
        await self._clients.aclose()
        self._kept.clear()

    def forget(self, token: str) -> None:
        """Drop an exchanged token its upstream refused: the next call exchanges again."""
        for key, (kept, _) in list(self._kept.items()):
            if kept == token:
                del self._kept[key]

    def held(self) -> list[str]:
        """The exchanged tokens held now (masked in whatever an upstream answers)."""
        return [token for token, _ in self._kept.values()]

    async def token(
        self,
        upstream: str,
        config: TokenExchangeConfig,
        subject_token: str,
        issuer: str,
        client: tuple[str, str] | None,
    ) -> str:
        """An access token for `upstream`, in exchange for `subject_token` (an access token of
        `issuer`); `client` is the bridge's client id and secret when `config` names none.
        Raises BridgeError: `permission_denied` when the issuer refuses, `dependency_unavailable`
        when it cannot be reached, `credential_missing` when no client is configured."""
        key = (upstream, hashlib.sha256(subject_token.encode()).digest())
        found = self._fresh(key)
        if found is not None:
            return found
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(
                self._exchange(key, config, subject_token, issuer, client)
            )
            self._running[key] = running
            running.add_done_callback(lambda task: self._ended(key, task))
        # shielded: a caller that goes away leaves the exchange to those still waiting for it
        return await asyncio.shield(running)

    def _ended(self, key: tuple[str, bytes], task: asyncio.Future[str]) -> None:
        self._running.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: every caller waiting may have gone

    def _fresh(self, key: tuple[str, bytes]) -> str | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        if kept[1] <= self.clock():
            del self._kept[key]
            return None
        self._kept.move_to_end(key)
        return kept[0]

    async def _token_url(self, config: TokenExchangeConfig, issuer: str) -> str:
        if config.token_url is not None:
            return config.token_url
        known = self._clients.issuer(issuer)
        try:
            endpoint = (await known.metadata()).get("token_endpoint")
        except IssuerUnavailable as exc:
            raise _unavailable(f"the identity provider cannot be read ({exc})") from None
        if not isinstance(endpoint, str):
            raise BridgeError(
                f"the metadata of {issuer} names no token_endpoint to exchange tokens at; "
                "give the upstream's auth a token_url",
                error_class="credential_missing",
                recoverability="setup",
                status="denied",
            )
        return endpoint

    async def _exchange(
        self,
        key: tuple[str, bytes],
        config: TokenExchangeConfig,
        subject_token: str,
        issuer: str,
        client: tuple[str, str] | None,
    ) -> str:
        token, lifetime = await self._ask(key[0], config, subject_token, issuer, client)
        self._kept[key] = (token, self.clock() + max(0.0, lifetime - config.refresh_margin))
        self._kept.move_to_end(key)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)
        return token

    async def _ask(
        self,
        upstream: str,
        config: TokenExchangeConfig,
        subject_token: str,
        issuer: str,
        client: tuple[str, str] | None,
    ) -> tuple[str, float]:
        import aiohttp

        if config.client_id is not None and config.client_secret is not None:
            client = (config.client_id, config.client_secret.get_secret_value())
        if client is None:
            raise BridgeError(
                f"upstream {upstream!r} exchanges the caller's token, and the bridge has no client "
                "at the identity provider to do so",
                error_class="credential_missing",
                recoverability="setup",
                status="denied",
            )
        url = await self._token_url(config, issuer)
        form = {
            "grant_type": GRANT_TYPE,
            "subject_token": subject_token,
            "subject_token_type": TOKEN_TYPE,
            "requested_token_type": TOKEN_TYPE,
        }
        if config.audience is not None:
            form["audience"] = config.audience
        if config.resource is not None:
            form["resource"] = config.resource
        if config.scopes:
            form["scope"] = " ".join(config.scopes)
        headers = {"Accept": "application/json"}
        if config.client_auth == "basic":  # RFC 6749 2.3.1: each part form-encoded first
            pair = f"{quote_plus(client[0])}:{quote_plus(client[1])}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form["client_id"], form["client_secret"] = client
        self.exchanges += 1
        try:
            async with self._clients.session().post(
                url, data=form, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _unavailable(f"{url} cannot be reached ({type(exc).__name__})") from None
        try:
            answer = json.loads(body) if len(body) <= MAX_DOCUMENT_BYTES else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            answer = {}
        if status == 200 and isinstance(answer.get("access_token"), str):
            expires_in = answer.get("expires_in")
            lifetime = (
                float(expires_in)
                if isinstance(expires_in, int | float) and not isinstance(expires_in, bool)
                else DEFAULT_LIFETIME
            )
            return answer["access_token"], lifetime
        code = answer.get("error") if isinstance(answer.get("error"), str) else None
        if status >= 500 or status == 429 or (code is None and status != 400):
            raise _unavailable(f"{url} answered HTTP {status}")
        said = answer.get("error_description")
        said = f": {said[:200]}" if isinstance(said, str) else ""
        log.info("identity: the exchange for upstream %s was refused: %s", upstream, code)
        raise BridgeError(
            f"the identity provider refused to exchange the caller's token for upstream "
            f"{upstream!r} ({code or f'HTTP {status}'}{said})",
            error_class="permission_denied",
            error_code="token_exchange_refused",
            recoverability="not_recoverable",
            status="denied",
        )


def _unavailable(why: str) -> BridgeError:
    return BridgeError(
        f"the caller's token cannot be exchanged: {why}",
        error_class="dependency_unavailable",
        recoverability="retry_later",
        retry_after=5.0,
    )
