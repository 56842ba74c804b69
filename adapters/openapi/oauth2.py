"""OAuth2 client credentials of an OpenAPI upstream: the token fetched from the token endpoint
(never redirected), cached until shortly before it expires, fetched once however many calls wait,
and refetched when the API no longer accepts it."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from collections import deque
from collections.abc import Callable

import aiohttp

from adapters.http.body import read_body
from adapters.openapi.auth_config import AuthConfig, setup_error
from adapters.openapi.auth_tls import certificate_failure
from bridge.model import BridgeError

__all__ = ["TOKEN_BYTES", "OAuth2Token"]

TOKEN_BYTES = 1 << 20  # of a token endpoint's answer, read at most


class OAuth2Token:
    """The client-credentials token of one credential: fetched on first use, reused until
    `refresh_margin` seconds before it expires, fetched once however many calls wait."""

    def __init__(self, config: AuthConfig, token_url: str) -> None:
        self.config = config
        self.token_url = token_url
        self.clock: Callable[[], float] = time.monotonic
        self.fetches = 0
        self.recent: deque[str] = deque(maxlen=8)  # tokens handed out lately, for scrubbing
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self.tls: ssl.SSLContext | None = (
            None  # `ca_file`'s, when the endpoint is on the API's origin
        )
        self.ca_file: str | None = (
            None  # the upstream's, as written: named in the fix of a certificate that fails its check
        )

    def invalidate(self, token: str | None = None) -> None:
        if token is None or token == self._token:
            self._token = None

    async def get(self, session: aiohttp.ClientSession, timeout: float) -> str:
        async with self._lock:
            if (
                self._token is not None
                and self.clock() < self._expires_at - self.config.refresh_margin
            ):
                return self._token
            self._token = None
            self._token, lifetime = await self._fetch(session, timeout)
            self.recent.append(self._token)
            self._expires_at = self.clock() + lifetime
            return self._token

    async def _fetch(self, session: aiohttp.ClientSession, timeout: float) -> tuple[str, float]:
        cfg = self.config
        assert cfg.client_id is not None and cfg.client_secret is not None
        form = {"grant_type": "client_credentials"}
        if cfg.scopes:
            form["scope"] = " ".join(cfg.scopes)
        if cfg.audience:
            form["audience"] = cfg.audience
        headers = {"Accept": "application/json"}
        if cfg.client_auth == "basic":
            raw = f"{cfg.client_id}:{cfg.client_secret.get_secret_value()}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
        else:
            form["client_id"] = cfg.client_id
            form["client_secret"] = cfg.client_secret.get_secret_value()
        self.fetches += 1
        try:
            # not redirected: the client secret goes to the configured token_url alone (a 307 or
            # 308 would send the form again wherever it points)
            async with session.post(
                self.token_url,
                data=form,
                headers=headers,
                allow_redirects=False,
                ssl=self.tls if self.tls is not None else True,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                if 300 <= response.status < 400:
                    raise setup_error(
                        f"the OAuth2 token endpoint {self.token_url} answered HTTP {response.status}, a redirect, "
                        "which is not followed with the client credentials: set token_url to where it leads"
                    )
                try:
                    payload = json.loads(
                        await read_body(response, TOKEN_BYTES, "the OAuth2 token endpoint's answer")
                    )
                except (ValueError, RecursionError):
                    payload = None
                if (
                    response.status != 200
                    or not isinstance(payload, dict)
                    or not isinstance(payload.get("access_token"), str)
                ):
                    code = payload.get("error") if isinstance(payload, dict) else None
                    raise setup_error(
                        f"the OAuth2 token endpoint {self.token_url} refused the client credentials: "
                        f"HTTP {response.status}" + (f" {code}" if isinstance(code, str) else "")
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            if (failure := certificate_failure(exc, self.ca_file)) is not None:
                raise BridgeError(
                    f"the OAuth2 token endpoint {self.token_url}: {failure}",
                    error_class="dependency_unavailable",
                    recoverability="setup",
                ) from None
            raise BridgeError(
                f"the OAuth2 token endpoint {self.token_url} cannot be reached ({type(exc).__name__})",
                error_class="dependency_unavailable",
                recoverability="retry_later",
            ) from None
        expires_in = payload.get("expires_in")
        lifetime = (
            float(expires_in)
            if isinstance(expires_in, (int, float, str))
            and str(expires_in).replace(".", "", 1).isdigit()
            else 3600.0
        )
        return payload["access_token"], lifetime
