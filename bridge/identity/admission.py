"""What the caller's identity decides about a call once its tool is known: whether the rate limits
let it through (`rate_limits`), and the credential its upstream gets when that upstream takes the
caller's own identity (`auth: {type: token_exchange}`, or the user's own account there:
`user_oauth`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from bridge.exchange_config import TokenExchangeConfig
from bridge.identity.authenticate import Identity
from bridge.identity.exchange import TokenExchange
from bridge.identity.limits import ANONYMOUS, CallKeys, RateCounters, RateLimiter
from bridge.identity.vault import UserTokens
from bridge.limits_config import RateLimitConfig
from bridge.model import BridgeError, ToolDeclaration
from bridge.oauth_config import OAuthConfig
from bridge.user_oauth_config import UserOAuthConfig

__all__ = ["Admission", "caller_keys"]


def caller_keys(identity: Identity | None) -> tuple[str, str]:
    """(caller, caller class) of a call, as rate limits key and match it: an OAuth caller is its
    token's `sub` (a token without one: `client:<client_id>`), class `oauth`; a static token's
    caller is its `name` (else its place, `server.tokens[2]`), class `static`; a call with no
    identity (an open server, stdio) is `anonymous`, one caller for all."""
    if identity is None or identity.via == "open":
        return ANONYMOUS, "anonymous"
    if identity.via == "static":
        return identity.client_id or ANONYMOUS, "static"
    if identity.subject is not None:
        return identity.subject, "oauth"
    return f"client:{identity.client_id or ''}", "oauth"


class Admission:
    """The rate limits and the token exchanges of the config of the moment (`update` at a
    reload). `on_limited(limit, caller_class)` is told of each call a limit refuses."""

    def __init__(
        self,
        limits: Sequence[RateLimitConfig] = (),
        counters: RateCounters | None = None,
        on_limited: Callable[[str, str], None] | None = None,
    ) -> None:
        self.limiter = RateLimiter(limits, counters)
        self.exchange = TokenExchange()
        self.user_tokens = UserTokens()  # its store is set by the runtime
        self.on_limited = on_limited
        self._exchanges: Mapping[str, TokenExchangeConfig | UserOAuthConfig] = {}
        self._oauth: OAuthConfig | None = None
        # whether any call needs looking at (else the pipeline skips `admit`): kept current by
        # `update`, the one place the limits and exchanges change, so a call reads an attribute
        self.active: bool = self.limiter.active

    def update(
        self,
        limits: Sequence[RateLimitConfig],
        exchanges: Mapping[str, TokenExchangeConfig | UserOAuthConfig],
        oauth: OAuthConfig | None,
        public_url: str | None = None,
    ) -> None:
        self.limiter.update(limits)
        self._exchanges = exchanges
        self._oauth = oauth
        self.active = self.limiter.active or bool(exchanges)
        users = {k: v for k, v in exchanges.items() if isinstance(v, UserOAuthConfig)}
        self.user_tokens.update(users, public_url, oauth)

    async def admit(
        self, decl: ToolDeclaration, surface: str, identity: Identity | None
    ) -> str | None:
        """Let the call through, or raise BridgeError (`rate_limited` with `retry_after`; an
        exchange's failure). Answers the `Authorization` value the upstream is sent in place of
        its own credential (None: its own)."""
        if self.limiter.active:
            caller, caller_class = caller_keys(identity)
            keys = CallKeys(caller, caller_class, surface, decl.name, decl.upstream)
            refused = await self.limiter.check(keys)
            if refused is not None:
                if self.on_limited is not None:
                    self.on_limited(refused.limit, caller_class)
                wait = round(refused.retry_after, 3)
                raise BridgeError(
                    f"rate limit {refused.limit!r} reached; retry after {wait:g} seconds",
                    error_class="rate_limited",
                    recoverability="retry_later",
                    retry_after=wait,
                    status="denied",
                    details={"limit": refused.limit},
                )
        exchange = self._exchanges.get(decl.upstream)
        if exchange is None:
            return None
        if isinstance(exchange, UserOAuthConfig):
            return await self.user_tokens.authorization(decl.upstream, exchange, identity)
        oauth = self._oauth
        token = identity.token if identity is not None else None
        if oauth is None or token is None or identity is None or identity.issuer is None:
            raise BridgeError(
                f"upstream {decl.upstream!r} acts for the caller, with a token the identity "
                "provider exchanges for the caller's own: call with an OAuth access token of "
                f"{oauth.issuer if oauth is not None else 'server.oauth.issuer'}",
                error_class="credential_missing",
                error_code="caller_token_required",
                recoverability="setup",
                status="denied",
            )
        client = (
            (oauth.client_id, oauth.client_secret)
            if oauth.client_id is not None and oauth.client_secret is not None
            else None
        )
        exchanged = await self.exchange.token(decl.upstream, exchange, token, oauth.issuer, client)
        return f"Bearer {exchanged}"

    async def refused(self, upstream: str, identity: Identity | None, authorization: str) -> None:
        """The upstream refused the credential obtained for the caller (HTTP 401): an
        exchanged token is exchanged again, a user's token refreshed (or, without a refresh
        token, dropped, and the user asked to connect again) before the next call."""
        config = self._exchanges.get(upstream)
        token = authorization.removeprefix("Bearer ")
        if isinstance(config, UserOAuthConfig):
            if identity is not None and identity.issuer is not None and identity.subject:
                key = (upstream, identity.issuer, identity.subject)
                await self.user_tokens.refused(key, config, token)
        elif config is not None:
            self.exchange.forget(token)

    def secrets(self, upstream: str, authorization: str) -> list[str]:
        """What an upstream's answer to a call carrying `authorization` must not show: the token
        obtained for the caller, and the secret of the bridge's client that obtained it."""
        secrets = [authorization.removeprefix("Bearer ")]
        config = self._exchanges.get(upstream)
        if config is not None and config.client_secret is not None:
            secrets.append(config.client_secret.get_secret_value())
        return secrets

    async def aclose(self) -> None:
        await self.limiter.aclose()
        await self.exchange.aclose()
        await self.user_tokens.aclose()
