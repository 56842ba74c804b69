"""An authorization server as a resource server sees it: its metadata (OpenID Connect discovery,
else RFC 8414) and its signing keys (the JWKS its metadata names), fetched when first needed and
kept. A token naming a key the set lacks fetches the set again, at most once per
`refetch_interval`, so keys the issuer rotates in are taken without a restart."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import aiohttp
    from jwt import PyJWK

__all__ = ["Issuer", "IssuerUnavailable", "SigningKey"]

log = logging.getLogger("bridge.identity")

# Every request to the issuer ends within this many seconds, and reads at most MAX_DOCUMENT_BYTES.
FETCH_TIMEOUT = 10.0
MAX_DOCUMENT_BYTES = 1 << 20
# Metadata and keys are fetched again after this long, when a token next needs them; a key the
# issuer withdrew is then no longer accepted.
KEPT_SECONDS = 3600.0


class SigningKey(NamedTuple):
    """One key of the issuer's set, with the algorithm its JWK states (`alg`), if any."""

    jwk: PyJWK
    alg: str | None


class IssuerUnavailable(Exception):
    """The issuer's metadata or keys cannot be read (down, or answering what is no metadata)."""


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be: OpenID Connect's `/.well-known/openid-configuration`
    appended to the issuer, then RFC 8414's `/.well-known/oauth-authorization-server` inserted
    before its path."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    oidc = urlunsplit(
        (parts.scheme, parts.netloc, f"{path}/.well-known/openid-configuration", "", "")
    )
    rfc8414 = urlunsplit(
        (parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", "")
    )
    return [oidc, rfc8414]


class Issuer:
    """One issuer's metadata and keys, shared by every request the bridge checks."""

    def __init__(self, issuer: str, *, refetch_interval: float = 10.0) -> None:
        self.issuer = issuer
        self.refetch_interval = refetch_interval
        self._http: aiohttp.ClientSession | None = None
        self._metadata: dict[str, Any] | None = None
        self._metadata_at = 0.0
        self._keys: dict[str | None, SigningKey] = {}
        self._keys_at = 0.0  # when the key set was last fetched (monotonic), 0: never
        self._lock = asyncio.Lock()  # one fetch at a time: a burst of new-kid tokens costs one

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def http(self) -> aiohttp.ClientSession:
        # aiohttp loads with the first fetch: a server without OAuth may never need it
        import aiohttp

        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT))
        return self._http

    async def get_json(self, url: str) -> dict[str, Any]:
        import aiohttp

        try:
            async with self.http().get(url, headers={"Accept": "application/json"}) as response:
                if response.status != 200:
                    raise IssuerUnavailable(f"{url} answered HTTP {response.status}")
                body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IssuerUnavailable(
                f"{url} cannot be reached ({type(exc).__name__}: {exc})"
            ) from None
        if len(body) > MAX_DOCUMENT_BYTES:
            raise IssuerUnavailable(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
        try:
            document = json.loads(body)
        except ValueError:
            raise IssuerUnavailable(f"{url} answered no JSON") from None
        if not isinstance(document, dict):
            raise IssuerUnavailable(f"{url} answered no JSON object")
        return document

    async def metadata(self) -> dict[str, Any]:
        """The issuer's metadata, whose `issuer` must be the configured one (OpenID Connect
        Discovery 4.3, RFC 8414 3.3: a document of another issuer is not trusted)."""
        if self._metadata is not None and time.monotonic() - self._metadata_at < KEPT_SECONDS:
            return self._metadata
        problems = []
        for url in metadata_urls(self.issuer):
            try:
                document = await self.get_json(url)
            except IssuerUnavailable as exc:
                problems.append(str(exc))
                continue
            if document.get("issuer") != self.issuer:
                problems.append(
                    f"{url} names issuer {str(document.get('issuer'))[:200]!r}, not {self.issuer!r}"
                )
                continue
            self._metadata, self._metadata_at = document, time.monotonic()
            return document
        if self._metadata is not None:  # kept while the issuer cannot be read
            log.warning("identity: issuer metadata not refreshed: %s", "; ".join(problems))
            return self._metadata
        raise IssuerUnavailable("; ".join(problems))

    async def key(self, kid: str | None) -> SigningKey | None:
        """The signing key `kid` names (a token without `kid`: the set's only key), fetching the
        set when it is not held yet, is older than KEPT_SECONDS, or lacks `kid` and was last
        fetched over `refetch_interval` ago. None: the issuer has no such key."""
        found = self._pick(kid)
        if found is not None and time.monotonic() - self._keys_at < KEPT_SECONDS:
            return found
        async with self._lock:
            found = self._pick(kid)  # another request may have fetched it meanwhile
            age = time.monotonic() - self._keys_at
            if self._keys_at and age < (
                KEPT_SECONDS if found is not None else self.refetch_interval
            ):
                return found
            try:
                await self._fetch_keys()
            except IssuerUnavailable:
                if not self._keys:
                    raise
                self._keys_at = (
                    time.monotonic()
                )  # the stale set serves; tried again after the interval
                log.warning(
                    "identity: issuer keys not refreshed; the keys held serve meanwhile",
                    exc_info=True,
                )
        return self._pick(kid)

    def _pick(self, kid: str | None) -> SigningKey | None:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    async def _fetch_keys(self) -> None:
        jwks_uri = (await self.metadata()).get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise IssuerUnavailable(f"the metadata of {self.issuer} names no jwks_uri")
        document = await self.get_json(jwks_uri)
        # PyJWT (and the cryptography it loads, a quarter second of CPU) only once keys are read
        from jwt import PyJWK
        from jwt.exceptions import PyJWKError

        keys: dict[str | None, SigningKey] = {}
        for entry in document.get("keys") or []:
            # a symmetric key ("oct") is never the issuer's: a token it verifies could be anyone's
            if (
                not isinstance(entry, dict)
                or entry.get("use", "sig") != "sig"
                or entry.get("kty") == "oct"
            ):
                continue
            try:
                key = PyJWK(entry)
            except (
                PyJWKError,
                ValueError,
                TypeError,
                KeyError,
            ):  # a kind of key this bridge cannot use
                continue
            stated = entry.get("alg") if isinstance(entry.get("alg"), str) else None
            keys[entry.get("kid") if isinstance(entry.get("kid"), str) else None] = SigningKey(
                key, stated
            )
        self._keys, self._keys_at = keys, time.monotonic()
        log.info("identity: %d signing keys of %s", len(keys), self.issuer)
