"""What the pipeline and the frontends report, in one object: `Telemetry` holds the metrics (and,
when configured, the access log, the audit stream and the tracer) and takes each call's facts
once, at its end. `CallOrigin` is who and what a frontend says a call came from."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.model import ToolDeclaration
from bridge.telemetry.metrics import Metrics

__all__ = ["CallOrigin", "Telemetry"]


@dataclass(frozen=True, slots=True)
class CallOrigin:
    """Where a call came from: the frontend (`rest`, `mcp`, `cli`), the caller's token name
    (never the token), and the caller's W3C trace context (`traceparent`, `tracestate`), with
    the MCP session and JSON-RPC request ids when it came over MCP."""

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

    def call_begun(self) -> None:
        self.metrics.in_flight += 1

    def call_ended(self, invocation_id: str, decl: ToolDeclaration | None, version: int | None, surface: str,
                   status: str, error_class: str | None, created_at: str, seconds: float,
                   upstream_seconds: float | None, origin: CallOrigin | None) -> None:
        """One call's end, whatever its outcome (`error_class` None: it succeeded)."""
        outcome = error_class or "ok"
        if decl is None:
            self.metrics.call_ended("", "", surface, outcome, seconds, upstream_seconds)
        else:
            self.metrics.call_ended(decl.upstream, decl.name, surface, outcome, seconds, upstream_seconds)

    def searched(self, surface: str, seconds: float, matched: bool) -> None:
        self.metrics.searched(surface, seconds, matched)

    async def aclose(self) -> None:
        """Write out what is still buffered (audit records, spans)."""
