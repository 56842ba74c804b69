"""OpenTelemetry traces of the bridge, exported over OTLP/HTTP: a span for each frontend request
(`SERVER`), for the invocation pipeline (`execute_tool {tool}`) and its stages, and for each
upstream call (`CLIENT`), named and attributed per the OpenTelemetry conventions for MCP and
generative AI (`mcp.method.name`, `mcp.session.id`, `jsonrpc.request.id`,
`gen_ai.operation.name`, `gen_ai.tool.name`) and HTTP.

The bridge keeps a tracer provider of its own (never the process's global one) and imports the
SDK only when tracing is configured."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from bridge.telemetry import logs

__all__ = ["CallTrace", "Tracing", "endpoint_configured", "traceparent_of"]

ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TOOL_CALL = {"gen_ai.operation.name": "execute_tool"}
# The MCP method an upstream kind's call is, for the attributes of the span of that call.
_METHODS = {"mcp": "tools/call"}


def endpoint_configured(endpoint: str | None) -> bool:
    """Whether traces are to be exported: an endpoint in the config or the environment."""
    return bool(endpoint) or any(os.environ.get(name) for name in ENV_ENDPOINTS)


def traceparent_of(span: Span) -> tuple[str, str | None]:
    """The W3C `traceparent` (and `tracestate`) naming `span` as the parent of what follows."""
    ctx = span.get_span_context()
    state = ctx.trace_state.to_header() if ctx.trace_state else None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}", state or None


def _parent(traceparent: str | None, tracestate: str | None) -> otel_context.Context | None:
    """The context of a caller's span, from its (valid) W3C trace context."""
    if traceparent is None:
        return None
    remote = SpanContext(
        trace_id=int(traceparent[3:35], 16),
        span_id=int(traceparent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(traceparent[53:55], 16)),
        trace_state=TraceState.from_header([tracestate]) if tracestate else None,
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


class CallTrace:
    """The span of one call through the pipeline, current while the call runs; `token` None:
    the trace is not sampled, and the span was never made current. `ref` is the name the call
    was made with, which names the span until the tool is known."""

    __slots__ = ("ref", "span", "token")

    def __init__(
        self,
        span: Span,
        token: contextvars.Token[otel_context.Context] | None,
        ref: str | None = None,
    ) -> None:
        self.span = span
        self.token = token
        self.ref = ref


class _Current:
    """A span current for a `with` block, then ended; an exception marks it failed (with the
    error class of a BridgeError). The block gets `given`."""

    __slots__ = ("given", "span", "token")

    def __init__(self, span: Span, given: Any = None) -> None:
        self.span = span
        self.given = given

    def __enter__(self) -> Any:
        self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.given

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is not None:
            failed(self.span, getattr(exc, "error_class", None) or type(exc).__name__)
        otel_context.detach(self.token)
        self.span.end()


class Tracing:
    """The tracer of one bridge. `exporter` replaces the OTLP/HTTP one (a benchmark's)."""

    def __init__(
        self,
        endpoint: str | None = None,
        service_name: str = "a2t-bridge",
        sample_ratio: float | None = None,
        exporter: Any = None,
    ) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
                endpoint = endpoint.rstrip("/") + "/v1/traces"
            exporter = OTLPSpanExporter(
                endpoint=endpoint
            )  # None: the OTEL_EXPORTER_OTLP_* variables
        # a ratio of the traces begun here; a caller's sampled flag is followed (None: the
        # OTEL_TRACES_SAMPLER variables, else always, parent-based)
        sampler = None
        if sample_ratio is not None:
            sampler = ParentBased(
                ALWAYS_ON if sample_ratio >= 1 else TraceIdRatioBased(sample_ratio)
            )
        resource = Resource.create({"service.name": service_name})
        self.provider = TracerProvider(sampler=sampler, resource=resource, shutdown_on_exit=False)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("a2t-bridge")
        logs.current_trace = _current_ids

    # ------------------------------------------------------------------ frontends

    def server_span(
        self,
        name: str,
        attributes: Mapping[str, Any],
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Span:
        """A frontend request's span, the child of the caller's (when it sent a trace context)."""
        return self.tracer.start_span(
            name,
            _parent(traceparent, tracestate),
            SpanKind.SERVER,
            attributes,
            record_exception=False,
        )

    def active(self, span: Span) -> _Current:
        """`span` current for a `with` block, then ended; an exception marks it failed."""
        return _Current(span, span)

    # ------------------------------------------------------------------ the pipeline

    def call_begun(self, ref: str, traceparent: str | None, tracestate: str | None) -> CallTrace:
        """The span of a call through the pipeline: the child of the span current (a frontend's),
        else of the caller's trace context; current until `call_ended`. A call whose trace the
        sampler drops gets no span for its stages and upstream call: the upstream is passed this
        span's context, which says it is not sampled."""
        current = trace.get_current_span()
        context = current.get_span_context()
        if context.is_valid and not context.trace_flags.sampled:  # a frontend's span, dropped
            return CallTrace(current, None)
        parent = None if context.is_valid else _parent(traceparent, tracestate)
        span = self.tracer.start_span(
            f"execute_tool {ref}", parent, SpanKind.INTERNAL, TOOL_CALL, record_exception=False
        )
        if not span.is_recording():
            return CallTrace(span, None)
        return CallTrace(span, otel_context.attach(trace.set_span_in_context(span)), ref)

    def call_ended(
        self,
        call: CallTrace,
        tool: str | None,
        attributes: Mapping[str, Any],
        error_class: str | None,
    ) -> None:
        span = call.span
        if call.token is None:  # not sampled
            return
        if tool is not None and tool != call.ref:
            span.update_name(f"execute_tool {tool}")
        span.set_attributes(attributes)
        if error_class is not None:
            failed(span, error_class)
        otel_context.detach(call.token)
        span.end()

    def stage(self, name: str) -> _Current:
        """A span for a stage of a sampled call that does I/O (`persist`)."""
        return _Current(
            self.tracer.start_span(name, None, SpanKind.INTERNAL, None, record_exception=False)
        )

    def upstream_call(self, upstream: str, kind: str, native_name: str) -> _Current:
        """The span of a sampled call's upstream call (`CLIENT`, the child of the current one),
        current for the block (an SDK that propagates the current context, as MCP's does, names
        it too); the block gets its `traceparent` and `tracestate`."""
        method = _METHODS.get(kind)
        attributes = {
            **TOOL_CALL,
            "gen_ai.tool.name": native_name,
            "bridge.upstream.name": upstream,
            "bridge.upstream.kind": kind,
        }
        if method is not None:
            attributes["mcp.method.name"] = method
        span = self.tracer.start_span(
            f"{method or 'execute_tool'} {native_name}",
            None,
            SpanKind.CLIENT,
            attributes,
            record_exception=False,
        )
        return _Current(span, traceparent_of(span))

    def close(self) -> None:
        """Export the spans still waiting, then stop (blocks: call it off the event loop)."""
        if logs.current_trace is _current_ids:
            logs.current_trace = None
        self.provider.shutdown()


def failed(span: Span, error_type: str) -> None:
    if span.is_recording():
        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR))


def _current_ids() -> tuple[str, str] | None:
    ctx = trace.get_current_span().get_span_context()
    return (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}") if ctx.is_valid else None
