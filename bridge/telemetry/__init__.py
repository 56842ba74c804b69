"""What the bridge tells about itself: Prometheus metrics, OpenTelemetry traces, logs (text or
JSON lines) and the audit stream of invocations. The pipeline and the frontends call it; it
imports nothing of the bridge but its records (`bridge.model`). The OpenTelemetry SDK is
imported only when tracing is configured (`configured_tracing`)."""

from __future__ import annotations

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
    from bridge.telemetry.tracing import Tracing, endpoint_configured

    if not endpoint_configured(endpoint):
        return None
    return Tracing(endpoint, service_name, sample_ratio)
