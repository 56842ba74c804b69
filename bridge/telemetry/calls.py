"""What the pipeline and the frontends report, in one object: `Telemetry` holds the metrics, the
access log (and, when configured, the audit stream and the tracer) and takes each call's facts
once, at its end. `CallOrigin` is who and what a frontend says a call came from."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bridge.model import ToolDeclaration
from bridge.telemetry.context import trace_id_of
from bridge.telemetry.logs import ACCESS_LOGGER, access_fields, access_text, json_logs
from bridge.telemetry.metrics import Metrics

__all__ = ["CallOrigin", "Telemetry"]


@dataclass(frozen=True, slots=True)
class CallOrigin:
    """Where a call came from: the frontend (`rest`, `mcp`, `cli`), the caller's token name
    (never the token), and the caller's W3C trace context (`traceparent`, `tracestate`, valid
    ones only), with the MCP session and JSON-RPC request ids when it came over MCP."""

    frontend: str
    caller: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    session_id: str | None = None
    request_id: str | int | None = None


class Telemetry:
    """The bridge's metrics, logs, audit stream and traces, as the runtime configured them."""

    def __init__(self, *, tool_label: str = "top_100") -> None:
        self.metrics = Metrics(tool_label)
        self._access = logging.getLogger(ACCESS_LOGGER)

    def call_begun(self) -> None:
        self.metrics.in_flight += 1

    def call_ended(
        self,
        invocation_id: str,
        decl: ToolDeclaration | None,
        version: int | None,
        surface: str,
        status: str,
        error_class: str | None,
        created_at: str,
        seconds: float,
        upstream_seconds: float | None,
        origin: CallOrigin | None,
    ) -> None:
        """One call's end, whatever its outcome (`error_class` None: it succeeded)."""
        outcome = error_class or "ok"
        if decl is None:
            self.metrics.call_ended("", "", surface, outcome, seconds, upstream_seconds)
        else:
            self.metrics.call_ended(
                decl.upstream, decl.name, surface, outcome, seconds, upstream_seconds
            )
        if self._access.isEnabledFor(logging.INFO):
            trace_id = trace_id_of(origin.traceparent) if origin is not None else None
            fields = access_fields(
                invocation_id,
                decl.name if decl else None,
                version if decl else None,
                surface,
                origin.frontend if origin else None,
                origin.caller if origin else None,
                outcome,
                seconds,
                upstream_seconds,
                trace_id,
            )
            self._access.info(
                f"call {fields['tool']} {outcome}" if json_logs() else access_text(fields),
                extra=fields,
            )

    def searched(self, surface: str, seconds: float, matched: bool) -> None:
        self.metrics.searched(surface, seconds, matched)

    async def aclose(self) -> None:
        """Write out what is still buffered (audit records, spans)."""
