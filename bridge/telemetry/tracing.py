"""OpenTelemetry traces of the bridge, exported over OTLP/HTTP: a span for each frontend request
(`SERVER`), for the invocation pipeline (`execute_tool {tool}`) and its stages, and for each
upstream call (`CLIENT`), named and attributed per the OpenTelemetry conventions for MCP and
generative AI (`mcp.method.name`, `mcp.session.id`, `jsonrpc.request.id`,
`gen_ai.operation.name`, `gen_ai.tool.name`) and HTTP.

The sampler decides once per trace, where the trace enters the bridge (a frontend request, else
the pipeline): a trace it drops gets no span at all, and its upstream calls are passed the
caller's trace context, or a new one that says it is not sampled. The bridge keeps a tracer
provider of its own (never the process's global one) and imports the SDK only when tracing is
configured."""

from __future__ import annotations

import contextvars
import logging
import random
import threading
import time
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
from bridge.telemetry.export_child import SCOPE, ChildProcessor
from bridge.telemetry.spans import BridgeSpan, Spans, handed_to

__all__ = ["CallTrace", "Tracing", "traceparent_of"]

log = logging.getLogger("bridge.telemetry")

TOOL_CALL = {"gen_ai.operation.name": "execute_tool"}
# The MCP method an upstream kind's call is, for the attributes of the span of that call.
_METHODS = {"mcp": "tools/call"}
# The upstream kinds whose SDK passes on the current context, over what the adapter passes.
_CURRENT_KINDS = frozenset({"mcp"})
# What a ParentBased sampler that follows a caller's sampled flag says of its remote parents.
_FOLLOWS_CALLER = "remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler"
_NO_PARENT = otel_context.Context()
Passed = tuple[str, str | None]  # (traceparent, tracestate) passed on to an upstream
# The decision of the frontend request a call runs in: _KEPT (its span is current), else the
# trace context to pass on of a trace dropped; None: no frontend decided.
_decided: contextvars.ContextVar[Passed | None] = contextvars.ContextVar(
    "bridge_trace_decided", default=None
)
_KEPT: Passed = ("", None)
_ID_LIMIT = (1 << 64) - 1  # the bits of a trace id a ratio sampler reads


def traceparent_of(span: Span) -> Passed:
    """The W3C `traceparent` (and `tracestate`) naming `span` as the parent of what follows."""
    ctx = span.get_span_context()
    state = ctx.trace_state.to_header() if ctx.trace_state else None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}", state or None


def _parent(traceparent: str | None, tracestate: str | None) -> SpanContext | None:
    """A caller's span, from its (valid) W3C trace context, if it sent one."""
    return None if traceparent is None else _remote(traceparent, tracestate)


def _remote(traceparent: str, tracestate: str | None) -> SpanContext:
    """A caller's span, from its valid W3C trace context."""
    return SpanContext(
        trace_id=int(traceparent[3:35], 16),
        span_id=int(traceparent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(traceparent[53:55], 16)),
        trace_state=TraceState.from_header([tracestate]) if tracestate else None,
    )


class CallTrace:
    """The tracing of one call through the pipeline. Kept: its span, begun once the tool is
    known (`call_resolved`, with every attribute at once) or at the call's end (named for
    `ref`, the name the call was made with), dated from the call's start (`begun`), the child
    of `parent` (else the root of trace `root_id`) and the parent of the upstream's call and
    the stages. Dropped: no span, and `passed`, the trace context passed on to the upstream."""

    __slots__ = ("begun", "parent", "passed", "ref", "root_id", "span")

    def __init__(
        self,
        ref: str,
        passed: Passed | None = None,
        parent: SpanContext | None = None,
        root_id: int | None = None,
    ) -> None:
        self.ref = ref
        self.passed = passed
        self.parent = parent
        self.root_id = root_id  # the trace id a new trace was kept for
        self.begun = time.time_ns() if passed is None else 0
        self.span: BridgeSpan | None = None

    @property
    def trace_id(self) -> str:
        if self.span is not None:
            return f"{self.span.get_span_context().trace_id:032x}"
        if self.passed is not None:
            return self.passed[0][3:35]
        if self.root_id is not None:
            return f"{self.root_id:032x}"
        assert self.parent is not None
        return f"{self.parent.trace_id:032x}"


