"""Access tokens checked as RFC 9068 and RFC 7662 say a resource server checks them: a JWT by its
signature (a key of the issuer, an allow-listed public-key algorithm), `iss`, `aud`, `exp` and
`nbf`; an opaque token by asking the issuer's introspection endpoint, answers kept until the
token expires. Each refusal is a `TokenRefused` whose message never holds the token."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote_plus

import aiohttp
import jwt

from bridge.identity.issuer import MAX_DOCUMENT_BYTES, Issuer, IssuerUnavailable

__all__ = ["Introspection", "JWTChecker", "TokenRefused", "jwt_header"]

# The key type each algorithm family verifies with.
_KEY_TYPE = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
# Longest an introspection answer is kept, whatever the token's lifetime; an inactive answer is
# kept this long too, so that a caller repeating a bad token costs one request a minute.
INTROSPECTION_KEPT_MAX = 3600.0
INACTIVE_KEPT = 60.0


class TokenRefused(Exception):
    """The token is not one this resource server accepts; the message says why, without it."""


def jwt_header(token: str) -> dict[str, Any] | None:
    """The header of a token of three dot-separated parts whose first is a base64url JSON
    object (a JWS), not yet verified; None for anything else (an opaque token, for
    introspection). Read here, not by PyJWT, whose decode reads it again: each reading checks
    every character of the token in Python, half the cost of checking a JWT."""
    head, dot, _ = token.partition(".")
    if not dot or token.count(".") != 2:
        return None
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return None
    return header if isinstance(header, dict) else None


class JWTChecker:
    """JWT access tokens of one issuer for one audience."""

    def __init__(
        self, issuer: Issuer, audience: str, algorithms: Sequence[str], leeway: float
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.algorithms = tuple(algorithms)
        self.leeway = leeway

    async def claims(self, token: str, header: dict[str, Any]) -> dict[str, Any]:
        """The claims of a JWT whose (unverified) `header` `jwt_header` read."""
        alg = header.get("alg")
        if (
            alg not in self.algorithms
        ):  # `none`, HS256 and the rest are refused before any key is used
            accepted = ", ".join(self.algorithms)
            raise TokenRefused(
                f"the token's algorithm {str(alg)[:20]!r} is not accepted ({accepted})"
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("the token's kid is no string")
        key = await self.issuer.key(kid)
        if key is None:
            named = f"key {kid[:80]!r}" if kid is not None else "a key (the token names no kid)"
            raise TokenRefused(f"the issuer has no {named}")
        if key.jwk.key_type != _KEY_TYPE.get(alg[:2]) or (key.alg is not None and key.alg != alg):
            raise TokenRefused(f"the issuer's key {kid!r} is not for {alg}")
        try:
            return jwt.decode(
                token,
                key.jwk.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRefused("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRefused("the token is not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused(
                f"the token is not for this resource (its audience is not {self.audience})"
            ) from None
        except jwt.InvalidIssuerError:
            raise TokenRefused(f"the token was not issued by {self.issuer.issuer}") from None
        except jwt.InvalidSignatureError:
            raise TokenRefused("the token's signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"the token is refused: {exc}") from None


class Introspection:
    """Opaque access tokens, asked of the issuer's RFC 7662 endpoint with the bridge's own client
    credentials. Answers are kept by the token's digest until the token expires (at most
    INTROSPECTION_KEPT_MAX), `capacity` of them, the least recently used going first."""

    def __init__(
        self, issuer: Issuer, audience: str, client_id: str, client_secret: str, capacity: int
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        # client_secret_basic (RFC 6749 2.3.1: each part form-encoded before base64)
        pair = f"{quote_plus(client_id)}:{quote_plus(client_secret)}"
        self.authorization = "Basic " + base64.b64encode(pair.encode()).decode()
        self.capacity = capacity
        self._answers: OrderedDict[bytes, tuple[float, dict[str, Any] | None]] = OrderedDict()

    async def claims(self, token: str) -> dict[str, Any]:
        digest = hashlib.sha256(token.encode()).digest()
        now = time.time()
        kept = self._answers.get(digest)
        if kept is not None and kept[0] > now:
            self._answers.move_to_end(digest)
            answer = kept[1]
        else:
            answer = await self._ask(token)
            until = now + INACTIVE_KEPT
            if answer is not None:
                exp = answer.get("exp")
                until = (
                    min(float(exp), now + INTROSPECTION_KEPT_MAX)
                    if isinstance(exp, int | float)
                    else now
                )
            if self.capacity and until > now:
                self._answers[digest] = (until, answer)
                self._answers.move_to_end(digest)
                while len(self._answers) > self.capacity:
                    self._answers.popitem(last=False)
        if answer is None:
            raise TokenRefused("the issuer says the token is not active")
        self._check(answer, now)
        return answer

    def _check(self, answer: dict[str, Any], now: float) -> None:
        exp = answer.get("exp")
        if isinstance(exp, int | float) and exp <= now:
            raise TokenRefused("the token has expired")
        if "iss" in answer and answer["iss"] != self.issuer.issuer:
            raise TokenRefused(f"the token was not issued by {self.issuer.issuer}")
        aud = answer.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if self.audience not in audiences:
            raise TokenRefused(
                f"the token is not for this resource (its audience is not {self.audience})"
            )

    async def _ask(self, token: str) -> dict[str, Any] | None:
        """The active token's claims, or None for an inactive one."""
        endpoint = (await self.issuer.metadata()).get("introspection_endpoint")
        if not isinstance(endpoint, str):
            raise TokenRefused(
                "the token is no JWT, and the issuer's metadata names no introspection endpoint"
            )
        try:
            async with self.issuer.http().post(
                endpoint,
                data={"token": token, "token_type_hint": "access_token"},
                headers={"Accept": "application/json", "Authorization": self.authorization},
            ) as response:
                body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IssuerUnavailable(
                f"{endpoint} cannot be reached ({type(exc).__name__})"
            ) from None
        if status != 200:
            raise IssuerUnavailable(
                f"{endpoint} answered HTTP {status} (are oauth.client_id and client_secret right?)"
            )
        try:
            answer = json.loads(body)
        except ValueError:
            raise IssuerUnavailable(f"{endpoint} answered no JSON") from None
        if not isinstance(answer, dict):
            raise IssuerUnavailable(f"{endpoint} answered no JSON object")
        return answer if answer.get("active") is True else None
