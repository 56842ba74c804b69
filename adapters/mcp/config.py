"""The configuration of an MCP upstream: a server run over stdio (`command`, `args`, `env`) or
reached over streamable HTTP (`url`, `headers`), and the protocol era to speak."""

from __future__ import annotations

import sys
import urllib.parse
from typing import Literal

from pydantic import Field, field_validator, model_validator

from adapters.http.tls import configured_ca_file
from adapters.mcp.stdio import MAX_LINE
from bridge.upstream import ConfigValueError, UpstreamConfig

__all__ = ["MCPConfig", "ProtocolMode"]

ProtocolMode = Literal["auto", "legacy", "2026-07-28"]
_PYTHON_NAMES = ("python", "python3")


class MCPConfig(UpstreamConfig):
    """An MCP server: `command` (with `args`, `env`, `cwd`) runs it as a child over stdio, `url`
    (with `headers`) reaches it over streamable HTTP. Exactly one of the two."""

    command: str | None = Field(
        default=None,
        description="stdio: program to run (python/python3 = the bridge's own interpreter)",
    )
    args: list[str] = Field(default_factory=list, description="stdio: its arguments")
    env: dict[str, str] = Field(
        default_factory=dict, description="stdio: variables added to a minimal environment"
    )
    cwd: str | None = Field(
        default=None, description="stdio: working folder, relative to the config file's folder"
    )
    url: str | None = Field(
        default=None, description="streamable HTTP endpoint, e.g. http://127.0.0.1:9001/mcp"
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP: headers sent with every request"
    )
    ca_file: str | None = Field(
        default=None,
        description="HTTP: PEM file of CA certificates the server's is checked against, beside the system's",
    )
    protocol: ProtocolMode = Field(
        default="auto", description="auto | legacy (handshake era) | 2026-07-28"
    )
    ping_interval: float | None = Field(
        default=30.0, gt=0, description="liveness probe every N seconds; null = off"
    )
    ping_timeout: float = Field(default=10.0, gt=0, description="seconds a liveness probe may take")
    shutdown_timeout: float = Field(
        default=2.0, ge=0, description="stdio: seconds to exit after stdin closes"
    )
    max_pages: int = Field(
        default=1000, ge=1, description="most tools/list pages read in one listing"
    )
    max_line_bytes: int = Field(
        default=MAX_LINE,
        ge=1024,
        description="stdio: longest message (one line) read from the server, bytes",
    )
    max_response_bytes: int = Field(
        default=16 << 20,
        ge=1024,
        description="HTTP: largest answer read (a JSON body, one POST's event stream, one event of a session-long stream)",
    )

    _ca_file_readable = field_validator("ca_file")(configured_ca_file)

    @model_validator(mode="after")
    def _one_transport(self) -> MCPConfig:
        if bool(self.command) == bool(self.url):
            raise ConfigValueError(
                "give exactly one of `command` (a stdio server) or `url` (a streamable HTTP server)",
                "keep one of the two"
                if self.command
                else "add `command: ...` to run the server, or `url: http://...` to reach it",
            )
        if self.url:
            if self.args or self.env or self.cwd:
                raise ConfigValueError(
                    "`args`, `env` and `cwd` apply to stdio servers (`command`), not to `url`",
                    "remove them, or run the server with `command` instead of `url`",
                )
            if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
                raise ConfigValueError(
                    f"`url` must start with http:// or https:// (got {self.url!r})",
                    "write the server's streamable HTTP endpoint, e.g. http://127.0.0.1:9001/mcp",
                )
        if self.command and self.headers:
            raise ConfigValueError(
                "`headers` apply to HTTP servers (`url`), not to `command`",
                "remove `headers` (a stdio server takes `env`), or reach the server with `url`",
            )
        if self.command and self.ca_file:
            raise ConfigValueError(
                "`ca_file` applies to HTTPS servers (`url`), not to `command`",
                "remove `ca_file`, or reach the server with `url`",
            )
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def argv(self) -> list[str]:
        assert self.command is not None
        command = sys.executable if self.command in _PYTHON_NAMES else self.command
        return [command, *self.args]

    def working_dir(self) -> str:
        return self.resolve_path(self.cwd) if self.cwd else self.resolve_path(".")

    def secrets(self) -> list[str]:
        return [*super().secrets(), *self.env.values(), *self.headers.values()]

    def display_url(self) -> str:
        """The URL without credentials or query, for messages."""
        parts = urllib.parse.urlsplit(self.url or "")
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"
