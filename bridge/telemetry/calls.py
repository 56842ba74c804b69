"""What the pipeline and the frontends report, in one object: `Telemetry` holds the metrics, the
access log and, when configured, the audit stream and the tracer, and takes each call's facts
once, at its end. `CallOrigin` is who and what a frontend says a call came from."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.model import ToolDeclaration
from bridge.telemetry.audit import AuditLog
from bridge.telemetry.audit_otlp import OtlpAudit
from bridge.telemetry.context import trace_id_of
from bridge.telemetry.logs import ACCESS_LOGGER, access_fields, access_text, json_logs
from bridge.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from bridge.telemetry.tracing import CallTrace, Tracing

__all__ = ["CallOrigin", "Telemetry"]

# What a stage of a call that is not traced enters: nothing, at no cost.
_UNTRACED: contextlib.nullcontext[None] = contextlib.nullcontext()


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
    them: `audit_path` None writes no audit stream, `tracing` None traces nothing (the caller's
    trace context is still passed on to the upstreams)."""

    def __init__(
        self,
        *,
        tool_label: str = "top_100",
        audit_path: str | os.PathLike[str] | None = None,
        audit_max_bytes: int = 100 << 20,
        audit_keep: int = 10,
        tracing: Tracing | None = None,
        audit_otlp: str | None = None,
        service_name: str = "a2t-bridge",
    ) -> None:
        self.metrics = Metrics(tool_label)
        self.tracing = tracing
        self.audit = AuditLog(audit_path, audit_max_bytes, audit_keep) if audit_path else None
        self.otlp_audit = OtlpAudit(audit_otlp, service_name) if audit_otlp else None
        sinks = [sink for sink in (self.audit, self.otlp_audit) if sink is not None]
        if sinks:
            self.metrics.gauge(
                "bridge_audit_records_lost",
                "Audit records lost since the start: refused by the audit file's disk, or not "
                "taken by the OTLP collector",
                lambda: sum(sink.dropped for sink in sinks),
            )
        if tracing is not None and tracing.child is not None:
            child = tracing.child
            self.metrics.gauge(
                "bridge_trace_spans_lost",
                "Spans lost since the start as the span export child had stopped",
                lambda: child.lost,
            )
        self._access = logging.getLogger(ACCESS_LOGGER)

    def call_begun(self, ref: str, origin: CallOrigin | None) -> CallTrace | None:
        """A call enters the pipeline; when tracing, its span begins (current until it ends)."""
        self.metrics.in_flight += 1
        if self.tracing is None:
            return None
        if origin is None:
            return self.tracing.call_begun(ref, None, None)
        return self.tracing.call_begun(ref, origin.traceparent, origin.tracestate)

    def call_resolved(
        self,
        trace: CallTrace | None,
        decl: ToolDeclaration,
        version: int,
        surface: str,
        invocation_id: str,
    ) -> None:
        """The call's tool is known: a kept call's span begins, with all its attributes."""
        if trace is None or trace.passed is not None or self.tracing is None:
            return
        self.tracing.call_resolved(
            trace, decl.name, _call_attributes(invocation_id, surface, decl, version)
        )

    def stage(self, trace: CallTrace | None, name: str) -> contextlib.AbstractContextManager[None]:
        """A stage of a call that does I/O (`persist`, a large result stored): a span when
        sampled. Resolving the name, validating the arguments and the permission check take
        microseconds and get none: a refusal there marks the call's span."""
        if trace is None or trace.passed is not None or self.tracing is None:
            return _UNTRACED
        return self.tracing.stage(trace, name)

    def upstream_call(
        self, trace: CallTrace | None, upstream: str, kind: str, native_name: str
    ) -> contextlib.AbstractContextManager[tuple[str, str | None] | None]:
        """The upstream's part of a traced call, as a span of its own (`CLIENT`), current for
        the block; gives the trace context naming it, which the adapter passes on (None when
        the call is not traced)."""
        if trace is None or self.tracing is None:
            return _UNTRACED
        if trace.passed is not None:  # dropped: the caller's context, or one saying not sampled
            return contextlib.nullcontext(trace.passed)
        return self.tracing.upstream_call(trace, upstream, kind, native_name)

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
        trace: CallTrace | None = None,
    ) -> None:
        """One call's end, whatever its outcome (`error_class` None: it succeeded)."""
        outcome = error_class or "ok"
        upstream, tool = (decl.upstream, decl.name) if decl is not None else ("", "")
        self.metrics.call_ended(upstream, tool, surface, outcome, seconds, upstream_seconds)
        if trace is not None and trace.passed is None and self.tracing is not None:
            self.tracing.call_ended(
                trace,
                decl.name if decl is not None else None,
                None
                if trace.span is not None
                else _call_attributes(invocation_id, surface, decl, version),
                error_class,
            )
        access = self._access.isEnabledFor(logging.INFO)
        if not access and self.audit is None and self.otlp_audit is None:
            return
        if trace is not None:
            trace_id: str | None = trace.trace_id
        else:
            trace_id = trace_id_of(origin.traceparent) if origin is not None else None
        frontend, caller = (origin.frontend, origin.caller) if origin is not None else (None, None)
        version = version if decl is not None else None
        if access:
            fields = access_fields(
                invocation_id,
                decl.name if decl else None,
                version,
                surface,
                frontend,
                caller,
                outcome,
                seconds,
                upstream_seconds,
                trace_id,
            )
            text = f"call {fields['tool']} {outcome}" if json_logs() else access_text(fields)
            self._access.info(text, extra=fields)
        if self.audit is not None or self.otlp_audit is not None:
            record = (
                created_at,
                invocation_id,
                caller,
                frontend,
                surface,
                decl.name if decl else None,
                decl.tool_id if decl else None,
                decl.upstream if decl else None,
                version,
                outcome,
                status,
                error_class,
                seconds,
                upstream_seconds,
                trace_id,
            )
            if self.audit is not None:
                self.audit.record(record)
            if self.otlp_audit is not None:
                self.otlp_audit.record(record)

    def searched(self, surface: str, seconds: float, matched: bool) -> None:
        self.metrics.searched(surface, seconds, matched)

    async def aclose(self) -> None:
        """Write out what is still buffered (audit records, spans)."""
        if self.audit is not None:
            await self.audit.aclose()
        if self.otlp_audit is not None:
            await self.otlp_audit.aclose()
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.close)


def _call_attributes(
    invocation_id: str, surface: str, decl: ToolDeclaration | None, version: int | None
) -> dict[str, Any]:
    """The attributes of a call's span: the tool's, once it is known."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.call.id": invocation_id,
        "bridge.surface": surface,
    }
    if decl is not None:
        attributes["gen_ai.tool.name"] = decl.name
        attributes["bridge.upstream.name"] = decl.upstream
        attributes["bridge.tool.version"] = version or decl.version
    return attributes