class _Current:
    """A span for a `with` block, current in it unless `current` is false, then ended; an
    exception marks it failed (with the error class of a BridgeError). The block gets
    `given`."""

    __slots__ = ("current", "given", "span", "token")

    def __init__(self, span: Span, given: Any = None, current: bool = True) -> None:
        self.span = span
        self.given = given
        self.current = current

    def __enter__(self) -> Any:
        if self.current:
            self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.given

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is not None:
            failed(self.span, getattr(exc, "error_class", None) or type(exc).__name__)
        if self.current:
            otel_context.detach(self.token)
        self.span.end()


class _Unsampled:
    """A request whose trace is dropped, for a `with` block."""

    __slots__ = ("passed", "token")

    def __init__(self, passed: Passed) -> None:
        self.passed = passed

    def __enter__(self) -> None:
        self.token = _decided.set(self.passed)

    def __exit__(self, *exc: object) -> None:
        _decided.reset(self.token)


class _Request(_Current):
    """A frontend request's span, current for a `with` block: the calls it makes are its
    children, the trace kept."""

    __slots__ = ("decided",)

    def __enter__(self) -> Any:
        self.decided = _decided.set(_KEPT)
        return super().__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        _decided.reset(self.decided)
        super().__exit__(kind, exc, tb)


class Tracing:
    """The tracer of one bridge. Its spans are exported over OTLP/HTTP by the span export
    child (`export_child`), else, if that cannot start, from a thread of the bridge's own;
    `exporter` replaces both (a test's, a benchmark's), behind the SDK's batch span processor
    on that thread."""

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
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        resource = Resource.create({"service.name": service_name})
        self.child: ChildProcessor | None = None
        if exporter is None:
            if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
                endpoint = endpoint.rstrip("/") + "/v1/traces"
            try:
                self.child = ChildProcessor(endpoint, resource)
            except OSError as exc:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )

                log.warning("spans are exported from a thread: no export child (%s)", exc)
                exporter = OTLPSpanExporter(endpoint=endpoint)  # None: the OTEL_* variables
        # a ratio of the traces begun here; a caller's sampled flag is followed (None: the
        # OTEL_TRACES_SAMPLER variables, else always, parent-based)
        sampler = None
        if sample_ratio is not None:
            sampler = ParentBased(
                ALWAYS_ON if sample_ratio >= 1 else TraceIdRatioBased(sample_ratio)
            )
        # the trace id a new trace was kept for, until its root span begins (`dropped`)
        self._decided = threading.local()
        self.provider = TracerProvider(sampler=sampler, resource=resource, shutdown_on_exit=False)
        self.sampler = self.provider.sampler  # asked once per trace (`dropped`)
        # a caller's sampled flag alone decides (read from its traceparent, without the SDK)
        self._follows_caller = _FOLLOWS_CALLER in self.sampler.get_description()
        # a new trace is kept when the low 64 bits of its id are under this (the ratio sampler's
        # own test, made without the SDK's call chain); None: the sampler is asked
        self._root_bound: int | None = None
        if sample_ratio is not None:
            self._root_bound = TraceIdRatioBased(min(sample_ratio, 1.0)).bound
        # the provider holds the processor (its shutdown exports what waits); the bridge's
        # spans, all of kept traces, are handed to it straight (`spans`), no tracer between
        if self.child is not None:
            self.provider.add_span_processor(self.child)
            self.spans = Spans(self.child.take)
        else:
            processor = BatchSpanProcessor(exporter)
            self.provider.add_span_processor(processor)
            scope = InstrumentationScope(SCOPE)
            self.spans = Spans(handed_to(processor, self.provider.resource, scope))
        logs.current_trace = _current_ids

    # ------------------------------------------------------------------ sampling

    def dropped(
        self, traceparent: str | None, tracestate: str | None, name: str = ""
    ) -> Passed | None:
        """The sampler's decision on the trace a request continues (the caller's valid trace
        context) or begins: None when it is kept, and then the next span begun here is that
        trace's; else the trace context to pass on instead of spans: the caller's, or a new
        one whose flags say it is not sampled."""
        if traceparent is not None:
            if self._follows_caller:
                sampled = int(traceparent[53:55], 16) & 1
            else:
                caller = NonRecordingSpan(_remote(traceparent, tracestate))
                sampled = self.sampler.should_sample(
                    trace.set_span_in_context(caller), int(traceparent[3:35], 16), name
                ).decision.is_sampled()
            return None if sampled else (traceparent, tracestate)
        trace_id, passed = self._new_trace(name)
        if passed is None:
            self._decided.trace_id = trace_id
        return passed

    def _new_trace(self, name: str) -> tuple[int, Passed | None]:
        """A new trace's id, and the sampler's decision on it as `dropped` gives it."""
        trace_id = random.getrandbits(128) or 1
        if self._root_bound is not None:
            sampled = trace_id & _ID_LIMIT < self._root_bound
        else:
            sampled = self.sampler.should_sample(_NO_PARENT, trace_id, name).decision.is_sampled()
        if sampled:
            return trace_id, None
        return trace_id, (f"00-{trace_id:032x}-{random.getrandbits(64) or 1:016x}-02", None)

    def unsampled(self, passed: Passed) -> _Unsampled:
        """A request whose trace is dropped, for a `with` block: its calls pass `passed` on."""
        return _Unsampled(passed)

    # ------------------------------------------------------------------ frontends

    def server_span(
        self,
        name: str,
        attributes: Mapping[str, Any],
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Span:
        """A frontend request's span, the child of the caller's (when it sent a trace context);
        `dropped` said the trace is kept."""
        parent = _parent(traceparent, tracestate)
        trace_id = None
        if parent is None:  # the new trace `dropped` kept
            trace_id, self._decided.trace_id = getattr(self._decided, "trace_id", None), None
        return self.spans.begin(name, SpanKind.SERVER, parent, attributes, trace_id)

    def active(self, span: Span) -> _Current:
        """A request's `span` current for a `with` block, then ended; an exception marks it
        failed."""
        return _Request(span, span)

    # ------------------------------------------------------------------ the pipeline

    def call_begun(self, ref: str, traceparent: str | None, tracestate: str | None) -> CallTrace:
        """The tracing of a call through the pipeline: kept, its span the child of the current
        one (a frontend's), else of the caller's trace context; dropped by the frontend's
        decision, else by the sampler's here."""
        passed = _decided.get()
        if passed is _KEPT:
            return CallTrace(ref, parent=trace.get_current_span().get_span_context())
        if passed is not None:
            return CallTrace(ref, passed)
        if traceparent is None:  # no frontend decided: decide here
            trace_id, passed = self._new_trace(ref)
            if passed is not None:
                return CallTrace(ref, passed)
            return CallTrace(ref, root_id=trace_id)
        passed = self.dropped(traceparent, tracestate, ref)
        if passed is not None:
            return CallTrace(ref, passed)
        return CallTrace(ref, parent=_parent(traceparent, tracestate))

    def call_resolved(self, call: CallTrace, tool: str, attributes: Mapping[str, Any]) -> None:
        """The call's span begins (dated from the call's start): `execute_tool {tool}`."""
        call.span = self.spans.begin(
            f"execute_tool {tool}",
            SpanKind.INTERNAL,
            call.parent,
            attributes,
            call.root_id,
            call.begun,
        )

    def call_ended(
        self,
        call: CallTrace,
        tool: str | None,
        attributes: Mapping[str, Any] | None,
        error_class: str | None,
    ) -> None:
        """A kept call's end: its span, begun now if it was not yet (`attributes` given then),
        ends."""
        if call.span is None:
            assert attributes is not None
            self.call_resolved(call, tool or call.ref, attributes)
        span = call.span
        assert span is not None
        if error_class is not None:
            failed(span, error_class)
        span.end()

    def stage(self, call: CallTrace, name: str) -> _Current:
        """A span for a stage of a kept call that does I/O (`persist`)."""
        assert call.span is not None
        return _Current(
            self.spans.begin(name, SpanKind.INTERNAL, call.span.context, None), current=False
        )

    def upstream_call(
        self, call: CallTrace, upstream: str, kind: str, native_name: str
    ) -> _Current:
        """The span of a kept call's upstream call (`CLIENT`, the child of the call's); the
        block gets its `traceparent` and `tracestate`, which the adapter passes on, and for a
        kind whose SDK passes on the current context itself (MCP's), the span is current."""
        method = _METHODS.get(kind)
        attributes = {
            **TOOL_CALL,
            "gen_ai.tool.name": native_name,
            "bridge.upstream.name": upstream,
            "bridge.upstream.kind": kind,
        }
        if method is not None:
            attributes["mcp.method.name"] = method
        assert call.span is not None
        span = self.spans.begin(
            f"{method or 'execute_tool'} {native_name}",
            SpanKind.CLIENT,
            call.span.context,
            attributes,
        )
        return _Current(span, traceparent_of(span), kind in _CURRENT_KINDS)

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
    """The ids of the span current, else of the trace context a dropped trace passes on."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
    passed = _decided.get()
    return (passed[0][3:35], passed[0][36:52]) if passed and passed is not _KEPT else None
