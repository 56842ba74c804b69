"""`auth: {type: user_oauth, …}` on an HTTP upstream: each call carries the calling user's own
token at the vendor, got once through the OAuth authorization code flow (with PKCE) and kept in
the store, sealed with a key from the environment (bridge/identity/vault.py, docs/identity.md).

The loader takes the entry out of the upstream's `auth` before the kind reads the rest, as it
does a `token_exchange` (bridge/exchange_config.py)."""

from __future__ import annotations

import base64
import binascii
import os
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator

from bridge.net import is_loopback
from bridge.upstream import ConfigValueError

__all__ = ["KEY_BYTES", "UserOAuthConfig", "key_from_environment", "secure_url"]

KEY_BYTES = 32  # AES-256-GCM
_KEY_FIX = (
    "set {name} to {n} random bytes in base64, made once and kept (`openssl rand -base64 {n}`); "
    "the tokens stored are sealed with it, and a new key loses them"
)


def secure_url(value: str, what: str, why: str) -> str:
    """`value` when it is an https:// URL (or plain http:// to a loopback host); else a
    ConfigValueError saying `why` it must be."""
    parts = urlsplit(value)
    if (
        parts.scheme not in ("https", "http")
        or not parts.hostname
        or (parts.scheme == "http" and not is_loopback(parts.hostname))
    ):
        raise ConfigValueError(
            f"{what} {value!r} is no https URL: {why}", f"use the {what}'s https:// URL"
        )
    return value


def key_from_environment(name: str) -> bytes:
    """The key in the environment variable `name` (base64 of KEY_BYTES bytes), or a
    ConfigValueError saying what is wrong with it and how to make one."""
    fix = _KEY_FIX.format(name=name, n=KEY_BYTES)
    value = os.environ.get(name)
    if not value:
        raise ConfigValueError(f"the environment variable {name} is not set", fix)
    text = value.strip()
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        try:
            key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigValueError(f"the environment variable {name} is not base64", fix) from None
    if len(key) != KEY_BYTES:
        raise ConfigValueError(
            f"the environment variable {name} holds {len(key)} bytes, not {KEY_BYTES}", fix
        )
    return key


class UserOAuthConfig(BaseModel):
    """How the bridge gets each user's token at the vendor, and keeps it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["user_oauth"]
    authorize_url: str  # the vendor's authorization endpoint, where the user's browser goes
    token_url: str  # its token endpoint: codes and refresh tokens are exchanged there
    client_id: str  # the bridge's client at the vendor
    client_secret: SecretStr | None = None  # none: a public client (PKCE only)
    client_auth: Literal["basic", "body"] = "basic"
    scopes: list[str] = Field(default_factory=list)
    resource: str | None = None  # RFC 8707 `resource`, for vendors that use it
    key_env: str = "BRIDGE_CREDENTIAL_KEY"  # the environment variable holding the sealing key
    refresh_margin: float = Field(default=60.0, strict=True, ge=0, le=86400, allow_inf_nan=False)
    # seconds a connect link, and then the flow it starts, may take
    connect_timeout: float = Field(default=600.0, strict=True, gt=0, le=86400, allow_inf_nan=False)
    # the user who opens a connect link signs in at server.oauth.issuer first, and must be the
    # user it was made for (else whoever opened it could connect their account to that user)
    verify_user: bool = True
    _key: bytes = PrivateAttr(default=b"")

    @field_validator("authorize_url")
    @classmethod
    def _authorize_https(cls, value: str) -> str:
        return secure_url(
            value, "authorize_url", "the authorization code would travel in the clear"
        )

    @field_validator("token_url")
    @classmethod
    def _token_https(cls, value: str) -> str:
        return secure_url(value, "token_url", "the user's tokens would travel in the clear")

    @field_validator("key_env")
    @classmethod
    def _key_present(cls, value: str) -> str:
        key_from_environment(value)
        return value

    def model_post_init(self, context: object) -> None:
        self._key = key_from_environment(self.key_env)

    @property
    def key(self) -> bytes:
        """The sealing key, read from the environment when the config was loaded."""
        return self._key
