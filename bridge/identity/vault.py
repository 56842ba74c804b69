"""Users' own tokens at upstream vendors (`auth: {type: user_oauth}`): the OAuth authorization
code flow with PKCE that connects a user's account, the tokens kept in the store sealed with
AES-256-GCM (the key from the environment), and refreshed with their refresh token before they
expire. A user is the caller's OAuth identity: its token's issuer and subject.

A call for a user with no account connected ends `credential_missing` with the link that
connects it: `/oauth/connect?ticket=…`, a ticket kept for that user and upstream, taken once; it
starts the flow, whose `state` is kept for the same user and upstream, and taken once by
`/oauth/callback`. Neither the caller's token nor a vendor's ever goes into a log or a result."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bridge.identity.issuer import IssuerUnavailable
from bridge.identity.oauth_client import (
    IssuerClients,
    authorization_url,
    new_pkce,
    token_request,
)
from bridge.model import BridgeError
from bridge.oauth_config import OAuthConfig
from bridge.store.credentials import FlowRow
from bridge.user_oauth_config import UserOAuthConfig

if TYPE_CHECKING:
    from bridge.identity.authenticate import Identity
    from bridge.store import StoreInterface

__all__ = ["CALLBACK_PATH", "CONNECT_PATH", "SIGNED_IN_PATH", "FlowRefused", "UserTokens"]

log = logging.getLogger("bridge.identity")

CONNECT_PATH = "/oauth/connect"
CALLBACK_PATH = "/oauth/callback"
SIGNED_IN_PATH = "/oauth/signed-in"  # where the bridge's identity provider sends users back
_SEALED_VERSION = b"\x01"
# how often a call waiting for its user to connect looks in the store, for a flow another
# replica finished
_POLL_INTERVAL = 1.0
# A refresh of a user's token is leased in the store, so that of replicas sharing it one
# refreshes and the others wait for what it keeps: a vendor that rotates refresh tokens refuses
# the second use of one, and may revoke the whole grant for it. The lease outlives the token
# request's timeout; the others look for the new token this often.
_REFRESH_LEASE = 60.0
_REFRESH_POLL = 0.2

UserKey = tuple[str, str, str]  # (upstream, issuer, subject)


class FlowRefused(Exception):
    """A connect link or a callback the bridge refuses: its HTTP status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _aad(purpose: str, key: UserKey) -> bytes:
    return "\x1f".join((purpose, *key)).encode()


