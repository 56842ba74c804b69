"""`auth: {type: token_exchange, …}` on an HTTP upstream: each call carries a token the identity
provider issued for that upstream in exchange for the caller's own (RFC 8693), in place of the
upstream's configured credential (bridge/identity/exchange.py, docs/identity.md).

Every kind has an `auth` (or none) of its own; the bridge takes a `token_exchange` entry out of
it before the kind reads the rest (`take_exchange`), so the kinds need not know of it."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from bridge.net import is_loopback
from bridge.upstream import ConfigValueError
from bridge.user_oauth_config import UserOAuthConfig

__all__ = ["EXCHANGE_KINDS", "ActingConfig", "TokenExchangeConfig", "take_exchange"]

# The kinds whose calls are HTTP requests that can carry a per-call Authorization header.
EXCHANGE_KINDS = ("openapi", "a2t", "a2a", "mcp")


class TokenExchangeConfig(BaseModel):
    """How to exchange a caller's access token for one the upstream accepts."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["token_exchange"]
    audience: str | None = None  # RFC 8693 `audience`: the upstream, as the issuer names it
    resource: str | None = None  # RFC 8707 `resource`: the upstream's URL, for issuers using it
    scopes: list[str] = Field(default_factory=list)
    # the issuer's token endpoint; none: the `token_endpoint` of server.oauth.issuer's metadata
    token_url: str | None = None
    # the bridge's client at the issuer; none: server.oauth.client_id and client_secret
    client_id: str | None = None
    client_secret: SecretStr | None = None
    client_auth: Literal["basic", "body"] = "basic"
    refresh_margin: float = Field(default=30.0, strict=True, ge=0, le=3600, allow_inf_nan=False)

    @field_validator("token_url")
    @classmethod
    def _private_url(cls, value: str | None) -> str | None:
        parts = urlsplit(value or "")
        if value is not None and (
            parts.scheme not in ("https", "http")
            or not parts.hostname
            or (parts.scheme == "http" and not is_loopback(parts.hostname))
        ):
            raise ConfigValueError(
                f"token_url {value!r} is no https URL: the caller's token and the bridge's "
                "client secret would travel in the clear",
                "use the identity provider's https:// token endpoint",
            )
        return value

    @model_validator(mode="after")
    def _names_the_upstream(self) -> TokenExchangeConfig:
        if self.audience is None and self.resource is None:
            raise ConfigValueError(
                "a token exchange needs the upstream it is for",
                "give `audience:` (the name the issuer knows the upstream by) or `resource:` "
                "(its URL), or both",
            )
        if (self.client_id is None) != (self.client_secret is None):
            raise ConfigValueError(
                "client_id and client_secret go together", "give both, or neither"
            )
        return self


# the `auth` types that act for the caller, and what the config errors call them
_ACTING = {"token_exchange": "a token exchange", "user_oauth": "a user's OAuth token"}
ActingConfig = TokenExchangeConfig | UserOAuthConfig


def take_exchange(
    entry: dict[str, Any], path: str
) -> tuple[dict[str, Any], ActingConfig | None, list[tuple[str, str, str]]]:
    """`entry` (an upstream's config mapping) without its credential that acts for the caller
    (`token_exchange` or `user_oauth`), that credential, and the problems found (path, what,
    fix). `auth` may be one mapping or a list of them (OpenAPI's); at most one entry acts for
    the caller."""
    auth = entry.get("auth")
    items = auth if isinstance(auth, list) else [auth]
    found = [
        (i, item)
        for i, item in enumerate(items)
        if isinstance(item, dict) and item.get("type") in _ACTING
    ]
    if not found:
        return entry, None, []
    where = f"{path}.auth" + ("[{}]" if isinstance(auth, list) else "")
    if len(found) > 1:
        return entry, None, [(f"{path}.auth", "acts for the caller twice", "keep one")]
    index, item = found[0]
    at = where.format(index)
    kind = entry.get("kind")
    label = _ACTING[item["type"]]
    problems: list[tuple[str, str, str]] = []
    if kind not in EXCHANGE_KINDS or (kind == "mcp" and "url" not in entry):
        problems.append(
            (
                f"{at}.type",
                f"{label} gives HTTP requests a header; a {kind} upstream"
                + (" run as a command" if kind == "mcp" else "")
                + " makes none",
                f"use it on an upstream of kind {', '.join(EXCHANGE_KINDS)} (mcp with `url`)",
            )
        )
    model: type[BaseModel] = (
        TokenExchangeConfig if item["type"] == "token_exchange" else UserOAuthConfig
    )
    config = None
    try:
        config = model.model_validate(item)
    except ValidationError as exc:
        for error in exc.errors():
            refusal = error.get("ctx", {}).get("error")
            loc = ".".join(str(part) for part in error["loc"])
            if isinstance(refusal, ConfigValueError):
                problems.append((f"{at}{'.' + loc if loc else ''}", refusal.what, refusal.fix))
            elif error["type"] == "extra_forbidden":
                known = ", ".join(model.model_fields)
                problems.append((f"{at}.{loc}", f"unknown key `{loc}`", f"known keys: {known}"))
            else:
                problems.append((f"{at}.{loc}", error["msg"], "see docs/identity.md"))
    rest = [item for i, item in enumerate(items) if i != index]
    entry = dict(entry)
    if isinstance(auth, list) and rest:
        entry["auth"] = rest
    else:
        del entry["auth"]
    return entry, config, problems  # type: ignore[return-value]


def exchange_problems(
    exchanges: dict[str, tuple[str, ActingConfig]], oauth: Any, public_url: str | None = None
) -> list[tuple[str, str, str]]:
    """What the credentials acting for callers (upstream name -> (path, config)) lack of
    `server.oauth` and `server.public_url`."""
    problems = []
    for path, exchange in exchanges.values():
        if oauth is None:
            problems.append(
                (
                    f"{path}.auth",
                    (
                        "exchanges the caller's OAuth access token"
                        if isinstance(exchange, TokenExchangeConfig)
                        else "keeps a token for each user, known by their OAuth access token"
                    )
                    + ", and server.oauth is not configured, so no caller has one",
                    "configure server.oauth (docs/identity.md), or give the upstream a credential "
                    "of its own",
                )
            )
        elif isinstance(exchange, UserOAuthConfig):
            if exchange.verify_user and oauth.client_id is None:
                problems.append(
                    (
                        f"{path}.auth.verify_user",
                        "the user who opens a connect link signs in at server.oauth.issuer "
                        "with the bridge's client there, and server.oauth.client_id is not set",
                        "set server.oauth.client_id and client_secret (a client allowed the "
                        "authorization code grant, with <public_url>/oauth/signed-in as a "
                        "redirect URI), or verify_user: false (docs/identity.md)",
                    )
                )
            if public_url is None:
                problems.append(
                    (
                        f"{path}.auth",
                        "sends users to the vendor, which sends them back to the bridge's "
                        "/oauth/callback, and server.public_url is not set",
                        "set server.public_url to the URL users' browsers reach the bridge at",
                    )
                )
        elif exchange.client_id is None and oauth.client_id is None:
            problems.append(
                (
                    f"{path}.auth",
                    "names no client for the bridge at the identity provider",
                    "give server.oauth.client_id and client_secret, or the exchange's own",
                )
            )
    return problems
