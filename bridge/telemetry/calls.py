"""What the pipeline and the frontends report, in one object: `Telemetry` holds the metrics, the
access log and, when configured, the audit stream (and the tracer), and takes each call's facts
once, at its end. `CallOrigin` is who and what a frontend says a call came from."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from bridge.model import ToolDeclaration
from bridge.telemetry.audit import AuditLog
from bridge.telemetry.context import trace_id_of
from bridge.telemetry.logs import ACCESS_LOGGER, access_fields, access_text, json_logs
from bridge.telemetry.metrics import Metrics

__all__ = ["CallOrigin", "Telemetry"]


@dataclass(frozen=True, slots=True)
class CallOrigin:
    """Where a call came from: the frontend (`rest`, `mcp`, `cli`), the caller's token name
    (never the token), the caller's subject and client id (an OAuth token's `sub` and
    `client_id`; a static token's name as client id), and the caller's W3C trace context
    (`traceparent`, `tracestate`, valid ones only), with the MCP session and JSON-RPC request
    ids when it came over MCP."""

    frontend: str
    caller: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    session_id: str | None = None
    request_id: str | int | None = None
    subject: str | None = None
    client_id: str | None = None


class Telemetry:
    """The bridge's metrics, access log, audit stream and traces, as the runtime configured
    them: `audit_path` None writes no audit stream."""

    def __init__(self, *, tool_label: str = "top_100",
                 audit_path: str | os.PathLike[str] | None = None, audit_max_bytes: int = 100 << 20,
                 audit_keep: int = 10) -> None:
        self.metrics = Metrics(tool_label)
        self.audit = AuditLog(audit_path, audit_max_bytes, audit_keep) if audit_path else None
        if self.audit is not None:
            audit = self.audit
            self.metrics.gauge("bridge_audit_records_lost", "Audit records the audit file's disk "
                               "refused since the start", lambda: audit.dropped)
        self._access = logging.getLogger(ACCESS_LOGGER)

    def call_begun(self) -> None:
        self.metrics.in_flight += 1

    def call_ended(self, invocation_id: str, decl: ToolDeclaration | None, version: int | None,
                   surface: str, status: str, error_class: str | None, created_at: str,
                   seconds: float, upstream_seconds: float | None,
                   origin: CallOrigin | None) -> None:
        """One call's end, whatever its outcome (`error_class` None: it succeeded)."""
        outcome = error_class or "ok"
        upstream, tool = (decl.upstream, decl.name) if decl is not None else ("", "")
        self.metrics.call_ended(upstream, tool, surface, outcome, seconds, upstream_seconds)
        access = self._access.isEnabledFor(logging.INFO)
        if not access and self.audit is None:
            return
        trace_id = trace_id_of(origin.traceparent) if origin is not None else None
        frontend, caller = (origin.frontend, origin.caller) if origin is not None else (None, None)
        version = version if decl is not None else None
        if access:
            fields = access_fields(invocation_id, decl.name if decl else None, version, surface,
                                   frontend, caller, outcome, seconds, upstream_seconds, trace_id)
            text = f"call {fields['tool']} {outcome}" if json_logs() else access_text(fields)
            self._access.info(text, extra=fields)
        if self.audit is not None:
            self.audit.record({
                "time": created_at, "invocation_id": invocation_id, "caller": caller,
                "frontend": frontend, "surface": surface,
                "tool": decl.name if decl else None, "tool_id": decl.tool_id if decl else None,
                "upstream": decl.upstream if decl else None, "version": version,
                "outcome": outcome, "status": status, "error_class": error_class,
                "duration_ms": round(seconds * 1000, 3),
                "upstream_ms": None if upstream_seconds is None
                else round(upstream_seconds * 1000, 3),
                "trace_id": trace_id,
            })

    def searched(self, surface: str, seconds: float, matched: bool) -> None:
        self.metrics.searched(surface, seconds, matched)

    async def aclose(self) -> None:
        """Write out what is still buffered (audit records, spans)."""
        if self.audit is not None:
            await self.audit.aclose()
