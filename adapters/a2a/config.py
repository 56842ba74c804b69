"""The configuration of an A2A upstream: the agent's card or base URL, its credentials, and how
tasks are followed (streaming or polling)."""

from __future__ import annotations

import urllib.parse
from typing import Literal

from pydantic import Field, field_validator, model_validator

from adapters.a2a.card import (
    A2AAuth,
)
from adapters.http.tls import configured_ca_file
from bridge.upstream import ConfigValueError, UpstreamConfig

__all__ = ["A2AAuth", "A2AConfig"]


class A2AConfig(UpstreamConfig):
    """An A2A agent, named by its card URL or its base URL."""

    kind: Literal["a2a"] = "a2a"
    card_url: str | None = Field(default=None, description="the agent card's URL")
    base_url: str | None = Field(
        default=None, description="the agent's root; the card is looked up under /.well-known/"
    )
    auth: A2AAuth = Field(default_factory=A2AAuth)
    card_refresh_interval: float | None = Field(
        default=300.0, gt=0, description="re-fetch the card every N seconds"
    )
    streaming: bool = Field(default=True, description="stream task updates when the agent can")
    poll_interval: float = Field(
        default=0.5, gt=0, description="seconds between task polls when not streaming"
    )
    transport: Literal["auto", "JSONRPC", "HTTP+JSON"] = Field(
        default="auto", description="auto follows the card's order of interfaces"
    )
    cancel_timeout: float = Field(
        default=5.0, gt=0, description="seconds a cancel request to the agent may take"
    )
    max_response_bytes: int = Field(
        default=16 << 20,
        ge=1024,
        description="larger answers (a card, a reply, one call's event stream) are refused",
    )
    credential_origins: list[str] = Field(
        default_factory=list,
        description="origins (scheme://host:port) besides that of base_url/card_url that get the credentials",
    )
    ca_file: str | None = Field(
        default=None,
        description="PEM file of CA certificates the agent's servers are checked against, beside the system's",
    )

    _ca_file_readable = field_validator("ca_file")(configured_ca_file)

    @field_validator("credential_origins")
    @classmethod
    def _origins_only(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            try:
                parts = urllib.parse.urlsplit(origin)
                parts.port  # noqa: B018 - raises for a port that is no number
            except ValueError:
                parts = None
            if (
                parts is None
                or parts.scheme not in ("http", "https")
                or not parts.hostname
                or parts.path not in ("", "/")
                or parts.query
                or parts.fragment
                or parts.username is not None
            ):
                raise ConfigValueError(
                    f"{origin!r} is not an http(s) origin",
                    "write the scheme, host and port only, e.g. https://agent.example.com or http://127.0.0.1:9102",
                )
        return origins

    def secrets(self) -> list[str]:
        return [*super().secrets(), *self.auth.secrets()]

    def configured_origins(self) -> list[str]:
        """Where credentials may go: the origin of base_url or card_url, and credential_origins."""
        return [self.base_url or self.card_url or "", *self.credential_origins]

    @model_validator(mode="after")
    def _one_location(self) -> A2AConfig:
        if bool(self.card_url) == bool(self.base_url):
            raise ConfigValueError(
                "give exactly one of card_url (the agent card's URL) or base_url (the agent's root URL)",
                "keep one of the two"
                if self.card_url
                else "add `base_url: http://...` (the card is looked up under "
                "/.well-known/) or `card_url`",
            )
        return self
