"""The `server.oauth` section of the config: the bridge as an OAuth 2.1 resource server
(bridge/identity/, docs/identity.md)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from bridge.net import is_loopback
from bridge.upstream import ConfigValueError

__all__ = ["ASYMMETRIC_ALGORITHMS", "OAuthConfig"]

# Signature algorithms an access token may name. Only public-key ones: a symmetric algorithm
# (HS256) would verify a token forged with the issuer's public key as its secret.
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


class OAuthConfig(BaseModel):
    """The bridge as an OAuth 2.1 resource server (docs/identity.md). Numbers are strict: a flag
    where a number goes (`leeway: true`) is refused, as everywhere in the config."""

    model_config = ConfigDict(extra="forbid")

    issuer: str
    audience: str
    scopes_required: list[str] = Field(default_factory=list)
    surface_claim: str | None = None
    surfaces: dict[str, str] = Field(default_factory=dict)
    algorithms: list[str] = Field(default_factory=lambda: list(ASYMMETRIC_ALGORITHMS))
    leeway: float = Field(default=30.0, strict=True, ge=0, le=300, allow_inf_nan=False)
    max_token_bytes: int = Field(default=16384, strict=True, ge=1024, le=65536)
    keys_refetch_interval: float = Field(
        default=10.0, strict=True, ge=0, le=3600, allow_inf_nan=False
    )
    client_id: str | None = None
    client_secret: str | None = None
    introspection_cache: int = Field(default=10_000, strict=True, ge=0)

    @field_validator("issuer", "audience")
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ConfigValueError(
                f"{info.field_name} {value!r} is not an http(s) URL",
                "write the full URL, https://…",
            )
        if (
            info.field_name == "issuer"
            and parts.scheme == "http"
            and not is_loopback(parts.hostname)
        ):
            raise ConfigValueError(
                f"issuer {value!r} is plain http on another machine: its keys could be replaced",
                "use the issuer's https URL",
            )
        return value

    @field_validator("algorithms")
    @classmethod
    def _public_key_algorithms(cls, value: list[str]) -> list[str]:
        refused = [alg for alg in value if alg not in ASYMMETRIC_ALGORITHMS]
        if refused or not value:
            raise ConfigValueError(
                f"algorithms {refused or value} are not accepted for access tokens",
                f"list public-key algorithms only: {', '.join(ASYMMETRIC_ALGORITHMS)}",
            )
        return value

    @model_validator(mode="after")
    def _introspection_client(self) -> OAuthConfig:
        if (self.client_id is None) != (self.client_secret is None):
            raise ConfigValueError(
                "client_id and client_secret go together (the bridge's credentials at the "
                "introspection endpoint)",
                "give both, or neither",
            )
        return self
