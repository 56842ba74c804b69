"""The span export child: a process begun with the bridge's tracing and ended with it, which
takes the bridge's ended spans as compact tuples (pickled in batches through a pipe), rebuilds
them as the SDK's `ReadableSpan` and exports them with the SDK's OTLP/HTTP exporter behind the
SDK's batch span processor (which reads the `OTEL_BSP_*` and `OTEL_EXPORTER_OTLP_*` variables).

The SDK's OTLP encoder is pure Python, about 50 to 90 µs a span on 2 shared cores, and in the
bridge's process it holds the interpreter against the event loop; here the bridge pays a tuple
and a pipe write a span. The child stops when the pipe closes (the bridge stops, or dies), once
it has exported what it took; it ignores Ctrl-C and SIGTERM, which reach the bridge, so that the
spans the bridge still holds are taken on its way out. If the child dies, the bridge drops its
spans from then on and says so once.

Run by `ChildExporter` as `python -P export_child.py ENDPOINT` (empty: the `OTEL_*` variables);
it imports nothing of the bridge, so that it starts in the time the SDK takes to import."""

from __future__ import annotations

import contextlib
import logging
import pickle
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["ChildExporter"]

log = logging.getLogger("bridge.telemetry")

SCOPE = "a2t-bridge"  # the instrumentation scope of the bridge's spans
STOP_SECONDS = 30.0  # how long the bridge waits, stopping, for the child to export what it took
# (name, trace id, span id, flags, tracestate header, parent span id or 0, parent remote, kind,
# attributes, status code, status description, start ns, end ns): built-in types only
Compact = tuple[
    str, int, int, int, str, int, bool, int, dict[str, Any], int, str | None, int | None, int | None
]


def compact(span: ReadableSpan) -> Compact:
    ctx, parent, status = span.context, span.parent, span.status
    assert ctx is not None
    return (
        span.name,
        ctx.trace_id,
        ctx.span_id,
        int(ctx.trace_flags),
        ctx.trace_state.to_header() if ctx.trace_state else "",
        parent.span_id if parent is not None else 0,
        parent is not None and parent.is_remote,
        span.kind.value,
        dict(span.attributes or {}),
        status.status_code.value,
        status.description,
        span.start_time,
        span.end_time,
    )


class ChildExporter(SpanExporter):
    """The bridge's side: a span exporter (behind the SDK's batch span processor, on its
    thread) that writes each batch to the export child (`process`). `lost` counts the spans
    the child did not take, as it had stopped."""

    def __init__(self, endpoint: str | None, resource: Resource) -> None:
        self.lost = 0
        self.process = subprocess.Popen(
            [sys.executable, "-P", __file__, endpoint or ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # the bridge's stdout may be an MCP stdio stream
            start_new_session=True,  # out of reach of the terminal's Ctrl-C
        )
        self._stopped = False
        self._send(("resource", dict(resource.attributes), resource.schema_url))

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._send([compact(span) for span in spans]):
            return SpanExportResult.SUCCESS
        self.lost += len(spans)
        return SpanExportResult.FAILURE

    def _send(self, message: Any) -> bool:
        """Write one message to the child; False (and a warning, the first time) when it is
        gone."""
        if not self._stopped:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
                self.process.stdin.flush()
                return True
            except (OSError, ValueError):  # its end of the pipe closed
                self._stopped = True
                log.warning(
                    "the span export child stopped (exit code %s): spans are dropped from now on",
                    self.process.poll(),
                )
        return False

    def shutdown(self) -> None:
        """Close the pipe and wait for the child to export what it took."""
        self._stopped = True
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):  # it is gone: what it did not take is lost
            self.process.stdin.close()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("the span export child took over %gs to stop: ended", STOP_SECONDS)
            self.process.kill()
            self.process.wait()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _Plain(pickle.Unpickler):
    """Reads built-in types only: a message names no class to load."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not a span's field")


def _rebuilt(item: Compact, resource: Resource, scope: Any) -> ReadableSpan:
    from opentelemetry.trace import (
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
        TraceState,
    )

    name, trace_id, span_id, flags, state, parent_id, remote, kind, attributes = item[:9]
    code, description, start, end = item[9:]
    trace_state = TraceState.from_header([state]) if state else None
    parent = SpanContext(trace_id, parent_id, remote) if parent_id else None
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, False, TraceFlags(flags), trace_state),
        parent=parent,
        resource=resource,
        attributes=attributes,
        kind=SpanKind(kind),
        status=Status(StatusCode(code), description),
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )


def main(endpoint: str | None, source: IO[bytes]) -> None:
    """Export the spans read from `source` until it ends, then what is still waiting."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    _, attributes, schema_url = _Plain(source).load()
    resource, scope = Resource(attributes, schema_url), InstrumentationScope(SCOPE)
    processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
    try:
        while True:
            try:
                batch = _Plain(source).load()  # a message of its own: no memo of the last
            except EOFError:
                break
            for item in batch:
                processor.on_end(_rebuilt(item, resource, scope))
    finally:
        processor.shutdown()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(format="%(levelname)s span export child: %(message)s")
    main(sys.argv[1] or None, sys.stdin.buffer)