def seal(secret: bytes, purpose: str, key: UserKey, data: bytes) -> bytes:
    """`data` encrypted with AES-GCM under `secret`, bound to `purpose` and the user's key (a
    row moved to another user, or to another purpose, does not open)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # loaded where used

    nonce = os.urandom(12)
    return _SEALED_VERSION + nonce + AESGCM(secret).encrypt(nonce, data, _aad(purpose, key))


def unseal(secret: bytes, purpose: str, key: UserKey, sealed: bytes) -> bytes | None:
    """What `seal` sealed, or None when it does not open (another key, another row's)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if not sealed.startswith(_SEALED_VERSION) or len(sealed) < 29:
        return None
    try:
        return AESGCM(secret).decrypt(sealed[1:13], sealed[13:], _aad(purpose, key))
    except InvalidTag:
        return None


class UserTokens:
    """Connects users' accounts at the `user_oauth` upstreams of the config of the moment, keeps
    their tokens in `store`, and gives the token of a call's user."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock  # the wall clock: expiries are kept in the store, across restarts
        self.store: StoreInterface | None = None
        self.public_url: str | None = None
        self.refreshes = 0  # refresh tokens used since the start
        self._configs: Mapping[str, UserOAuthConfig] = {}
        self._refreshing: dict[UserKey, asyncio.Future[dict[str, Any]]] = {}
        self._connected: dict[UserKey, asyncio.Event] = {}
        self._oauth: OAuthConfig | None = None
        self._clients = IssuerClients()

    def update(
        self,
        configs: Mapping[str, UserOAuthConfig],
        public_url: str | None,
        oauth: OAuthConfig | None = None,
    ) -> None:
        self._configs = configs
        self.public_url = public_url.rstrip("/") if public_url else None
        self._oauth = oauth

    async def aclose(self) -> None:
        await self._clients.aclose()

    # ------------------------------------------------------------------ calls

    async def authorization(
        self, upstream: str, config: UserOAuthConfig, identity: Identity | None
    ) -> str:
        """`Bearer <the user's token at upstream>`, refreshed first when it expires within
        `refresh_margin`. Raises BridgeError `credential_missing`: with `details.connect_url`
        when the user has not connected an account (or it can no longer be refreshed), with
        `caller_token_required` when the caller is no OAuth user."""
        if identity is None or identity.issuer is None or identity.subject is None:
            raise BridgeError(
                f"upstream {upstream!r} is called with each user's own account, and this caller "
                "is no user the bridge can keep one for: call with an OAuth access token that "
                "names its subject",
                error_class="credential_missing",
                error_code="caller_token_required",
                recoverability="setup",
                status="denied",
            )
        key = (upstream, identity.issuer, identity.subject)
        record = await self._stored(key, config)
        if record is None:
            raise await self.missing(key, config)
        expires_at = record.get("expires_at")
        if (
            isinstance(expires_at, int | float)
            and expires_at - config.refresh_margin <= self.clock()
        ):
            record = await self._refresh(key, config, record)
        return f"Bearer {record['access_token']}"

    async def missing(self, key: UserKey, config: UserOAuthConfig, why: str = "") -> BridgeError:
        """`credential_missing` for the user of `key`, with a new link that connects it."""
        assert self.store is not None and self.public_url is not None
        ticket = secrets.token_urlsafe(32)
        row = (*key, seal(config.key, "connect", key, b""))
        expires = self.clock() + config.connect_timeout
        await asyncio.to_thread(self.store.put_flow, _digest(ticket), "connect", row, expires)
        url = f"{self.public_url}{CONNECT_PATH}?ticket={ticket}"
        said = why or "none is connected"
        return BridgeError(
            f"upstream {key[0]!r} is called with your own account there, and {said}: open "
            f"{url} to connect it (the link works once, for {config.connect_timeout:g} "
            "seconds), then call again",
            error_class="credential_missing",
            error_code="account_not_connected",
            recoverability="setup",
            status="denied",
            details={"upstream": key[0], "connect_url": url},
        )

    async def _stored(self, key: UserKey, config: UserOAuthConfig) -> dict[str, Any] | None:
        assert self.store is not None
        sealed = await asyncio.to_thread(self.store.get_credential, *key)
        if sealed is None:
            return None
        opened = unseal(config.key, "token", key, sealed)
        if opened is None:
            log.warning(
                "identity: a stored token of upstream %s does not open with the key in %s "
                "(the key changed?); its user is asked to connect again",
                key[0],
                config.key_env,
            )
            return None
        record = json.loads(opened)
        return record if isinstance(record, dict) else None

    async def _keep(self, key: UserKey, config: UserOAuthConfig, record: dict[str, Any]) -> None:
        assert self.store is not None
        sealed = seal(config.key, "token", key, json.dumps(record).encode())
        await asyncio.to_thread(self.store.put_credential, *key, sealed)

    async def refused(self, key: UserKey, config: UserOAuthConfig, token: str) -> None:
        """The upstream refused `token`, the user's kept for `key`: it is refreshed before the
        next call, or, without a refresh token, dropped (the next call asks to connect)."""
        record = await self._stored(key, config)
        if record is None or record.get("access_token") != token:
            return  # refreshed or connected again meanwhile
        log.info("identity: upstream %s refused a user's token; it is not used again", key[0])
        if isinstance(record.get("refresh_token"), str):
            await self._keep(key, config, {**record, "expires_at": 0.0})
        else:
            assert self.store is not None
            await asyncio.to_thread(self.store.drop_credential, *key)

    async def _refresh(
        self, key: UserKey, config: UserOAuthConfig, record: dict[str, Any]
    ) -> dict[str, Any]:
        """The record refreshed, one refresh for a user however many calls wait for it."""
        running = self._refreshing.get(key)
        if running is None:
            running = asyncio.ensure_future(self._refreshed(key, config, record))
            self._refreshing[key] = running
            running.add_done_callback(lambda task: self._ended(key, task))
        return await asyncio.shield(running)

    def _ended(self, key: UserKey, task: asyncio.Future[dict[str, Any]]) -> None:
        self._refreshing.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: every caller waiting may have gone

    async def _refreshed(
        self, key: UserKey, config: UserOAuthConfig, record: dict[str, Any]
    ) -> dict[str, Any]:
        """The record refreshed by this bridge, or by a replica sharing the store that held the
        refresh's lease meanwhile."""
        assert self.store is not None
        lease = _digest("refresh\x1f" + "\x1f".join(key))
        row = (*key, b"")
        while not await asyncio.to_thread(
            self.store.claim_flow, lease, "refresh", row, self.clock() + _REFRESH_LEASE
        ):
            await asyncio.sleep(_REFRESH_POLL)  # a replica is refreshing it: wait for its token
            renewed = await self._renewed(key, config, record)
            if renewed is not None:
                return renewed
        try:
            renewed = await self._renewed(key, config, record)  # by the lease's last holder
            return renewed if renewed is not None else await self._refresh_now(key, config, record)
        finally:
            await asyncio.to_thread(self.store.take_flow, lease, "refresh")

    async def _renewed(
        self, key: UserKey, config: UserOAuthConfig, record: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The user's record in the store when it is no longer `record` (renewed or connected
        again elsewhere); None while it is. Raises `credential_missing` when it is gone."""
        current = await self._stored(key, config)
        if current is None:
            raise await self.missing(key, config)
        same = current.get("access_token") == record.get("access_token")
        return None if same else current

    async def _refresh_now(
        self, key: UserKey, config: UserOAuthConfig, record: dict[str, Any]
    ) -> dict[str, Any]:
        refresh = record.get("refresh_token")
        if not isinstance(refresh, str):
            raise await self.missing(key, config, "the token of yours it holds has expired")
        form = {"grant_type": "refresh_token", "refresh_token": refresh}
        if config.resource is not None:
            form["resource"] = config.resource
        self.refreshes += 1
        status, answer = await self._token_request(config, form, key[0])
        if status == 200 and isinstance(answer.get("access_token"), str):
            fresh = self._record(answer, refresh)
            await self._keep(key, config, fresh)
            return fresh
        if status >= 500 or status == 429 or "error" not in answer:
            raise _unavailable(f"{config.token_url} answered HTTP {status}")
        log.info("identity: upstream %s refused a refresh token: %s", key[0], answer.get("error"))
        assert self.store is not None
        await asyncio.to_thread(self.store.drop_credential, *key)
        raise await self.missing(key, config, "the vendor no longer renews the token it holds")

    def _record(self, answer: dict[str, Any], refresh: str | None) -> dict[str, Any]:
        expires_in = answer.get("expires_in")
        lifetime = (
            float(expires_in)
            if isinstance(expires_in, int | float) and not isinstance(expires_in, bool)
            else None
        )
        kept_refresh = answer.get("refresh_token")
        return {
            "access_token": answer["access_token"],
            "refresh_token": kept_refresh if isinstance(kept_refresh, str) else refresh,
            "expires_at": self.clock() + lifetime if lifetime is not None else None,
            "scope": answer.get("scope") if isinstance(answer.get("scope"), str) else None,
        }

    # ------------------------------------------------------------------ waiting for a user

    def connect_timeout(self, upstream: str) -> float:
        """The seconds a connect link of `upstream` works (0 for an upstream without users')."""
        config = self._configs.get(upstream)
        return config.connect_timeout if config is not None else 0.0

    async def wait_connected(self, key: UserKey, timeout: float) -> bool:
        """Whether the user of `key` connects an account within `timeout` seconds (through
        this bridge, or another replica sharing its store)."""
        assert self.store is not None
        event = self._connected.setdefault(key, asyncio.Event())
        deadline = time.monotonic() + timeout
        try:
            while True:
                if await asyncio.to_thread(self.store.get_credential, *key) is not None:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                try:
                    await asyncio.wait_for(event.wait(), min(left, _POLL_INTERVAL))
                except TimeoutError:
                    continue
        finally:
            self._connected.pop(key, None)

    # ------------------------------------------------------------------ the flow

    async def connect(self, ticket: str) -> str:
        """Where a connect link's `ticket` sends its user's browser: to sign in at
        `server.oauth.issuer` first (`verify_user`), else to the vendor. Raises FlowRefused for
        a ticket unknown, used or expired."""
        row = await self._take(ticket, "connect")
        if row is None:
            raise FlowRefused(
                400,
                "unknown_connect_link",
                "this link is unknown, was used already, or expired: call the tool again for "
                "a new one",
            )
        key: UserKey = (row[0], row[1], row[2])
        config = self._config(key[0])
        if not config.verify_user:
            return await self._to_vendor(key, config)
        oauth = self._oauth
        if oauth is None or oauth.client_id is None:
            raise FlowRefused(
                404, "unknown_upstream", "server.oauth names no client (the config changed)"
            )
        state, verifier = await self._begin(key, config, "sign-in")
        try:
            endpoint = (await self._clients.issuer(oauth.issuer).metadata()).get(
                "authorization_endpoint"
            )
        except IssuerUnavailable as exc:
            raise FlowRefused(
                502, "issuer_unavailable", f"the identity provider cannot be read ({exc})"
            ) from None
        if not isinstance(endpoint, str):
            raise FlowRefused(
                502, "issuer_unavailable", "the identity provider names no authorization_endpoint"
            )
        params = {
            "client_id": oauth.client_id,
            "redirect_uri": f"{self.public_url}{SIGNED_IN_PATH}",
            "state": state,
            "scope": "openid",
        }
        return authorization_url(endpoint, params, verifier)

    async def signed_in(self, params: Mapping[str, str]) -> str:
        """Where the browser goes once the user signed in at `server.oauth.issuer`: on to the
        vendor when they are the user the connect link was made for. Raises FlowRefused."""
        key, config, verifier = await self._flow(params, "sign-in")
        oauth = self._oauth
        if oauth is None or oauth.client_id is None:
            raise _bad_state()
        if params.get("error") or not params.get("code"):
            said = str(params.get("error") or "no code")[:100]
            raise FlowRefused(
                403, "sign_in_refused", f"the identity provider did not sign you in ({said})"
            )
        issuer = self._clients.issuer(oauth.issuer)
        try:
            endpoint = (await issuer.metadata()).get("token_endpoint")
        except IssuerUnavailable as exc:
            raise FlowRefused(
                502, "issuer_unavailable", f"the identity provider cannot be read ({exc})"
            ) from None
        form = {
            "grant_type": "authorization_code",
            "code": params["code"],
            "redirect_uri": f"{self.public_url}{SIGNED_IN_PATH}",
            "code_verifier": verifier.decode(),
        }
        client = (oauth.client_id, oauth.client_secret)
        try:
            status, answer = await token_request(
                self._clients.session(), str(endpoint), client, "basic", form
            )
        except BridgeError as exc:
            raise FlowRefused(502, "issuer_unavailable", exc.message) from None
        # PyJWT loads with the first sign-in: most servers never run one
        from bridge.identity.tokens import JWTChecker, TokenRefused, jwt_header

        id_token = answer.get("id_token") if status == 200 else None
        header = jwt_header(id_token) if isinstance(id_token, str) else None
        if not isinstance(id_token, str) or header is None:
            raise FlowRefused(
                403, "sign_in_refused", f"the identity provider gave no ID token (HTTP {status})"
            )
        checker = JWTChecker(issuer, oauth.client_id, oauth.algorithms, oauth.leeway)
        try:
            claims = await checker.claims(id_token, header)
        except TokenRefused as exc:
            raise FlowRefused(403, "sign_in_refused", f"the ID token is refused: {exc}") from None
        if claims.get("iss") != key[1] or claims.get("sub") != key[2]:
            log.warning(
                "identity: a connect link of upstream %s was opened by another user", key[0]
            )
            raise FlowRefused(
                403,
                "another_user",
                "you signed in as another user than the one this link was made for: nothing was "
                "connected; open a link your own call answered",
            )
        return await self._to_vendor(key, config)

    async def _begin(self, key: UserKey, config: UserOAuthConfig, purpose: str) -> tuple[str, str]:
        """A new (state, PKCE verifier), the verifier kept sealed under the state for `key`."""
        assert self.store is not None
        state, verifier = new_pkce()
        kept = (*key, seal(config.key, purpose, key, verifier.encode()))
        expires = self.clock() + config.connect_timeout
        await asyncio.to_thread(self.store.put_flow, _digest(state), purpose, kept, expires)
        return state, verifier

    async def _take(self, secret: str, purpose: str) -> FlowRow | None:
        assert self.store is not None
        return await asyncio.to_thread(self.store.take_flow, _digest(secret), purpose)

    async def _flow(
        self, params: Mapping[str, str], purpose: str
    ) -> tuple[UserKey, UserOAuthConfig, bytes]:
        """The user, upstream config and PKCE verifier of the flow whose `state` the browser
        brings back (taken once). Raises FlowRefused for a state unknown, used or not opening."""
        row = await self._take(params.get("state") or "", purpose)
        if row is None:
            raise _bad_state()
        key: UserKey = (row[0], row[1], row[2])
        config = self._config(key[0])
        verifier = unseal(config.key, purpose, key, row[3])
        if verifier is None:
            raise _bad_state()
        return key, config, verifier

    async def _to_vendor(self, key: UserKey, config: UserOAuthConfig) -> str:
        """The vendor's authorization URL for the user of `key`, its flow kept for them."""
        state, verifier = await self._begin(key, config, "state")
        params = {"client_id": config.client_id, "redirect_uri": self.redirect_uri, "state": state}
        if config.scopes:
            params["scope"] = " ".join(config.scopes)
        if config.resource is not None:
            params["resource"] = config.resource
        return authorization_url(config.authorize_url, params, verifier)

    @property
    def redirect_uri(self) -> str:
        return f"{self.public_url}{CALLBACK_PATH}"

    async def callback(self, params: Mapping[str, str]) -> str:
        """Finish the flow the vendor sends the user back from: its `state` taken (once), its
        `code` exchanged, with the PKCE verifier, for the user's tokens, which are kept sealed.
        Answers the upstream connected; raises FlowRefused."""
        key, config, verifier = await self._flow(params, "state")
        if params.get("error"):
            said = str(params.get("error"))[:100]
            raise FlowRefused(
                403, "authorization_refused", f"the vendor refused to connect the account ({said})"
            )
        code = params.get("code")
        if not code:
            raise FlowRefused(400, "missing_code", "the vendor's answer has no code")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": verifier.decode(),
        }
        if config.resource is not None:
            form["resource"] = config.resource
        try:
            status, answer = await self._token_request(config, form, key[0])
        except BridgeError as exc:
            raise FlowRefused(502, "vendor_unavailable", exc.message) from None
        if status != 200 or not isinstance(answer.get("access_token"), str):
            error = answer.get("error")
            said = error if isinstance(error, str) else f"HTTP {status}"
            raise FlowRefused(
                403, "code_refused", f"the vendor refused the authorization code ({said})"
            )
        await self._keep(key, config, self._record(answer, None))
        log.info("identity: a user connected an account at upstream %s", key[0])
        event = self._connected.get(key)
        if event is not None:
            event.set()
        return key[0]

    def _config(self, upstream: str) -> UserOAuthConfig:
        config = self._configs.get(upstream)
        if config is None:
            raise FlowRefused(
                404,
                "unknown_upstream",
                f"upstream {upstream!r} no longer takes users' accounts (the config changed)",
            )
        return config

    # ------------------------------------------------------------------ the vendor

    async def _token_request(
        self, config: UserOAuthConfig, form: dict[str, str], upstream: str
    ) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON answer or {}) of `form` at the vendor's token endpoint."""
        secret = config.client_secret.get_secret_value() if config.client_secret else None
        client = (config.client_id, secret)
        return await token_request(
            self._clients.session(), config.token_url, client, config.client_auth, form
        )


def _bad_state() -> FlowRefused:
    return FlowRefused(
        400,
        "invalid_state",
        "the state of this answer is unknown, was used already, or expired: nothing was "
        "connected; call the tool again for a new link",
    )


def _unavailable(why: str) -> BridgeError:
    return BridgeError(
        f"the vendor's token endpoint is unavailable: {why}",
        error_class="dependency_unavailable",
        recoverability="retry_later",
        retry_after=5.0,
    )
