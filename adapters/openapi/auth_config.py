"""One credential of an OpenAPI upstream as configured (`auth:`), and the error a call answers
when it cannot be given the credential it needs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from bridge.model import BridgeError
from bridge.upstream import ConfigValueError

__all__ = ["AuthConfig", "AuthType", "setup_error"]

AuthType = Literal["apiKey", "api_key", "bearer", "basic", "oauth2", "mtls"]


class AuthConfig(BaseModel):
    """One credential. `scheme` names the document's security scheme it satisfies; without it the
    credential binds to every scheme of its type, or, when the document declares none of that
    type, is sent with every request."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: AuthType
    scheme: str | None = Field(default=None, description="name under components.securitySchemes")
    # apiKey
    name: str | None = Field(default=None, description="apiKey: header, query or cookie name")
    in_: Literal["header", "query", "cookie"] | None = Field(default=None, alias="in")
    value: SecretStr | None = Field(default=None, description="apiKey: the key")
    # http bearer
    token: SecretStr | None = None
    # http basic
    username: str | None = None
    password: SecretStr | None = Field(
        default=None, description="basic: the password; mtls: the private key's"
    )
    # mtls: a TLS client certificate
    cert_file: str | None = Field(
        default=None, description="mtls: PEM certificate (chain), relative to the config"
    )
    key_file: str | None = Field(
        default=None, description="mtls: PEM private key (default: in cert_file)"
    )
    ca_file: str | None = Field(
        default=None, description="mtls: PEM CA certificates the server is checked against"
    )
    # oauth2 client credentials
    token_url: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    scopes: list[str] = Field(default_factory=list)
    audience: str | None = None
    client_auth: Literal["basic", "body"] = Field(
        default="basic", description="how client_id/secret reach the token endpoint"
    )
    refresh_margin: float = Field(
        default=30.0, ge=0, description="seconds before expiry a token is renewed"
    )

    @model_validator(mode="after")
    def _complete(self) -> AuthConfig:
        needed = {
            "apiKey": ("value",),
            "api_key": ("value",),
            "bearer": ("token",),
            "basic": ("username", "password"),
            "oauth2": ("client_id", "client_secret"),
            "mtls": ("cert_file",),
        }[self.type]
        missing = [f for f in needed if getattr(self, f) in (None, "")]
        if missing:
            raise ConfigValueError(
                f"auth of type {self.type} needs {', '.join(missing)}",
                f"add {', '.join(f'`{m}:`' for m in missing)} (a secret as ${{VAR}})",
            )
        return self

    @property
    def kind(self) -> str:
        return "apiKey" if self.type == "api_key" else self.type


def setup_error(message: str) -> BridgeError:
    return BridgeError(
        message, error_class="credential_missing", recoverability="setup", status="denied"
    )
