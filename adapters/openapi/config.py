"""The configuration of an OpenAPI upstream (`kind: openapi`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adapters.http.tls import configured_ca_file
from adapters.openapi.auth_config import AuthConfig
from adapters.openapi.operations import Selector
from bridge.upstream import UpstreamConfig

__all__ = ["OpenAPIConfig", "RetryConfig"]


class RetryConfig(BaseModel):
    """Retries of idempotent operations after a 5xx answer or a connection error."""

    model_config = ConfigDict(extra="forbid")

    count: int = Field(default=2, ge=0, le=10, description="retries after the first attempt")
    backoff: float = Field(
        default=0.25, ge=0, description="first delay in seconds; doubles each retry"
    )
    max_backoff: float = Field(default=5.0, ge=0, description="longest delay between attempts")
    max_retry_after: float = Field(
        default=10.0, ge=0, description="longest Retry-After waited for before retrying"
    )


class OpenAPIConfig(UpstreamConfig):
    """`kind: openapi`: one OpenAPI document, one HTTP API."""

    kind: str = "openapi"
    spec: str = Field(
        description="path (relative to the config) or http(s) URL of the document, YAML or JSON"
    )
    base_url: str | None = Field(
        default=None, description="server URL; default: the document's first server"
    )
    server_variables: dict[str, str] = Field(
        default_factory=dict, description="values of server URL variables"
    )
    include: list[str | Selector] = Field(
        default_factory=list, description="operations to keep (default: all)"
    )
    exclude: list[str | Selector] = Field(default_factory=list, description="operations to drop")
    auth: list[AuthConfig] = Field(
        default_factory=list, description="credentials (one mapping or a list)"
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="extra headers sent with every request"
    )
    connect_timeout: float = Field(default=10.0, gt=0, description="seconds to open a connection")
    connection_limit: int = Field(default=32, ge=1, description="open connections at most")
    keepalive_timeout: float = Field(
        default=15.0, ge=0, description="seconds an idle connection is kept"
    )
    verify_tls: bool = True
    ca_file: str | None = Field(
        default=None,
        description="PEM file of CA certificates every server is checked against, beside the system's",
    )
    retries: RetryConfig = Field(default_factory=RetryConfig)
    max_response_bytes: int = Field(
        default=16 << 20, ge=1024, description="larger responses are refused"
    )
    validate_spec: Literal["auto", "full", "off"] = Field(
        default="auto",
        description="full: openapi-spec-validator; auto: full for documents up to 256 KB",
    )
    description_max: int = Field(
        default=600, ge=40, description="characters of description kept in the tool"
    )
    health_path: str | None = Field(
        default=None, description="path probed on start; with `launch` default /"
    )
    bad_operations: Literal["skip", "fail"] = Field(
        default="skip",
        description="an operation that cannot be mapped: left out with a warning, or the whole upstream fails",
    )

    _ca_file_readable = field_validator("ca_file")(configured_ca_file)

    @field_validator("auth", "include", "exclude", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, (dict, str)) else value
