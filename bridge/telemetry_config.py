"""The `telemetry`, `logging` and `audit` sections of the config: what the bridge tells about
itself (bridge/telemetry/, docs/operate.md). Numbers are strict: a flag where a number goes
(`max_mb: true`) is refused, as everywhere in the config."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AuditConfig", "LoggingConfig", "TelemetryConfig", "audit_problems"]


class TelemetryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metrics: bool = True  # GET /metrics served
    metrics_public: bool = False  # /metrics open without a token when server.tokens are set
    # the `tool` label of the call metrics: every tool, none, or the N busiest (top_N)
    tool_label: str = Field(default="top_100", pattern=r"^(all|none|top_[1-9][0-9]{0,4})$")
    # OTLP/HTTP traces: the collector's URL (else OTEL_EXPORTER_OTLP_ENDPOINT; neither: no traces)
    otlp_endpoint: str | None = None
    service_name: str = "a2t-bridge"
    # of the traces begun here (a caller's sampled flag is followed); none: OTEL_TRACES_SAMPLER
    sample_ratio: float | None = Field(default=None, strict=True, ge=0, le=1, allow_inf_nan=False)


class LoggingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["text", "json"] = "text"
    level: Literal["debug", "info", "warning", "error"] | None = None  # None: warning, info with -v


class AuditConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None  # a JSON-lines file of every invocation; none: no audit stream
    max_mb: int = Field(default=100, strict=True, ge=1)  # size at which the file is rotated
    keep: int = Field(default=10, strict=True, ge=1)  # rotated files kept: path.1 to path.N
    otlp: bool = False  # each record sent as an OTLP log record too
    # the OTLP/HTTP collector of the records; none: telemetry.otlp_endpoint, else the environment
    otlp_endpoint: str | None = None


def audit_problems(audit: AuditConfig, telemetry: TelemetryConfig) -> list[tuple[str, str, str]]:
    """`audit.otlp` with no collector named anywhere (the config or the environment)."""
    from bridge.telemetry.audit_otlp import logs_endpoint

    if audit.otlp and logs_endpoint(audit.otlp_endpoint or telemetry.otlp_endpoint) is None:
        return [
            (
                "audit.otlp",
                "is true, and no OTLP collector is named to send the records to",
                "set audit.otlp_endpoint or telemetry.otlp_endpoint (http://HOST:4318), or export "
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            )
        ]
    return []
