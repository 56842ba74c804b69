"""Who sends a request, from its Authorization header: a static token of `server.tokens` (bound
to one surface), else an OAuth access token of `server.oauth` (a JWT or an opaque token, its
claims choosing the surface). With neither configured the server is open."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from bridge.config import OAuthConfig, ServerConfig
from bridge.identity.claims import scopes_of, surface_for
from bridge.identity.issuer import Issuer, IssuerUnavailable

if TYPE_CHECKING:
    from bridge.identity.tokens import Introspection, JWTChecker

__all__ = ["AuthFailure", "Authenticator", "Identity", "static_identity"]

log = logging.getLogger("bridge.identity")

# Longest token the static tokens alone accept (a configured token is far shorter).
STATIC_MAX_TOKEN_BYTES = 4096


@dataclass(frozen=True)
class Identity:
    """An accepted caller: its surface, and who it is (`via` says how it was known). An OAuth
    caller has the token's `sub` and `client_id` (or `azp`); a static token's caller has that
    token's `name` (else its place, `server.tokens[2]`) as its client id and no subject."""

    surface: str
    via: Literal["open", "static", "jwt", "introspection"]
    subject: str | None = None
    client_id: str | None = None
    issuer: str | None = None
    scopes: frozenset[str] = field(default_factory=frozenset)
    # the OAuth access token itself, for an exchange at its issuer (never logged, never shown,
    # never sent to an upstream)
    token: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class AuthFailure:
    """A refused request: 401 (no token, or one not accepted: `error` is `invalid_token`, or
    None when no token came), 403 (`insufficient_scope`), or 503 (the issuer cannot be read).
    `description` never holds the token."""

    status: int
    error: str | None
    description: str
    scopes: tuple[str, ...] = ()


class _OAuth:
    """The checks of one `server.oauth` section (rebuilt when a reload changes it)."""

    def __init__(self, config: OAuthConfig) -> None:
        # the JWT checks load PyJWT and cryptography: a server without `server.oauth` never does
        from bridge.identity.tokens import Introspection, JWTChecker

        self.config = config
        self.issuer = Issuer(config.issuer, refetch_interval=config.keys_refetch_interval)
        self.jwt: JWTChecker = JWTChecker(
            self.issuer, config.audience, config.algorithms, config.leeway
        )
        self.introspection: Introspection | None = (
            Introspection(
                self.issuer,
                config.audience,
                config.client_id,
                config.client_secret,
                config.introspection_cache,
            )
            if config.client_id is not None and config.client_secret is not None
            else None
        )

    async def identify(self, token: str, default_surface: str) -> Identity | AuthFailure:
        from bridge.identity.tokens import TokenRefused, jwt_header

        config = self.config
        try:
            header = jwt_header(token)
            if header is not None:
                claims, via = await self.jwt.claims(token, header), "jwt"
            elif self.introspection is not None:
                claims, via = await self.introspection.claims(token), "introspection"
            else:
                raise TokenRefused(
                    "the token is no JWT (oauth.client_id and client_secret would introspect it)"
                )
        except TokenRefused as exc:
            log.info("identity: token refused: %s", exc)
            return AuthFailure(401, "invalid_token", str(exc), tuple(config.scopes_required))
        except IssuerUnavailable as exc:
            log.warning("identity: the issuer cannot be read: %s", exc)
            return AuthFailure(
                503,
                None,
                f"the identity provider {config.issuer} cannot be reached; try again later",
            )
        scopes = scopes_of(claims)
        missing = [s for s in config.scopes_required if s not in scopes]
        if missing:
            return AuthFailure(
                403,
                "insufficient_scope",
                f"the token lacks the scope {' '.join(missing)}",
                tuple(config.scopes_required),
            )
        client = claims.get("client_id", claims.get("azp"))
        return Identity(
            surface=surface_for(claims, config.surface_claim, config.surfaces, default_surface),
            via=via,  # type: ignore[arg-type]
            subject=_text(claims.get("sub")),
            client_id=_text(client),
            issuer=config.issuer,
            scopes=frozenset(scopes),
            token=token,
        )


def _text(value: object) -> str | None:
    return value[:256] if isinstance(value, str) else None


def static_identity(server: ServerConfig, token: str) -> Identity | None:
    """The static token's caller, or None when `token` is none of `server.tokens`."""
    for index, entry in enumerate(server.tokens):
        if hmac.compare_digest(entry.token.encode(), token.encode()):
            name = entry.name or f"server.tokens[{index}]"
            return Identity(surface=entry.surface, via="static", client_id=name)
    return None


class Authenticator:
    """Identifies callers against the server settings of the moment (a reload may change its
    tokens or its `oauth` section; the issuer's keys and introspection answers are kept while
    `oauth` stays the same)."""

    def __init__(self) -> None:
        self._oauth: _OAuth | None = None
        self._retired: list[_OAuth] = []

    async def aclose(self) -> None:
        for oauth in [*self._retired, *([self._oauth] if self._oauth else [])]:
            await oauth.issuer.aclose()
        self._retired, self._oauth = [], None

    def _checks(self, config: OAuthConfig) -> _OAuth:
        if self._oauth is None or self._oauth.config != config:
            if self._oauth is not None:
                self._retired.append(self._oauth)  # requests in flight may still use its session
            self._oauth = _OAuth(config)
        return self._oauth

    async def identify(
        self, server: ServerConfig, authorization: str | None
    ) -> Identity | AuthFailure:
        """The caller of a request with this Authorization header, or why it is refused."""
        if not server.tokens and server.oauth is None:
            return Identity(surface=server.default_surface, via="open")
        if not authorization:
            return AuthFailure(
                401,
                None,
                "missing bearer token: send 'Authorization: Bearer <token>'",
                _required(server),
            )
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return AuthFailure(
                401,
                "invalid_token",
                "the Authorization header must be 'Bearer <token>'",
                _required(server),
            )
        limit = server.oauth.max_token_bytes if server.oauth is not None else STATIC_MAX_TOKEN_BYTES
        if len(token) > limit:
            return AuthFailure(
                401, "invalid_token", f"the token is longer than {limit} bytes", _required(server)
            )
        found = static_identity(server, token)
        if found is not None:
            return found
        if server.oauth is None:
            return AuthFailure(401, "invalid_token", "unknown bearer token")
        try:
            return await self._checks(server.oauth).identify(token, server.default_surface)
        except Exception:  # a fault of the bridge is never a 500, nor a log line holding the token
            log.error("identity: checking a token failed", exc_info=True)
            return AuthFailure(
                401, "invalid_token", "the token could not be checked", _required(server)
            )


def _required(server: ServerConfig) -> tuple[str, ...]:
    return tuple(server.oauth.scopes_required) if server.oauth is not None else ()
