"""What the bridge tells about itself: Prometheus metrics, OpenTelemetry traces, logs (text or
JSON lines) and the audit stream of invocations. The pipeline and the frontends call it; it
imports nothing of the bridge but its records (`bridge.model`)."""

from __future__ import annotations

from bridge.telemetry.calls import CallOrigin, Telemetry
from bridge.telemetry.context import from_meta, valid_traceparent, valid_tracestate
from bridge.telemetry.logs import configure_logging, json_logs, say
from bridge.telemetry.metrics import Metrics

__all__ = [
    "CallOrigin",
    "Metrics",
    "Telemetry",
    "configure_logging",
    "from_meta",
    "json_logs",
    "say",
    "valid_traceparent",
    "valid_tracestate",
]
