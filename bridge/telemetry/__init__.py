"""What the bridge tells about itself: Prometheus metrics, OpenTelemetry traces, logs (text or
JSON lines) and the audit stream of invocations. The pipeline and the frontends call it; it
imports nothing of the bridge but its records (`bridge.model`). The OpenTelemetry SDK is
imported only when tracing is configured (`configured_tracing`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bridge.telemetry.audit_otlp import logs_endpoint
from bridge.telemetry.calls import CallOrigin, Telemetry
from bridge.telemetry.context import from_meta, valid_traceparent, valid_tracestate
from bridge.telemetry.logs import configure_logging, json_logs, say
from bridge.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from bridge.telemetry.tracing import CallTrace as CallTrace
    from bridge.telemetry.tracing import Tracing

__all__ = [
    "CallOrigin",
    "Metrics",
    "Telemetry",
    "configure_logging",
    "configured_tracing",
    "from_meta",
    "json_logs",
    "logs_endpoint",
    "say",
    "valid_traceparent",
    "valid_tracestate",
]


def configured_tracing(
    endpoint: str | None, service_name: str, sample_ratio: float | None
) -> Tracing | None:
    """The tracer of a bridge whose config or environment names an OTLP endpoint, else None."""
    if not endpoint_configured(endpoint):
        return None
    from bridge.telemetry.tracing import Tracing

    return Tracing(endpoint, service_name, sample_ratio)


# where the environment names the OTLP endpoint of traces
ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def endpoint_configured(endpoint: str | None) -> bool:
    """Whether traces are to be exported: an endpoint in the config or the environment."""
    return bool(endpoint) or any(os.environ.get(name) for name in ENV_ENDPOINTS)
